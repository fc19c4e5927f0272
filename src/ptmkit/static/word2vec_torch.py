"""word2vec on PyTorch: synchronous batches of sparse SGD updates, for CUDA (and CPU).

The model is the one of :mod:`ptmkit.static.word2vec` (same vocabulary, subsampling, reduced
window, unigram^0.75 negatives, Huffman-tree hierarchical softmax, linear learning-rate decay,
initialisation and plain SGD); only the schedule of the updates differs.  The CPU kernel applies
one (centre, context) update after another (Hogwild); here a batch of ``batch_words`` centre
positions is turned into all its training examples at once by tensor ops, every gradient is
computed from the same parameters, and the updates are summed into the rows they touch with
``index_add_`` (no dense gradient, no optimiser state).  To first order in the learning rate a
batch moves the parameters as the same examples applied one by one, so both paths learn the same
model in expectation.

The first-order match needs small batches: a row that receives n updates in a batch moves by
their sum computed from its old value (one Euler step of n·alpha), whereas the sequential updates
saturate.  On PTB (Skip-gram-NS, 2 epochs, similarity structure of 500 frequent words against the
CPU kernel; two kernel seeds agree at 0.98) batches of 1024 centres agree at 0.95, 2048 (cap 32)
at 0.86, and 8192 fall apart (0.09 with a cap of 256, NaN without).  Hence the default ``BATCH_WORDS = 1024``, and
``row_scale`` caps the summed step of the few rows hit more than ``ROW_CAP`` times in a batch.

Per epoch, the id stream is cut at sentence boundaries into segments of ~``SEGMENT_WORDS`` words
moved to the device.  A segment is subsampled with one vectorised draw; windows are then formed
over the kept words (so dropped words do not count in the window distance, as in word2vec.c),
and a context position is valid iff it lies inside the segment, within the centre's reduced
window ``window - b`` (b ~ U{0..window-1}) and in the same sentence (equal sentence index).

Shapes: ``syn0`` [V, D] input vectors; ``syn1`` [V-1, D] inner nodes of the Huffman tree (HS);
``syn1neg`` [V, D] output vectors (NS).  Random draws come from one seeded ``torch.Generator`` on
the training device, so a run is reproducible given ``cfg.seed`` (bit for bit on CPU; on CUDA
``index_add_`` sums with atomics, whose order can change the last bits).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ptmkit.errors import PtmError
from ptmkit.static.huffman import HuffmanTree, build_huffman
from ptmkit.static.kernels.w2v import MAX_EXP
from ptmkit.static.sampling import init_input_vectors, keep_probabilities, negative_table
from ptmkit.static.vocab import IdCorpus, Vocab
from ptmkit.train.progress import progress as progress_display

log = logging.getLogger(__name__)

BATCH_WORDS = 1024  # centre positions per synchronous update (see train_on_ids_torch)
SEGMENT_WORDS = 1 << 24  # corpus words moved to the device at a time
MIN_STEPS = 100  # updates per epoch at least, on a small corpus
ROW_CAP = 256.0  # contributions a row takes at full weight per batch (see row_scale)


# ----------------------------------------------------------------------------- device


def resolve_device(device: str) -> torch.device:
    """The torch device of a ``Word2VecConfig.device``: "torch" = this path on the CPU, "cuda[:N]"."""
    if device == "torch":
        return torch.device("cpu")
    if device.startswith("cuda"):
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise PtmError(f"invalid device {device!r}; use 'cpu', 'torch' or 'cuda' / 'cuda:N'") from None
        if not torch.cuda.is_available():
            raise PtmError(
                f"device={device!r} but PyTorch sees no CUDA GPU; use device='cpu' (numba kernel) "
                "or device='torch' (this batched path on the CPU)"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise PtmError(f"device={device!r} but only {torch.cuda.device_count()} CUDA device(s) are visible")
        return dev
    raise PtmError(f"the batched PyTorch word2vec runs on device 'torch' (CPU) or 'cuda[:N]', got {device!r}")


# ----------------------------------------------------------------------------- schedule


def learning_rate(words_done: torch.Tensor | float, words_all: float, alpha0: float, min_alpha: float):
    """Linear decay ``alpha0 -> min_alpha`` over ``words_all`` words (word2vec), floored at ``min_alpha``.

    ``words_done``: words (before subsampling) already seen when an example is trained, any shape.
    """
    if isinstance(words_done, torch.Tensor):
        return (alpha0 - (alpha0 - min_alpha) * (words_done / words_all)).clamp_min(min_alpha)
    return max(min_alpha, alpha0 - (alpha0 - min_alpha) * words_done / words_all)


# ----------------------------------------------------------------------------- updates


def take(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[idx]`` for an index tensor of any shape: rows of ``x`` [N, ...] -> [*idx.shape, ...].

    ``index_select`` is several times faster than advanced indexing on CPU.
    """
    return x.index_select(0, idx.reshape(-1)).view(*idx.shape, *x.shape[1:])


