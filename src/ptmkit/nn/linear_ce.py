"""Output projection + cross-entropy without materialising the full logits.

``linear_cross_entropy(h, W, b, target)`` equals
``F.cross_entropy(F.linear(h, W, b), target, ignore_index=-100)`` (mean over the non-ignored
targets) and ``target_log_probs(h, W, b, target)`` equals
``log_softmax(F.linear(h, W, b))[i, target_i]``, but the ``[N, V]`` logits, their softmax and
their gradient never exist at once: for a language model's vocabulary projection they are most
of a training step's peak memory and, on a CPU, most of its memory traffic.  The causal LM
objective and the NNLM (:mod:`ptmkit.static.nnlm`) both train through :func:`linear_cross_entropy`.

The work is cut into tiles of ``chunk_rows`` rows × ``vocab_slice`` vocabulary entries.  For
each chunk of rows, pass 1 computes each slice's logits and their log-sum-exp; pass 2 (training
only) turns them into probabilities and accumulates the gradients with respect to ``h``, ``W``
and ``b`` right away (``dlogits = softmax - onehot``; the one-hot part by gather / scatter-add
instead of a dense matrix).  With one slice (the default) pass 1 is one fused log-softmax and
pass 2 exponentiates it in place; with several slices pass 2 recomputes each slice's matmul.
The loss is the last node of the graph, so the gradients are computed in the forward pass and
only scaled by the incoming gradient in backward.  Ignored targets (-100): on a CPU, in eager mode,
their rows are dropped before the tiles; on a GPU and inside a compiled graph they stay, weighted
0 (dropping them needs their count on the host: a sync, a graph break; :mod:`ptmkit.nn.host`).

Which tile is faster depends on the shapes and the threads (CPU time of forward + backward on a
shared 2-core CPU, best of 5-7):

- the NNLM's (512 rows, K 64, V 17.7k, one thread): slices of 256 words, whose ``[512, 256]``
  block of logits stays in cache, 55 ms; whole-vocabulary chunks of 4M logits 95 ms; unfused
  123 ms; with two threads 151 ms against 189 ms.  The NNLM asks for slices of 256.
- a causal LM's (4096 rows, H 256, V 8000, ``benchmarks/bench_transformer.py``): with one thread
  578 ms (slices) against 514 ms (whole vocabulary), with two 2.7 s against 0.8 s: the many
  small matmuls of slicing end at barriers where the threads wait for each other (on a GPU each
  would be more kernel launches).  Hence the default: the whole vocabulary in one slice, chunks
  of about 4M logits on a CPU and 268M on a GPU (:func:`default_tiles`).

Precision: half-precision inputs (or an active autocast) run the matmuls in that precision and
accumulate the softmax, the loss and the gradients in float32.  The probabilities enter the
gradient products in the matmul dtype; on a CPU with one slice they are formed there in place
(:func:`ptmkit.nn.softmax_ce.softmax_nll_`: float32 arithmetic, no float32 copy of the tile), and
the products' half-precision outputs are added into the float32 gradients by
:func:`ptmkit.nn.pointwise.add_into`.
"""

from __future__ import annotations

import torch

from ptmkit.nn.bits import kernels_win
from ptmkit.nn.host import host_reads_cheap
from ptmkit.nn.pointwise import add_into, exp_into
from ptmkit.nn.softmax_ce import softmax_nll_
from ptmkit.nn.targets import IGNORE_INDEX

TILE_LOGITS = 1 << 22  # about 4M logits (16 MB in fp32) per tile: large matmuls, bounded memory
# On a GPU, 4M logits of GPT-2's 50,257 words are 83 rows: a batch of 4,096 tokens would be 50 thin
# matrix products, each chunk another pass over the float32 [V, H] gradient.  There a tile holds up to
# 2^28 logits (1 GiB in fp32, what the unfused loss holds for such a batch): one chunk.
GPU_TILE_LOGITS = 1 << 28


