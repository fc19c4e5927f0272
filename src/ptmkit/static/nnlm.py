"""Neural probabilistic language model (Bengio, Ducharme, Vincent & Jauvin 2003).

For the ``n-1`` previous words ``w_{t-n+1} .. w_{t-1}``::

    x = [C(w_{t-n+1}), ..., C(w_{t-1})]        # [B, (n-1) m], C: [V+1, m] shared word features
    y = b + W x + U tanh(d + H x)               # [B, V]; W: direct connections (optional)
    P(w_t | context) = softmax(y)

Sentences are scored as ``<s>^(n-1) w_1 .. w_n </s>`` (the same predictions as
:class:`~ptmkit.static.kneser_ney.KneserNeyTrigram`), so perplexities and per-token
mixtures of the two models line up.  Words seen fewer than ``min_count`` times in the training
text become ``<unk>`` (Bengio et al. merged the rare Brown words into one symbol).

The model is an ``nn.Module`` whose ``forward(batch) -> StepOutput``; :class:`NGramWindows` is
its batch source (a pure function of ``(epoch, step)``) and :func:`train_nnlm` trains it with
the shared :class:`~ptmkit.train.trainer.Trainer` (AdamW with linear LR decay, where the paper
used plain SGD), early-stopping on validation perplexity.  The output softmax dominates the cost
(V = 17.7k words on Brown); :func:`ptmkit.nn.linear_ce.linear_cross_entropy` computes it slice
by slice over the vocabulary, which keeps the ``[B, V]`` logits out of memory and halves the
step time on a small CPU.  The feature matrix ``C`` is exported as
:class:`~ptmkit.static.vectors.WordVectors`.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.nn.linear_ce import linear_cross_entropy, target_log_probs
from ptmkit.registry import register
from ptmkit.static.configs import as_config
from ptmkit.static.kneser_ney import pad_sentences
from ptmkit.static.output import check_out_dir, save_run
from ptmkit.static.vectors import WordVectors
from ptmkit.static.vocab import Vocab, count_corpus, encode, iter_line_chunks, vocab_from_counts
from ptmkit.train.config import TrainConfig
from ptmkit.train.step import StepOutput
from ptmkit.train.trainer import Trainer

log = logging.getLogger(__name__)

UNK, EOS, BOS = "<unk>", "</s>", "<s>"


# ----------------------------------------------------------------------------- vocabulary


@dataclass
class LMVocab(Vocab):
    """Closed vocabulary of a language model: a :class:`~ptmkit.static.vocab.Vocab` whose last two
    words are ``<unk>`` and ``</s>``; ``<s>`` gets the extra id ``V`` (context only, never predicted).

    counts: int64 [V] training counts; ``<unk>``'s is the total of the words it stands for,
    ``</s>``'s the number of sentences.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        self.unk, self.eos, self.bos = self.index[UNK], self.index[EOS], len(self.words)


def _paths(files: str | os.PathLike | list) -> list[Path]:
    return [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]


def build_lm_vocab(files: str | os.PathLike | list, min_count: int = 3, lowercase: bool = False,
                   max_sentences: int | None = None) -> LMVocab:
    """Words of ``files`` seen at least ``min_count`` times, most frequent first, + ``<unk>``, ``</s>``.

    Only the first ``max_sentences`` non-blank lines are counted when given (the rest being
    held out for validation must not shape the vocabulary).  Counting and the choice of words
    are word2vec's (:mod:`ptmkit.static.vocab`); the symbols ``<unk>``, ``</s>`` and ``<s>``
    written in the text are never words of their own.
    """
    files = _paths(files)
    counter, n_sent = count_corpus(files, lowercase, max_sentences)
    if not counter:
        raise PtmError(f"no words in {', '.join(map(str, files))}")
    kept = vocab_from_counts({w: c for w, c in counter.items() if w not in (UNK, EOS, BOS)}, min_count)
    unk = sum(c for w, c in counter.items() if c < min_count or w == UNK)
    return LMVocab(kept.words + [UNK, EOS], np.concatenate([kept.counts, np.array([unk, n_sent], dtype=np.int64)]))


