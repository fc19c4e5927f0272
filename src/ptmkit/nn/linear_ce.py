"""Output projection + cross-entropy without materialising the full logits.

``linear_cross_entropy(h, W, b, target)`` equals
``F.cross_entropy(F.linear(h, W, b), target, ignore_index=-100)`` (mean over the non-ignored
targets) but works through the rows in chunks: for each chunk it computes the logits, their
log-softmax (one fused pass), the loss, and right away the gradients with respect to ``h``, ``W``
and ``b`` (``dlogits = softmax - onehot``, in place; none for a bias that needs no gradient), then
drops the chunk.  The ``[N, V]`` logits, their
log-softmax and their gradient never exist at once, which for a language model's vocabulary
projection is most of a training step's peak memory; the matmuls are the same three as autograd
would run (one forward, two backward).
"""

from __future__ import annotations

import torch

IGNORE = -100


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    # half precision accumulates the softmax and the gradients in float32
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _chunk_rows(vocab: int) -> int:
    # about 4M logits (16 MB in fp32) per chunk: large matmuls, bounded memory
    return max(1, (1 << 22) // max(vocab, 1))


@torch.no_grad()
def _loss_only(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor) -> torch.Tensor:
    valid = target != IGNORE
    acc = _acc_dtype(h.dtype)
    total = h.new_zeros((), dtype=acc)
    step = _chunk_rows(weight.shape[0])
    for s in range(0, h.shape[0], step):
        logits = torch.nn.functional.linear(h[s : s + step], weight, bias).to(acc)
        t = target[s : s + step]
        picked = logits.gather(1, t.clamp(min=0)[:, None]).squeeze(1)
        total += ((torch.logsumexp(logits, dim=-1) - picked) * valid[s : s + step]).sum()
    return total / valid.sum().clamp(min=1)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, target):  # type: ignore[override]
        valid = target != IGNORE
        n_valid = valid.sum().clamp(min=1)
        step = _chunk_rows(weight.shape[0])
        acc = _acc_dtype(h.dtype)
        total = h.new_zeros((), dtype=acc)
        grad_h = torch.empty(h.shape, dtype=h.dtype, device=h.device)  # contiguous: row chunks are written in place
        grad_w = torch.zeros_like(weight, dtype=acc)
        # a bias that needs no gradient (a buffer such as BART's final_logits_bias) gets none
        grad_b = torch.zeros_like(bias, dtype=acc) if bias is not None and ctx.needs_input_grad[2] else None
        w_acc = weight.to(acc)
        for s in range(0, h.shape[0], step):
            hc = h[s : s + step]
            t = target[s : s + step]
            scale = valid[s : s + step].to(acc) / n_valid  # [c]: mean over the valid targets
            # one fused pass for the log-probabilities [c, V]; the logits are freed right away
            logp = torch.log_softmax(torch.nn.functional.linear(hc, weight, bias).to(acc), dim=-1)
            rows = torch.arange(len(t), device=h.device)
            tc = t.clamp(min=0)
            total -= (logp[rows, tc] * scale).sum()
            # dloss/dlogits = (softmax - onehot) * scale, computed in place over the log-probabilities
            probs = logp.exp_()
            probs[rows, tc] -= 1.0
            probs.mul_(scale[:, None])
            if h.dtype == acc:
                torch.mm(probs, w_acc, out=grad_h[s : s + step])
            else:
                grad_h[s : s + step] = (probs @ w_acc).to(h.dtype)
            grad_w.addmm_(probs.t(), hc.to(acc))
            if grad_b is not None:
                grad_b += probs.sum(0)
        ctx.save_for_backward(grad_h, grad_w.to(weight.dtype), grad_b.to(bias.dtype) if grad_b is not None else None)
        ctx.has_bias = grad_b is not None
        return total

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        grad_h, grad_w, grad_b = ctx.saved_tensors
        return grad_h * grad_out, grad_w * grad_out, (grad_b * grad_out if ctx.has_bias else None), None


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy of ``h [N, H] @ weight[V, H]^T + bias [V]`` against ``target [N]``
    (-100 = ignored); a scalar tensor (float32 for half-precision inputs).  Differentiable in ``h``, ``weight``, ``bias``
    (first-order only)."""
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (h, weight, bias)
    )
    if not needs_grad:
        return _loss_only(h, weight, bias, target)
    return _LinearCrossEntropy.apply(h, weight, bias, target)