def default_tiles(vocab: int, vocab_slice: int | None = None, device: torch.device | str = "cpu") -> tuple[int, int]:
    """``(chunk_rows, vocab_slice)`` for a vocabulary of ``vocab`` words: the whole vocabulary
    (or ``vocab_slice`` words) at a time and as many rows as make about ``TILE_LOGITS`` logits
    (``GPU_TILE_LOGITS`` on any device but the CPU)."""
    width = min(vocab_slice or vocab, vocab) if vocab > 0 else 1
    tile = TILE_LOGITS if torch.device(device).type == "cpu" else GPU_TILE_LOGITS
    return max(1, tile // width), width


def _dtypes(h: torch.Tensor, weight: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(matmul dtype, accumulation dtype): autocast's dtype if it is on, else the inputs' own."""
    dev = h.device.type
    if torch.is_autocast_enabled(dev):
        mm = torch.get_autocast_dtype(dev)
    else:
        mm = torch.promote_types(h.dtype, weight.dtype)
    acc = torch.float32 if mm in (torch.float16, torch.bfloat16) else mm
    return mm, acc


class _Tiles:
    """The tiled computation over one set of (already cast) operands.

    x [N, K], w [V, K], b [V] | None in the matmul dtype; ``acc``: the accumulation dtype.
    """

    def __init__(self, x, w, b, acc: torch.dtype, chunk_rows: int, vocab_slice: int):
        self.x, self.w, self.b, self.acc = x, w, b, acc
        self.rows = max(1, chunk_rows)
        V = w.shape[0]
        step = max(1, vocab_slice)
        self.spans = [(lo, min(lo + step, V)) for lo in range(0, V, step)]

    def _product(self, xc: torch.Tensor, lo: int, hi: int, out: torch.Tensor) -> torch.Tensor:
        """Logits of rows ``xc`` for words ``lo:hi`` in the matmul dtype, written into ``out``."""
        z = out[: xc.shape[0], : hi - lo]
        w = self.w[lo:hi].T
        if self.b is None:
            return torch.mm(xc, w, out=z)
        return torch.addmm(self.b[lo:hi], xc, w, out=z)

    def _logits(self, xc: torch.Tensor, lo: int, hi: int, buf: torch.Tensor, half: torch.Tensor | None) -> torch.Tensor:
        """Logits of rows ``xc`` for words ``lo:hi`` in the accumulation dtype, written into ``buf``
        (through ``half``, a buffer in the matmul dtype, when that dtype differs)."""
        if half is not None:  # half-precision matmul, float32 softmax
            return buf[: xc.shape[0], : hi - lo].copy_(self._product(xc, lo, hi, half))
        return self._product(xc, lo, hi, buf)

    def _target_logits(self, xc: torch.Tensor, tc: torch.Tensor) -> torch.Tensor:
        """x_i w_{t_i} + b_{t_i}: [c], without the [c, V] matrix."""
        z = torch.einsum("bk,bk->b", xc, self.w[tc]).to(self.acc)
        return z if self.b is None else z + self.b[tc].to(self.acc)

    def nll(self, target: torch.Tensor, grads: tuple | None = None, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Negative log-likelihood of every row, [N] in the accumulation dtype.

        ``grads = (gx [N, K], gw [V, K], gb [V] | None)`` (accumulation dtype, zero): the
        unscaled gradients of ``sum(nll)`` are added to them.  ``keep`` [N] (bool): the rows
        that count; the others (any valid index as their target) get nll 0 and no gradient.
        """
        x, w = self.x, self.w
        N = x.shape[0]
        one_pass = len(self.spans) == 1
        width = self.spans[0][1] - self.spans[0][0] if self.spans else 0
        tile = (min(self.rows, N), width)
        # the logits and then the probabilities in the matmul dtype, when it is not the accumulation
        # dtype: one buffer for all chunks (a fresh 8-17 MB tensor per chunk page-faults on every
        # step, which made a bf16 causal LM's log-softmax 60 % slower than in fp32)
        half = torch.empty(tile, dtype=x.dtype, device=x.device) if x.dtype != self.acc else None
        # half precision, whole vocabulary, CPU: softmax_nll_ turns the half-precision logits into
        # probabilities in place (float32 arithmetic, no float32 copy of the tile)
        in_place = one_pass and half is not None and x.device.type == "cpu" and kernels_win()
        buf = None if in_place else torch.empty(tile, dtype=self.acc, device=x.device)
        if grads is not None and half is not None:
            # the half-precision products' outputs, reused by every chunk: a fresh [V, K] tensor a
            # chunk page-faults, and add_into accumulates them without a float32 copy
            gx_half = torch.empty(min(self.rows, N), x.shape[1], dtype=x.dtype, device=x.device)
            gw_half = torch.empty(width, x.shape[1], dtype=x.dtype, device=x.device)
        out = []
        for r in range(0, N, self.rows):
            xc, tc = x[r : r + self.rows], target[r : r + self.rows]
            n = xc.shape[0]
            kc = None if keep is None else keep[r : r + self.rows]
            # pass 1: log-sum-exp of each slice, then of the whole vocabulary
            if in_place:
                p = self._product(xc, *self.spans[0], half)
                out.append(softmax_nll_(p, tc))
            elif one_pass:
                # the whole vocabulary at once: one fused log-softmax (logsumexp + sub + exp made
                # five passes over the tile; the fused form gave +5 % tokens/s to a CPU causal LM)
                z = self._logits(xc, *self.spans[0], buf, half)
                logp = torch.log_softmax(z, 1, out=z)  # in place: no new [n, V] tensor per chunk
                out.append(-logp.gather(1, tc[:, None]).squeeze(1))
            else:
                part = torch.empty(n, len(self.spans), dtype=self.acc, device=x.device)
                for i, (lo, hi) in enumerate(self.spans):
                    torch.logsumexp(self._logits(xc, lo, hi, buf, half), 1, out=part[:, i])
                lse = torch.logsumexp(part, 1)
                out.append(lse - self._target_logits(xc, tc))
            if kc is not None:
                out[-1] = torch.where(kc, out[-1], 0.0)
            if grads is None:
                continue
            gx, gw, gb = grads
            gxc = gx[r : r + n]
            # pass 2: d nll_i / d z_iv = p_iv - [v = t_i]; the softmax part slice by slice ...
            for lo, hi in self.spans:
                # in place: pass 1 left the probabilities in ``half``; one slice: softmax = exp(pass
                # 1's log-softmax), written straight in the matmul dtype; else recompute the logits
                if not in_place:
                    logp = logp if one_pass else self._logits(xc, lo, hi, buf, half).sub_(lse[:, None])
                    p = exp_into(logp, logp if half is None else half[:n, : hi - lo])
                if kc is not None:  # a dropped row's probabilities do not enter the gradients
                    p = p.mul_(kc[:, None])
                if half is None:
                    gxc.addmm_(p, w[lo:hi])
                    gw[lo:hi].addmm_(p.T, xc)
                else:
                    add_into(gxc, torch.mm(p, w[lo:hi], out=gx_half[:n]))
                    add_into(gw[lo:hi], torch.mm(p.T, xc, out=gw_half[: hi - lo]))
                if gb is not None:  # the probabilities as the products saw them
                    gb[lo:hi] += p.sum(0, dtype=self.acc)
            # ... then the one-hot part, by gather / scatter-add instead of a [n, V] matrix
            row_weight = torch.ones(n, dtype=self.acc, device=x.device) if kc is None else kc.to(self.acc)
            wt, xt = w[tc].to(self.acc), xc.to(self.acc)
            if kc is not None:  # a dropped row's target takes no gradient either
                wt, xt = wt * row_weight[:, None], xt * row_weight[:, None]
            gxc.sub_(wt)
            gw.index_add_(0, tc, xt, alpha=-1.0)
            if gb is not None:
                gb.index_add_(0, tc, row_weight, alpha=-1.0)
        return torch.cat(out) if out else x.new_zeros(0, dtype=self.acc)


def _tiles(h, weight, bias, vocab_slice: int | None, chunk_rows: int | None, dtypes) -> _Tiles:
    """The operands cast to the matmul dtype, and the tile (:func:`default_tiles` where not given).

    ``dtypes``: :func:`_dtypes`, read before autocast is switched off for the explicit casts.
    """
    mm, acc = dtypes
    rows, width = default_tiles(weight.shape[0], vocab_slice, weight.device)
    b = None if bias is None else bias.to(mm)
    return _Tiles(h.to(mm), weight.to(mm), b, acc, chunk_rows or rows, width)


def _mean(nll: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """The mean over the rows (``keep``: over the kept rows); no row: 0, not NaN."""
    if keep is None:
        return nll.mean() if nll.numel() else nll.sum()
    return nll.sum() / keep.sum().clamp(min=1)


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean NLL of the rows; the gradients are computed in forward and scaled in backward."""

    @staticmethod
    def forward(ctx, h, weight, bias, target, keep, vocab_slice, chunk_rows, dtypes):  # type: ignore[override]
        with torch.autocast(h.device.type, enabled=False):
            tiles = _tiles(h, weight, bias, vocab_slice, chunk_rows, dtypes)
            acc = tiles.acc
            gx = torch.zeros(h.shape, dtype=acc, device=h.device)
            gw = torch.zeros(weight.shape, dtype=acc, device=h.device)
            gb = None if bias is None else torch.zeros(bias.shape, dtype=acc, device=h.device)
            nll = tiles.nll(target, (gx, gw, gb), keep)
        count = None if keep is None else keep.sum().clamp(min=1)  # the rows the mean is over
        ctx.rows = max(gx.shape[0], 1)
        ctx.save_for_backward(gx.to(h.dtype), gw.to(weight.dtype), None if gb is None else gb.to(bias.dtype), count)
        return _mean(nll, keep)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        gx, gw, gb, count = ctx.saved_tensors
        scale = grad / (ctx.rows if count is None else count)
        return gx * scale, gw * scale, (None if gb is None else gb * scale), None, None, None, None, None


def linear_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    vocab_slice: int | None = None,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of ``h [N, K] @ weight[V, K]^T + bias [V]`` against ``target [N]``
    (-100 = ignored; 0 when every target is).  A scalar tensor (float32 for half-precision
    inputs), differentiable in ``h``, ``weight``, ``bias`` (first order only).

    ``vocab_slice``, ``chunk_rows``: the tile (None: :func:`default_tiles`); they change the speed
    and the rounding, not the result.
    """
    valid = target != IGNORE_INDEX
    keep = None
    if host_reads_cheap(valid):
        if not bool(valid.all()):  # drop the ignored rows (autograd scatters h's gradient back)
            idx = valid.nonzero().squeeze(1)
            h, target = h[idx], target[idx]
    else:
        # on a GPU and inside a compiled graph the ignored rows stay, weighted 0: dropping them
        # needs their count on the host (a device sync, a graph break)
        keep, target = valid, target.masked_fill(~valid, 0)
    dtypes = _dtypes(h, weight)
    needs_grad = torch.is_grad_enabled() and any(p is not None and p.requires_grad for p in (h, weight, bias))
    if needs_grad:
        return _LinearCrossEntropy.apply(h, weight, bias, target, keep, vocab_slice, chunk_rows, dtypes)
    with torch.no_grad(), torch.autocast(h.device.type, enabled=False):
        return _mean(_tiles(h, weight, bias, vocab_slice, chunk_rows, dtypes).nll(target, keep=keep), keep)


@torch.no_grad()
def target_log_probs(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    vocab_slice: int | None = None,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """``log_softmax(h @ weight^T + bias)[i, target_i]``: [N] (accumulation dtype, no gradient);
    every target must be a vocabulary index; the tile as in :func:`linear_cross_entropy`."""
    dtypes = _dtypes(h, weight)
    with torch.autocast(h.device.type, enabled=False):
        return -_tiles(h, weight, bias, vocab_slice, chunk_rows, dtypes).nll(target)


__all__ = ["IGNORE_INDEX", "default_tiles", "linear_cross_entropy", "target_log_probs"]