def encode_lm(files: str | os.PathLike | list, vocab: LMVocab, lowercase: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Ids of every word of ``files`` (unknown words -> ``<unk>``) and sentence offsets.

    Returns ``(ids int64 [N], offsets int64 [S+1])``; blank lines are skipped, long sentences
    are not split (the language model sees each whole, as the Kneser-Ney model does).
    """
    corpus = encode(_paths(files), vocab, lowercase, max_sentence_len=None, unk=vocab.unk)
    return corpus.ids.astype(np.int64), corpus.sentences


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class NNLMConfig:
    """order: n (the model sees n-1 previous words); dim: m (word features); hidden: h (0: no
    hidden layer); direct: direct connections W from the features to the output; dropout: on the
    features x and the hidden units (a modern regulariser; 0 = the paper's model).

    The default is a quick model; :meth:`paper` gives Bengio et al.'s best Brown MLP
    (n=5, m=60, h=50, direct connections; their Table 1, MLP1).
    """

    order: int = 4
    dim: int = 32
    hidden: int = 64
    direct: bool = False
    min_count: int = 3
    dropout: float = 0.0

    @classmethod
    def paper(cls, hidden: int = 50, direct: bool = True) -> "NNLMConfig":
        return cls(order=5, dim=60, hidden=hidden, direct=direct)

    def __post_init__(self) -> None:
        if self.order < 2 or self.dim < 1 or self.hidden < 0:
            raise PtmError(f"NNLM needs order >= 2, dim >= 1, hidden >= 0; got {self}")
        if self.hidden == 0 and not self.direct:
            raise PtmError("an NNLM without a hidden layer needs direct connections (direct=True)")
        if not 0.0 <= self.dropout < 1.0:
            raise PtmError(f"NNLM dropout must lie in [0, 1); got {self.dropout}")


class NNLM(nn.Module):
    """Bengio et al.'s MLP language model.

    Parameters: ``C.weight`` [V+1, m] (row V = ``<s>``), ``H`` [h, (n-1)m] + ``d`` [h],
    ``U`` [V, h], ``W`` [V, (n-1)m] (if direct), ``b`` [V].
    """

    slice_size = 256  # vocabulary slice of the output layer: a [B, 256] block stays in cache (see linear_ce)

    def __init__(self, vocab_size: int, cfg: NNLMConfig):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        in_dim = (cfg.order - 1) * cfg.dim
        self.C = nn.Embedding(vocab_size + 1, cfg.dim)
        nn.init.uniform_(self.C.weight, -0.1, 0.1)
        self.H = nn.Linear(in_dim, cfg.hidden) if cfg.hidden else None  # bias = d
        self.U = nn.Linear(cfg.hidden, vocab_size, bias=False) if cfg.hidden else None
        self.W = nn.Linear(in_dim, vocab_size, bias=False) if cfg.direct else None
        self.b = nn.Parameter(torch.zeros(vocab_size))
        self.drop = nn.Dropout(cfg.dropout)

    def output_input(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """context: int64 [B, n-1] (oldest first) -> (a [B, K], A [V, K]) with ``y = b + a A^T``.

        a = [tanh(d + H x), x] and A = [U, W] (each part only if present), so the output layer is
        one matrix product: ``U tanh(d + H x) + W x = [U W] [tanh(d + H x); x]``.
        """
        x = self.drop(self.C(context).flatten(1))  # [B, (n-1) m]
        parts, weights = [], []
        if self.H is not None:
            parts.append(self.drop(torch.tanh(self.H(x))))
            weights.append(self.U.weight)
        if self.W is not None:
            parts.append(x)
            weights.append(self.W.weight)
        if len(parts) == 1:
            return parts[0], weights[0]
        return torch.cat(parts, 1), torch.cat(weights, 1)

    def logits(self, context: torch.Tensor) -> torch.Tensor:
        """context: int64 [B, n-1] (oldest first) -> unnormalised log-probabilities [B, V]."""
        a, A = self.output_input(context)
        return torch.addmm(self.b, a, A.T)

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """batch: ``context`` int64 [B, n-1], ``target`` int64 [B]; loss = mean cross-entropy."""
        a, A = self.output_input(batch["context"])
        loss = linear_cross_entropy(a, A, self.b, batch["target"], vocab_slice=self.slice_size)
        B = batch["target"].shape[0]
        return StepOutput(loss=loss, metrics={}, n_tokens=B, n_predictions=B)

    @torch.no_grad()
    def log_probs(self, source: "NGramWindows") -> np.ndarray:
        """Natural-log probability of every target of ``source`` in order, float64 [N]."""
        was = self.training
        self.eval()
        dev = next(self.parameters()).device
        out = []
        try:
            for batch in source.eval_batches():
                a, A = self.output_input(batch["context"].to(dev))
                lp = target_log_probs(a.float(), A.float(), self.b.float(), batch["target"].to(dev),
                                      vocab_slice=self.slice_size)
                out.append(lp.double().cpu().numpy())
        finally:
            self.train(was)
        return np.concatenate(out)

    def word_vectors(self, vocab: LMVocab):
        """The feature matrix C (without the ``<s>`` row) as WordVectors [V, m]."""
        return WordVectors(list(vocab.words), self.C.weight[: len(vocab)].detach().float().cpu().numpy(), vocab.counts)


# ----------------------------------------------------------------------------- batches


class NGramWindows:
    """(context, target) windows of a padded corpus; implements ``BatchSource``.

    padded: int64 [P] ids with ``n-1`` ``<s>`` before and ``</s>`` after every sentence;
    targets: int64 [N] positions of the predicted symbols in ``padded``.
    ``__call__(epoch, step)`` = rows ``step*B .. (step+1)*B`` of a permutation seeded by
    ``(seed, epoch)``: a pure function, so a resumed run sees the same batches.
    """

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, vocab: LMVocab, order: int, batch_size: int,
                 seed: int = 0, eval_batch_size: int = 1024):
        self.order = order
        self.padded, self.targets = pad_sentences(ids, offsets, vocab.bos, vocab.eos, order - 1)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.seed = seed
        self.steps_per_epoch = self.targets.shape[0] // batch_size
        self._perm_epoch, self._perm = -1, None
        self._offsets = np.arange(-(order - 1), 0, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def _rows(self, pos: np.ndarray) -> dict[str, torch.Tensor]:
        ctx = self.padded[pos[:, None] + self._offsets]
        return {"context": torch.from_numpy(ctx), "target": torch.from_numpy(self.padded[pos])}

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng((self.seed, epoch)).permutation(self.targets.shape[0])
            self._perm_epoch = epoch
        rows = self._perm[step * self.batch_size:(step + 1) * self.batch_size]
        return self._rows(self.targets[rows])

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        for lo in range(0, self.targets.shape[0], self.eval_batch_size):
            yield self._rows(self.targets[lo:lo + self.eval_batch_size])


# ----------------------------------------------------------------------------- training


class _EarlyStop(Exception):
    pass


class EarlyStopping:
    """Trainer callback: after each evaluation keep the best weights (lowest eval loss) and stop
    after ``patience`` evaluations without improvement, or once ``deadline`` (a
    ``time.perf_counter()`` value) has passed."""

    def __init__(self, patience: int, deadline: float | None = None):
        self.patience = patience
        self.deadline = deadline
        self.best = math.inf
        self.best_step = 0
        self.best_state: dict | None = None
        self.bad = 0
        self.history: list[tuple[int, float]] = []
        self.reason = ""

    def __call__(self, trainer, step: int) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.reason = "time budget"
            raise _EarlyStop()
        ev = trainer.last_eval
        if not ev or ev.get("step") != step or (self.history and self.history[-1][0] == step):
            return
        self.history.append((step, float(ev["loss"])))
        if ev["loss"] < self.best - 1e-4:
            self.best, self.best_step, self.bad = float(ev["loss"]), step, 0
            self.best_state = copy.deepcopy(trainer.model.state_dict())
        else:
            self.bad += 1
            if self.bad >= self.patience:
                self.reason = f"no improvement in {self.patience} evaluations"
                raise _EarlyStop()


def default_train_config(batch_size: int = 512, lr: float = 2e-3, max_steps: int = 2000, eval_every: int = 500,
                         **kw) -> "TrainConfig":
    """AdamW (the paper used plain SGD; Adam converges in far fewer epochs), linear decay after a short
    warmup, gradient clipping; evaluation over the whole validation set."""
    base = dict(batch_size=batch_size, lr=lr, max_steps=max_steps, eval_every=eval_every, eval_batches=10**6,
                schedule="linear", warmup_steps=min(200, max_steps // 10), weight_decay=0.0, clip_norm=1.0,
                device="cpu", log_every=100)
    return TrainConfig(**{**base, **kw})


def train_nnlm(
    train: tuple[np.ndarray, np.ndarray],
    valid: tuple[np.ndarray, np.ndarray],
    vocab: LMVocab,
    cfg: NNLMConfig = NNLMConfig(),
    train_cfg=None,
    run_dir: str | os.PathLike | None = None,
    patience: int = 2,
    max_seconds: float | None = None,
    callbacks: tuple = (),
) -> tuple[NNLM, dict]:
    """Train an NNLM on ``train`` = (ids, offsets) with the shared Trainer.

    Evaluates on ``valid`` every ``train_cfg.eval_every`` steps, keeps the weights with the lowest
    validation loss and stops after ``patience`` evaluations without improvement, or after
    ``max_seconds`` of training (wall clock).  ``callbacks`` are passed on to the Trainer (called
    after every step, after the early-stopping check).  Returns the model (best weights) and stats
    (``valid_ppl``, ``best_step``, ``steps``, ``epochs``, ``stop_reason``, ``history``).
    """
    if train_cfg is None:
        train_cfg = default_train_config()
    source = NGramWindows(*train, vocab, cfg.order, train_cfg.batch_size, seed=train_cfg.seed)
    valid_source = NGramWindows(*valid, vocab, cfg.order, train_cfg.batch_size, seed=train_cfg.seed)
    if source.steps_per_epoch == 0:
        raise PtmError(f"{len(source)} training windows are fewer than one batch of {train_cfg.batch_size}; "
                       "lower the batch size")
    torch.manual_seed(train_cfg.seed)
    model = NNLM(len(vocab), cfg)
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    stopper = EarlyStopping(patience, deadline)
    trainer = Trainer(model, source, train_cfg, run_dir=run_dir, eval_batches=valid_source, callbacks=[stopper, *callbacks])
    try:
        trainer.fit()
        stopper.reason = "max_steps"
    except _EarlyStop:
        pass
    ev = trainer.last_eval if trainer.last_eval.get("step") == trainer.step else trainer.evaluate()
    if not stopper.history or stopper.history[-1][0] != trainer.step:
        stopper.history.append((trainer.step, float(ev["loss"])))
    if stopper.best_state is not None and stopper.best < ev["loss"]:
        model.load_state_dict(stopper.best_state)
    else:
        stopper.best, stopper.best_step = float(ev["loss"]), trainer.step
    stats = {
        "valid_ppl": math.exp(stopper.best),
        "best_step": stopper.best_step,
        "steps": trainer.step,
        "stop_reason": stopper.reason,
        "early_stopped": stopper.reason != "max_steps",
        "history": stopper.history,
        "epochs": trainer.step / max(1, source.steps_per_epoch),
    }
    return model, stats


# ----------------------------------------------------------------------------- static-model entry


@dataclass(frozen=True)
class NNLMTrainConfig:
    """``ptm pretrain nnlm`` settings: the model (:class:`NNLMConfig`'s fields), the vocabulary
    and the training length.

    The last ``valid_fraction`` of the sentences is held out (it shapes neither the vocabulary
    nor the weights) and scored every ``eval_every`` steps; training keeps the weights with the
    lowest validation perplexity and stops after ``patience`` evaluations without improvement,
    after ``max_steps`` steps (None: ``epochs`` passes over the training windows) or after
    ``max_minutes`` of wall-clock training.  ``valid_fraction = 0`` validates on the training text.
    ``threads``: torch CPU threads (None keeps torch's setting).
    """

    order: int = 4
    dim: int = 32
    hidden: int = 64
    direct: bool = False
    dropout: float = 0.0
    min_count: int = 3
    lowercase: bool = False
    batch_size: int = 512
    lr: float = 2e-3
    epochs: float = 1.0
    max_steps: int | None = None
    eval_every: int = 500
    patience: int = 2
    valid_fraction: float = 0.05
    max_minutes: float | None = None
    threads: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.valid_fraction < 1.0:
            raise PtmError(f"nnlm valid_fraction must lie in [0, 1); got {self.valid_fraction}")
        if self.epochs <= 0 or (self.max_steps is not None and self.max_steps < 1):
            raise PtmError(f"nnlm needs epochs > 0 and max_steps >= 1 (or none); got epochs={self.epochs}, "
                           f"max_steps={self.max_steps}")
        if self.batch_size < 1 or self.lr <= 0 or self.eval_every < 1 or self.patience < 1 or self.min_count < 1:
            raise PtmError("nnlm needs batch_size, eval_every, patience, min_count >= 1 and lr > 0")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise PtmError(f"nnlm max_minutes must be positive (or none); got {self.max_minutes}")
        if self.threads is not None and self.threads < 1:
            raise PtmError(f"nnlm threads must be >= 1 (or none); got {self.threads}")
        self.model_config()  # the architecture checks of NNLMConfig

    def model_config(self) -> NNLMConfig:
        return NNLMConfig(order=self.order, dim=self.dim, hidden=self.hidden, direct=self.direct,
                          min_count=self.min_count, dropout=self.dropout)


def count_sentences(files: list[Path]) -> int:
    """Number of non-blank lines of ``files``."""
    return sum(sum(1 for line in lines if not line.isspace() and line) for lines in iter_line_chunks(files))


def split_sentences(ids: np.ndarray, offsets: np.ndarray, n_first: int):
    """``(ids, offsets)`` of sentences ``[:n_first]`` and ``[n_first:]`` (offsets rebased to 0)."""
    cut = int(offsets[n_first])
    return (ids[:cut], offsets[: n_first + 1]), (ids[cut:], offsets[n_first:] - cut)


def train_nnlm_static(data_files, cfg: NNLMTrainConfig = NNLMTrainConfig(), run_dir=None):
    """Vocabulary, hold-out split and training of an NNLM on text file(s) (one sentence per line).

    Returns ``(model, vocab, stats)``; stats has ``valid_ppl`` (on the held-out sentences),
    ``train_words``, ``valid_words``, ``vocab_size``, ``steps``, ``epochs``, ``stop_reason`` ...
    """
    files = _paths(data_files)
    n_sent = count_sentences(files)
    n_valid = 0 if cfg.valid_fraction == 0 else max(1, round(cfg.valid_fraction * n_sent))
    if n_sent - n_valid < 1:
        raise PtmError(f"{n_sent} sentence(s) leave nothing to train on after holding out "
                       f"valid_fraction={cfg.valid_fraction}; give more text or lower valid_fraction")
    vocab = build_lm_vocab(files, cfg.min_count, cfg.lowercase, max_sentences=n_sent - n_valid)
    ids, offsets = encode_lm(files, vocab, cfg.lowercase)
    train, valid = split_sentences(ids, offsets, n_sent - n_valid) if n_valid else ((ids, offsets), (ids, offsets))
    n_windows = len(train[0]) + len(train[1]) - 1  # every word and every </s> is predicted
    steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * (n_windows // cfg.batch_size)))
    train_cfg = default_train_config(batch_size=cfg.batch_size, lr=cfg.lr, max_steps=steps,
                                     eval_every=min(cfg.eval_every, steps), seed=cfg.seed)
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    try:
        model, stats = train_nnlm(train, valid, vocab, cfg.model_config(), train_cfg, run_dir=run_dir,
                                  patience=cfg.patience, max_seconds=None if cfg.max_minutes is None else 60 * cfg.max_minutes)
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - t0
    stats = {**stats, "vocab_size": len(vocab), "train_words": int(len(train[0])), "valid_words": int(len(valid[0])),
             "valid_sentences": n_valid, "train_seconds": seconds,
             "train_words_per_s": stats["steps"] * cfg.batch_size / seconds if seconds > 0 else None}
    return model, vocab, stats


@register("static", "nnlm")
class NNLMStatic:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress) -> WordVectors``.

    The exported vectors are the rows of the feature matrix C of the corpus words (``<unk>``,
    ``</s>`` and ``<s>`` are left out: they are not words of the text).
    """

    config_class = NNLMTrainConfig

    @staticmethod
    def train(data_files, cfg: NNLMTrainConfig | dict | None = None, out=None, progress: bool = True):
        """Train and, with ``out``, write ``vectors.bin``, ``vocab.txt``, ``config.json`` (with stats,
        ``valid_ppl`` among them).  ``progress`` is accepted for the common signature; the Trainer
        always shows its progress bar."""
        cfg = as_config(NNLMTrainConfig, cfg)
        out_dir = check_out_dir(out)
        model, vocab, stats = train_nnlm_static(data_files, cfg)
        full = model.word_vectors(vocab)
        n = len(vocab) - 2  # the words come first, <unk> and </s> last (see build_lm_vocab)
        wv = WordVectors(full.words[:n], full.vectors[:n], None if full.counts is None else full.counts[:n])
        if out_dir is not None:
            log.info("nnlm: validation perplexity %.2f after %d steps (%s)", stats["valid_ppl"], stats["steps"],
                     stats["stop_reason"])
            save_run(out_dir, wv, {"model": "nnlm", **asdict(cfg), "valid_ppl": stats["valid_ppl"]}, stats)
        return wv


__all__ = ["LMVocab", "NGramWindows", "NNLM", "NNLMConfig", "NNLMStatic", "NNLMTrainConfig", "build_lm_vocab",
           "encode_lm", "train_nnlm", "train_nnlm_static"]
