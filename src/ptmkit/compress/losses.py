"""The distillation losses, each as its paper defines it.

* :func:`soft_cross_entropy` — Hinton et al. (2015): the cross-entropy of the student's
  temperature-``T`` softmax against the teacher's, times ``T²`` so that its gradients keep their
  scale as ``T`` changes (equal to ``T² · KL(p_T || p_S)`` plus the teacher's entropy, a constant).
* :func:`hidden_mse` — TinyBERT (Jiao et al. 2020, eq. 8–9): ``MSE(H_S W_h, H_T)`` over the real
  tokens; the same with ``W_e`` for the embedding layer (eq. 9).
* :func:`attention_mse` — TinyBERT eq. 7 over the attention maps of the real query and key tokens.
  ptmkit's encoders return the probabilities after softmax (TinyBERT fits the scores before it; the
  probabilities are bounded, and what MiniLM (Wang et al. 2020) distils); with different head counts
  the maps are averaged over heads first.
* :func:`cosine_loss` — DistilBERT (Sanh et al. 2019): ``1 - cos(h_S, h_T)`` per real token,
  aligning the directions of the hidden states.
* :func:`layer_map` — which teacher layer each student layer learns from (TinyBERT's
  ``g(m) = m · N / M``, the last ``M`` layers, or an explicit list).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ptmkit.errors import PtmError

LAYER_MAPS = ("uniform", "last")


def soft_cross_entropy(student: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``T² · mean_n Σ_k -softmax(t_n / T)_k · log_softmax(s_n / T)_k`` of logits ``[N, K]``."""
    t = temperature
    target = F.softmax(teacher.float() / t, dim=-1)
    return -(target * F.log_softmax(student.float() / t, dim=-1)).sum(-1).mean() * (t * t)


def _real(mask: torch.Tensor) -> torch.Tensor:
    return mask.to(torch.bool)


def hidden_mse(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of ``[B, T, H]`` states (the student's already projected to the teacher's
    width) over the real tokens of ``mask [B, T]``, averaged over tokens and features."""
    real = _real(mask)
    return F.mse_loss(student.float()[real], teacher.float()[real])


def attention_mse(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of attention maps ``[B, h, T, T]`` over real query and key tokens, heads
    averaged first when the student has another number of heads than the teacher."""
    if student.shape[1] != teacher.shape[1]:
        student, teacher = student.mean(1, keepdim=True), teacher.mean(1, keepdim=True)
    real = _real(mask)
    pairs = (real[:, :, None] & real[:, None, :])[:, None].expand_as(student)  # [B, h, T, T]
    return F.mse_loss(student.float()[pairs], teacher.float()[pairs])


def cosine_loss(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``mean (1 - cos(h_S, h_T))`` over the real tokens of ``[B, T, H]`` states of equal width."""
    real = _real(mask)
    return (1.0 - F.cosine_similarity(student.float()[real], teacher.float()[real], dim=-1)).mean()


def layer_map(kind: str | dict[int, int], student_layers: int, teacher_layers: int) -> dict[int, int]:
    """``{student layer m: teacher layer g(m)}`` for ``m = 1 .. M`` (0 is the embedding layer).

    kind: ``"uniform"`` (``g(m) = round(m · N / M)``, TinyBERT), ``"last"`` (``g(m) = N - M + m``),
    or an explicit ``{m: n}`` / ``"1:2,2:4,3:6"``."""
    m_, n_ = student_layers, teacher_layers
    if isinstance(kind, str) and kind not in LAYER_MAPS:
        kind = parse_layer_map(kind)
    if kind == "uniform":
        return {m: round(m * n_ / m_) for m in range(1, m_ + 1)}
    if kind == "last":
        if m_ > n_:
            raise PtmError(f"layer_map=last maps the student's {m_} layers onto the teacher's last {m_}; "
                           f"the teacher has {n_}")
        return {m: n_ - m_ + m for m in range(1, m_ + 1)}
    for m, n in kind.items():
        if not 0 <= m <= m_:
            raise PtmError(f"layer map {m}:{n}: the student has layers 1 .. {m_} (0: embeddings)")
        if not 0 <= n <= n_:
            raise PtmError(f"layer map {m}:{n}: the teacher has layers 1 .. {n_} (0: embeddings)")
    return dict(kind)


def parse_layer_map(text: str) -> dict[int, int]:
    """``"1:2,2:4,3:6"`` -> ``{1: 2, 2: 4, 3: 6}``."""
    pairs = {}
    for item in text.split(","):
        m, colon, n = item.partition(":")
        try:
            pairs[int(m)] = int(n)
        except ValueError:
            raise PtmError(f"layer map {text!r}: expected {', '.join(LAYER_MAPS)} or student:teacher pairs "
                           f"such as 1:2,2:4,3:6") from None
        if not colon:
            raise PtmError(f"layer map item {item!r}: write student:teacher, e.g. 1:2")
    return pairs


__all__ = ["LAYER_MAPS", "attention_mse", "cosine_loss", "hidden_mse", "layer_map", "parse_layer_map",
           "soft_cross_entropy"]