def row_scale(rows: torch.Tensor, weight: torch.Tensor | None, n_rows: int, cap: float) -> torch.Tensor:
    """Factor min(1, cap / n_r) for each contribution to row r (shape of ``rows``).

    n_r counts the contributions (of nonzero ``weight``) to row r in this batch.  A sequential SGD
    saturates a row that receives many updates (its sigmoids move to 0/1); a batch sums them all
    from the same old value, which for the hottest rows (frequent words, the Huffman root)
    overshoots and diverges with large batches.  Capping each row's summed step at ``cap``
    contributions leaves rows with n_r <= cap exactly as plain SGD and bounds the others.
    """
    w = weight.reshape(-1) if weight is not None else None
    counts = torch.bincount(rows.reshape(-1), weights=w, minlength=n_rows).to(torch.float32)
    scale = (cap / counts.clamp_min(1.0)).clamp_max(1.0)
    return take(scale, rows)


def _sigmoid_saturated(f: torch.Tensor) -> torch.Tensor:
    """sigmoid(f), exactly 0 / 1 beyond ±MAX_EXP as word2vec's table (saturated examples stop learning)."""
    s = torch.sigmoid(f)
    return torch.where(f > MAX_EXP, torch.ones_like(s), torch.where(f < -MAX_EXP, torch.zeros_like(s), s))


def ns_update(
    syn1neg: torch.Tensor, h: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor, alpha: torch.Tensor,
    row_cap: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """Negative-sampling SGD step for hidden vectors ``h`` [P, D] predicting ``targets`` [P].

    negatives: [P, k] noise words (a noise word equal to the target is skipped, as word2vec.c).
    alpha: [P] learning rate of each example.  Adds ``alpha·∂log-lik/∂out`` into the rows of
    ``syn1neg`` and returns ``alpha·∂log-lik/∂h`` [P, D] (computed from the old rows), i.e. the
    ascent step of  log σ(h·v_t) + Σ_k log σ(-h·v_{n_k}).  ``row_cap``: see :func:`row_scale`.
    """
    words = torch.cat([targets[:, None], negatives], dim=1)  # [P, 1+k]
    label = torch.zeros(words.shape, dtype=h.dtype, device=h.device)
    label[:, 0] = 1.0
    weight = torch.ones_like(label)
    weight[:, 1:] = (negatives != targets[:, None]).to(h.dtype)
    out = take(syn1neg, words)  # [P, 1+k, D]
    f = torch.bmm(out, h[:, :, None]).squeeze(2)
    g = (label - _sigmoid_saturated(f)) * weight * alpha[:, None]  # [P, 1+k]
    grad_h = torch.bmm(g[:, None, :], out).squeeze(1)
    if row_cap is not None:
        g = g * row_scale(words, weight, syn1neg.shape[0], row_cap)
    syn1neg.index_add_(0, words.reshape(-1), (g[:, :, None] * h[:, None, :]).reshape(-1, h.shape[1]))
    return grad_h


def hs_update(
    syn1: torch.Tensor, h: torch.Tensor, codes: torch.Tensor, points: torch.Tensor, mask: torch.Tensor,
    alpha: torch.Tensor, row_cap: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """Hierarchical-softmax SGD step for hidden vectors ``h`` [P, D].

    codes, points: [P, L] Huffman code bits and inner nodes of each example's target (root first),
    mask: bool [P, L] the real (unpadded) part of each path.  The step ascends
    Σ_j (1-c_j) log σ(h·u_j) + c_j log σ(-h·u_j); nodes with |h·u_j| >= MAX_EXP are skipped, as in
    word2vec.c.  Updates ``syn1`` rows; returns the step for ``h`` [P, D] (from the old rows).
    ``row_cap``: see :func:`row_scale`.
    """
    p_idx, j_idx = mask.nonzero(as_tuple=True)  # flatten the ragged paths: [M]
    flat = p_idx * points.shape[1] + j_idx
    node = take(points.reshape(-1), flat)
    hp = take(h, p_idx)  # [M, D]
    u = take(syn1, node)
    f = (hp * u).sum(-1)
    g = (1.0 - take(codes.reshape(-1), flat).to(h.dtype) - torch.sigmoid(f)) * take(alpha, p_idx)
    g = torch.where(f.abs() < MAX_EXP, g, torch.zeros_like(g))
    grad_h = torch.zeros_like(h).index_add_(0, p_idx, g[:, None] * u)
    if row_cap is not None:
        g = g * row_scale(node, None, syn1.shape[0], row_cap)
    syn1.index_add_(0, node, g[:, None] * hp)
    return grad_h


@dataclass
class Params:
    """The trained matrices (on one device); ``syn1`` / ``syn1neg`` are None when unused."""

    syn0: torch.Tensor
    syn1: torch.Tensor | None = None
    syn1neg: torch.Tensor | None = None
    row_cap: float | None = None  # see row_scale; None = the plain sum of the batch's steps


@dataclass
class Tables:
    """Per-vocabulary lookup tensors on the training device.

    keep: float [V] subsampling keep probability; accept, alias: alias table [V] of the noise
    distribution; codes (int8), points (int64): [V, L] Huffman paths; lengths: int64 [V].
    """

    keep: torch.Tensor
    accept: torch.Tensor | None = None
    alias: torch.Tensor | None = None
    codes: torch.Tensor | None = None
    points: torch.Tensor | None = None
    lengths: torch.Tensor | None = None

    def draw_negatives(self, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
        """int64 ``shape`` words from the noise distribution (Walker alias method, exact)."""
        v = self.accept.shape[0]
        i = torch.randint(0, v, shape, generator=gen, device=self.accept.device)
        u = torch.rand(shape, generator=gen, device=self.accept.device)
        return torch.where(u < take(self.accept, i), i, take(self.alias, i))

    def paths(self, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Huffman codes, points, mask [P, L] of ``targets`` [P]."""
        width = self.codes.shape[1]
        mask = torch.arange(width, device=targets.device)[None, :] < take(self.lengths, targets)[:, None]
        return take(self.codes, targets), take(self.points, targets), mask


def predict_update(
    params: Params, tables: Tables, h: torch.Tensor, targets: torch.Tensor, alpha: torch.Tensor,
    negative: int, gen: torch.Generator,
) -> torch.Tensor:  # fmt: skip
    """Output-layer step (HS if ``params.syn1`` is set, NS if ``params.syn1neg`` is): grad for ``h``."""
    grad_h = torch.zeros_like(h)
    if params.syn1 is not None:
        grad_h += hs_update(params.syn1, h, *tables.paths(targets), alpha, params.row_cap)
    if params.syn1neg is not None:
        negatives = tables.draw_negatives((targets.shape[0], negative), gen)
        grad_h += ns_update(params.syn1neg, h, targets, negatives, alpha, params.row_cap)
    return grad_h


def skipgram_step(
    params: Params, tables: Tables, inputs: torch.Tensor, targets: torch.Tensor, alpha: torch.Tensor,
    negative: int, gen: torch.Generator,
) -> None:  # fmt: skip
    """Skip-gram: each context word's input vector ``syn0[inputs]`` [P] predicts the centre ``targets`` [P]."""
    h = take(params.syn0, inputs)
    step = predict_update(params, tables, h, targets, alpha, negative, gen)
    if params.row_cap is not None:
        step *= row_scale(inputs, None, params.syn0.shape[0], params.row_cap)[:, None]
    params.syn0.index_add_(0, inputs, step)


def cbow_step(
    params: Params, tables: Tables, bag_rows: torch.Tensor, bag_words: torch.Tensor, centres: torch.Tensor,
    alpha: torch.Tensor, negative: int, gen: torch.Generator, cbow_mean: bool = True,
) -> None:  # fmt: skip
    """CBOW: the mean (or sum) of each bag's input vectors predicts its centre word.

    bag_rows, bag_words: [M] flattened bags (example index, context word); centres, alpha: [B]
    (every example has a non-empty bag).  Each context vector receives the full step of the
    hidden vector (word2vec.c); with ``cbow_mean=False`` it is divided by the bag size (gensim).
    """
    count = torch.bincount(bag_rows, minlength=centres.shape[0]).to(params.syn0.dtype)[:, None]
    h = torch.zeros(centres.shape[0], params.syn0.shape[1], dtype=params.syn0.dtype, device=params.syn0.device)
    h.index_add_(0, bag_rows, take(params.syn0, bag_words))
    if cbow_mean:
        h /= count
    work = predict_update(params, tables, h, centres, alpha, negative, gen)
    if not cbow_mean:
        work /= count
    step = take(work, bag_rows)
    if params.row_cap is not None:
        step *= row_scale(bag_words, None, params.syn0.shape[0], params.row_cap)[:, None]
    params.syn0.index_add_(0, bag_words, step)


# ----------------------------------------------------------------------------- batches


@dataclass
class Batch:
    """Training examples of ``B`` consecutive kept centre positions.

    centres: int64 [B] centre words; ctx_rows, ctx_words: int64 [M] the (centre row, context word)
    pairs inside the reduced windows; alpha: [B] learning rate of each centre; raw_words: words of
    the corpus (before subsampling) this batch accounts for.
    """

    centres: torch.Tensor
    ctx_rows: torch.Tensor
    ctx_words: torch.Tensor
    alpha: torch.Tensor
    raw_words: float


def segment_bounds(sentences: np.ndarray, segment_words: int) -> np.ndarray:
    """int64 [G+1] sentence indices cutting the corpus into segments of about ``segment_words`` words."""
    targets = np.arange(0, int(sentences[-1]), segment_words, dtype=np.int64)
    cuts = np.unique(np.searchsorted(sentences[:-1], targets, side="left"))
    return np.unique(np.concatenate([[0], cuts, [sentences.shape[0] - 1]])).astype(np.int64)


def iter_batches(
    corpus: IdCorpus, keep: torch.Tensor, window: int, epochs: int, alpha0: float, min_alpha: float,
    gen: torch.Generator, batch_words: int = BATCH_WORDS, segment_words: int = SEGMENT_WORDS,
) -> Iterator[tuple[int, Batch]]:  # fmt: skip
    """Yield ``(epoch, batch)`` over ``epochs`` passes, every random draw from ``gen``.

    All steps are tensor ops on ``keep.device``: subsampling (a word w survives with probability
    keep[w]), reduced windows (offset matrix [B, 2·window] masked by the window size, the segment
    ends and sentence identity) and the per-word learning rate of the linear schedule.
    """
    device = keep.device
    n_total = float(corpus.n_words)
    words_all = n_total * epochs
    bounds = segment_bounds(corpus.sentences, segment_words)
    offsets = torch.cat([torch.arange(-window, 0), torch.arange(1, window + 1)]).to(device)  # [2W]
    dist = offsets.abs()
    for epoch in range(epochs):
        for s0, s1 in zip(bounds[:-1], bounds[1:]):
            w0, w1 = int(corpus.sentences[s0]), int(corpus.sentences[s1])
            ids = torch.from_numpy(np.asarray(corpus.ids[w0:w1], dtype=np.int64)).to(device)
            lens = torch.from_numpy(np.diff(corpus.sentences[s0 : s1 + 1])).to(device)
            sent = torch.repeat_interleave(torch.arange(lens.shape[0], device=device), lens)
            kept = (torch.rand(ids.shape[0], generator=gen, device=device) < take(keep, ids)).nonzero().squeeze(1)
            words, sent_k = take(ids, kept), take(sent, kept)
            n = int(words.shape[0])
            raw_per_kept = (w1 - w0) / max(n, 1)
            if n == 0:
                yield epoch, _empty_batch(device, float(w1 - w0))
                continue
            for a in range(0, n, batch_words):
                b = min(n, a + batch_words)
                pos = torch.arange(a, b, device=device)
                reduced = window - torch.randint(0, window, (b - a,), generator=gen, device=device)
                cpos = pos[:, None] + offsets[None, :]  # [B, 2W]
                inside = (cpos >= 0) & (cpos < n)
                cpos = cpos.clamp(0, n - 1)
                same_sentence = take(sent_k, cpos) == take(sent_k, pos)[:, None]
                valid = inside & (dist[None, :] <= reduced[:, None]) & same_sentence
                rows, cols = valid.nonzero(as_tuple=True)
                done = epoch * n_total + w0 + take(kept, pos).to(torch.float64)
                yield epoch, Batch(
                    centres=take(words, pos),
                    ctx_rows=rows,
                    ctx_words=take(words, take(cpos.reshape(-1), rows * offsets.shape[0] + cols)),
                    alpha=learning_rate(done, words_all, alpha0, min_alpha).to(torch.float32),
                    raw_words=(b - a) * raw_per_kept,
                )


def _empty_batch(device: torch.device, raw_words: float) -> Batch:
    empty = torch.zeros(0, dtype=torch.int64, device=device)
    return Batch(empty, empty, empty, torch.zeros(0, device=device), raw_words)


# ----------------------------------------------------------------------------- training


def make_tables(vocab: Vocab, cfg, device: torch.device, tree: HuffmanTree | None = None) -> Tables:
    """Subsampling, noise and Huffman tables of ``vocab`` on ``device`` (the CPU path's, from :mod:`.sampling`)."""
    tables = Tables(keep=torch.from_numpy(keep_probabilities(vocab.counts, cfg.sample)).to(device))
    if cfg.loss == "ns":
        accept, alias = negative_table(vocab.counts, cfg.ns_exponent)
        tables.accept = torch.from_numpy(accept).to(device)
        tables.alias = torch.from_numpy(alias.astype(np.int64)).to(device)
    else:
        tree = tree if tree is not None else build_huffman(vocab.counts)
        tables.codes = torch.from_numpy(tree.codes.astype(np.int8)).to(device)
        tables.points = torch.from_numpy(tree.points.astype(np.int64)).to(device)
        tables.lengths = torch.from_numpy(tree.lengths.astype(np.int64)).to(device)
    return tables


def default_batch_words(n_words: int) -> int:
    """``BATCH_WORDS``, or fewer on a small corpus so that an epoch makes at least ``MIN_STEPS`` updates."""
    return int(min(BATCH_WORDS, max(64, n_words // MIN_STEPS)))


def train_on_ids_torch(
    vocab: Vocab, corpus: IdCorpus, cfg, progress: bool = True, tree: HuffmanTree | None = None,
    batch_words: int | None = None, segment_words: int = SEGMENT_WORDS, row_cap: float | None = ROW_CAP,
) -> tuple[np.ndarray, dict]:  # fmt: skip
    """Train word2vec with batched sparse SGD on ``cfg.device``; returns (syn0 float32 [V, dim], stats).

    ``cfg``: a ``Word2VecConfig``.  ``batch_words``: centre positions per synchronous update
    (None: :func:`default_batch_words`); larger batches run faster on a GPU but sum more updates
    computed from the same (stale) parameters, which matters for the most frequent words;
    ``row_cap`` bounds how many of them a row takes at full weight per batch (:func:`row_scale`;
    None = the plain sum).  ``tree`` as in ``train_on_ids``.
    """
    if batch_words is None:
        batch_words = default_batch_words(corpus.n_words)
    if batch_words < 1 or segment_words < 1:
        raise PtmError(f"batch_words and segment_words must be >= 1, got {batch_words} and {segment_words}")
    if row_cap is not None and row_cap <= 0:
        raise PtmError(f"row_cap must be > 0 (or None for no cap), got {row_cap}")
    device = resolve_device(getattr(cfg, "device", "torch"))
    if cfg.loss == "hs" and len(vocab) < 2:
        raise PtmError("hierarchical softmax needs at least 2 words in the vocabulary")
    v, dim = len(vocab), cfg.dim
    gen = torch.Generator(device=device)
    gen.manual_seed(int(cfg.seed))
    params = Params(torch.from_numpy(init_input_vectors(v, dim, cfg.seed)).to(device), row_cap=row_cap)
    if cfg.loss == "hs":
        params.syn1 = torch.zeros(v - 1, dim, device=device)
    else:
        params.syn1neg = torch.zeros(v, dim, device=device)
    tables = make_tables(vocab, cfg, device, tree)
    desc = f"word2vec {cfg.model}-{cfg.loss} ({device.type})"
    log.info("%s: %d words, %d tokens, dim %d, batch %d", desc, v, corpus.n_words, dim, batch_words)
    words_all = float(corpus.n_words) * cfg.epochs
    effective = 0
    threads = torch.get_num_threads()
    if device.type == "cpu" and cfg.workers > 0:  # on a shared machine fewer threads spin less
        torch.set_num_threads(cfg.workers)
    bar = progress_display(int(words_all), desc=desc, unit="w", unit_scale=True, disable=not progress)
    t0 = time.perf_counter()
    try:
        for _, batch in iter_batches(
            corpus, tables.keep, cfg.window, cfg.epochs, cfg.start_alpha, cfg.end_alpha, gen,
            batch_words, segment_words,
        ):  # fmt: skip
            effective += int(batch.centres.shape[0])
            if batch.ctx_rows.numel():
                train_batch(params, tables, batch, cfg, gen)
            bar.update(batch.raw_words)
    finally:
        bar.close()
        torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    stats = {
        "words": int(words_all),
        "effective_words": effective,
        "seconds": seconds,
        "words_per_second": words_all / max(seconds, 1e-9),
        "device": str(device),
        "batch_words": batch_words,
        "row_cap": row_cap,
    }
    log.info("%s: %d words in %.1f s (%.0f words/s)", desc, stats["words"], seconds, stats["words_per_second"])
    return params.syn0.float().cpu().numpy(), stats


def train_batch(params: Params, tables: Tables, batch: Batch, cfg, gen: torch.Generator) -> None:
    """One synchronous update from all examples of ``batch`` (Skip-gram pairs or CBOW bags)."""
    negative = cfg.negative if cfg.loss == "ns" else 0
    if cfg.model == "skipgram":
        skipgram_step(
            params, tables, batch.ctx_words, take(batch.centres, batch.ctx_rows), take(batch.alpha, batch.ctx_rows),
            negative, gen,
        )
        return
    # CBOW: drop centres whose window is empty (a one-word sentence), renumber the bags
    has_ctx = torch.zeros(batch.centres.shape[0], dtype=torch.bool, device=batch.centres.device)
    has_ctx[batch.ctx_rows] = True
    new_row = torch.cumsum(has_ctx, 0) - 1
    cbow_step(
        params, tables, new_row[batch.ctx_rows], batch.ctx_words, batch.centres[has_ctx], batch.alpha[has_ctx],
        negative, gen, cfg.cbow_mean,
    )  # fmt: skip


__all__ = [
    "Batch",
    "Params",
    "Tables",
    "cbow_step",
    "hs_update",
    "iter_batches",
    "learning_rate",
    "make_tables",
    "ns_update",
    "resolve_device",
    "skipgram_step",
    "train_on_ids_torch",
]
