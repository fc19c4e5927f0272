"""Knowledge-graph embeddings: TransE (Bordes et al. 2013) and DistMult (Yang et al. 2015).

TransE embeds entities and relations in one space so that ``h + r ≈ t``: its score of a triple
is ``-d(h + r, t)`` with ``d`` the L1 or L2 distance (``norm``).  Training follows the paper's
Algorithm 1: entities and relations start uniform in ``±6/√k``, relations are L2-normalised once,
entities at the start of every minibatch; each training triple is paired with one corrupted
triple, its head or its tail (even odds) replaced by an entity drawn uniformly (not filtered, as
in the paper), and the loss is the margin ranking loss ``Σ [γ + d(h + r, t) - d(h' + r, t')]_+``
summed over the minibatch, minimised by plain SGD.

DistMult scores ``<h, r, t> = Σ_i h_i r_i t_i`` (a diagonal bilinear form: symmetric in h and t).
Trained here with the logistic loss on ``negatives`` uniformly corrupted triples per training
triple, ``softplus(-s(pos)) + mean softplus(s(neg))`` (Trouillon et al. 2016's negative log-
likelihood; Yang et al. used a margin loss), plus ``l2 · (|h|² + |r|² + |t|²)`` per triple,
minimised with Adam.

:func:`train_kge` trains either on a :class:`~ptmkit.knowledge.triples.KGSplit`, keeps the
epoch with the best filtered validation MRR (when there is a validation part) and reports the
filtered ranking metrics of :mod:`ptmkit.knowledge.ranking` on the test part.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ptmkit.errors import PtmError
from ptmkit.knowledge.ranking import evaluate
from ptmkit.knowledge.triples import KGSplit

log = logging.getLogger(__name__)


class TransE(nn.Module):
    """``entity [E, k]``, ``relation [R, k]``; scores are ``-||h + r - t||_p``."""

    def __init__(self, n_entities: int, n_relations: int, dim: int, norm: int = 1, seed: int = 0) -> None:
        super().__init__()
        if norm not in (1, 2):
            raise PtmError(f"norm={norm}: TransE's distance is L1 (norm=1) or L2 (norm=2)")
        g = torch.Generator().manual_seed(seed)
        bound = 6 / math.sqrt(dim)
        self.entity = nn.Parameter(torch.empty(n_entities, dim).uniform_(-bound, bound, generator=g))
        relation = torch.empty(n_relations, dim).uniform_(-bound, bound, generator=g)
        self.relation = nn.Parameter(F.normalize(relation, dim=1))  # once, as Algorithm 1
        self.norm = norm

    def renormalise(self) -> None:
        """Entities to unit L2 norm (Algorithm 1, at every minibatch): without it the loss falls
        by growing the entity norms instead of arranging them."""
        with torch.no_grad():
            self.entity.copy_(F.normalize(self.entity, dim=1))

    def score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """int64 ``[B]`` ids -> ``[B]`` scores ``-||e_h + e_r - e_t||_p``."""
        return -torch.linalg.vector_norm(self.entity[h] + self.relation[r] - self.entity[t], ord=self.norm, dim=-1)

    def score_tails(self, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """``[B]`` heads and relations -> ``[B, E]`` scores of every entity as the tail."""
        return -torch.cdist(self.entity[h] + self.relation[r], self.entity, p=self.norm)

    def score_heads(self, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``[B]`` relations and tails -> ``[B, E]``: ``||e + r - t|| = ||e - (t - r)||``."""
        return -torch.cdist(self.entity[t] - self.relation[r], self.entity, p=self.norm)

    def loss(self, pos: torch.Tensor, neg: torch.Tensor, margin: float) -> torch.Tensor:
        """``pos [B, 3]``, ``neg [B, 3]`` -> summed margin ranking loss (0-d)."""
        return F.relu(margin - self.score(*pos.T) + self.score(*neg.T)).sum()


class DistMult(nn.Module):
    """``entity [E, k]``, ``relation [R, k]``; scores are ``Σ_i h_i r_i t_i``."""

    def __init__(self, n_entities: int, n_relations: int, dim: int, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        std = 1 / math.sqrt(dim)
        self.entity = nn.Parameter(torch.randn(n_entities, dim, generator=g) * std)
        self.relation = nn.Parameter(torch.randn(n_relations, dim, generator=g) * std)

    def renormalise(self) -> None:
        """DistMult keeps its norms (the L2 penalty bounds them)."""

    def score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (self.entity[h] * self.relation[r] * self.entity[t]).sum(-1)

    def score_tails(self, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (self.entity[h] * self.relation[r]) @ self.entity.T

    def score_heads(self, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (self.relation[r] * self.entity[t]) @ self.entity.T

    def loss(self, pos: torch.Tensor, neg: torch.Tensor, l2: float) -> torch.Tensor:
        """``pos [B, 3]``, ``neg [B, K, 3]`` -> mean logistic loss + L2 penalty (0-d)."""
        s_pos = self.score(*pos.T)  # [B]
        s_neg = self.score(neg[..., 0], neg[..., 1], neg[..., 2])  # [B, K]
        nll = F.softplus(-s_pos) + F.softplus(s_neg).mean(1)
        reg = sum(x.pow(2).sum(-1) for x in (self.entity[pos[:, 0]], self.relation[pos[:, 1]], self.entity[pos[:, 2]]))
        return (nll + l2 * reg).mean()


@dataclass(frozen=True)
class KGEConfig:
    """Both models' settings; the defaults are TransE's WN18 choice (k = 20, λ = 0.01, γ = 2, L1)
    but for the epochs (the paper: at most 1,000)."""

    model: str = "transe"  # transe | distmult
    dim: int = 20
    epochs: int = 100
    lr: float = 0.01
    margin: float = 2.0  # TransE's γ
    norm: int = 1  # TransE's distance: 1 (L1) or 2 (L2)
    batch_size: int = 1024
    negatives: int = 10  # DistMult's corrupted triples per training triple (TransE: one, as the paper)
    l2: float = 0.0  # DistMult's L2 penalty
    eval_every: int = 10  # epochs between validation rankings (0: never; the last epoch is kept)
    eval_batch_size: int = 256
    seed: int = 0


def build(cfg: KGEConfig, n_entities: int, n_relations: int) -> nn.Module:
    if cfg.model == "transe":
        return TransE(n_entities, n_relations, cfg.dim, cfg.norm, cfg.seed)
    if cfg.model == "distmult":
        return DistMult(n_entities, n_relations, cfg.dim, cfg.seed)
    raise PtmError(f"model={cfg.model!r}: knowledge-graph embeddings are transe or distmult")


def corrupt(pos: torch.Tensor, n_entities: int, k: int, g: torch.Generator) -> torch.Tensor:
    """``pos [B, 3]`` -> ``[B, k, 3]``: each copy's head or tail (even odds) replaced by an entity
    drawn uniformly."""
    neg = pos[:, None, :].repeat(1, k, 1)
    entity = torch.randint(0, n_entities, neg.shape[:2], generator=g)
    tail = torch.rand(neg.shape[:2], generator=g) < 0.5
    neg[..., 2] = torch.where(tail, entity, neg[..., 2])
    neg[..., 0] = torch.where(tail, neg[..., 0], entity)
    return neg


def rank(model: nn.Module, split: KGSplit, part: str, batch_size: int = 256) -> dict[str, float]:
    """Filtered ranking metrics of ``split``'s ``part`` (``valid`` or ``test``)."""
    model.eval()
    metrics = evaluate(model.score_tails, model.score_heads, getattr(split, part), split.all_triples,
                       len(split.relations), batch_size)
    metrics["per_relation"] = {split.relations[r]: v for r, v in metrics["per_relation"].items()}
    return metrics


def train_kge(split: KGSplit, cfg: KGEConfig | None = None, progress: bool = True, **overrides: Any) -> tuple[nn.Module, dict]:
    """Train TransE or DistMult on ``split.train``; ``overrides`` are :class:`KGEConfig` keys
    (``train_kge(split, model="transe", dim=50, epochs=100, lr=0.01, margin=2)``).  Returns the
    model (the best validation epoch's weights) and ``{"config", "valid", "test", "history",
    "seconds", ...}`` with the filtered ranking metrics."""
    cfg = KGEConfig(**{**(asdict(cfg) if cfg else {}), **overrides})
    if len(split.train) == 0:
        raise PtmError("the training part holds no triple")
    if cfg.dim < 1 or cfg.epochs < 1 or cfg.batch_size < 1 or cfg.negatives < 1 or not cfg.lr > 0:
        raise PtmError("dim, epochs, batch_size and negatives must be positive integers and lr > 0")
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    n_e, n_r = len(split.entities), len(split.relations)
    model = build(cfg, n_e, n_r)
    transe = isinstance(model, TransE)
    if transe:  # see the module docstring: per-triple steps for entities, per-batch for relations
        opt = torch.optim.SGD([{"params": [model.entity]}, {"params": [model.relation], "lr": cfg.lr / cfg.batch_size}], lr=cfg.lr)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    train = torch.as_tensor(split.train)
    history, best, best_state = [], -1.0, None
    start = time.perf_counter()
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        order = torch.randperm(len(train), generator=g)
        total = 0.0
        for s in range(0, len(train), cfg.batch_size):
            pos = train[order[s : s + cfg.batch_size]]
            model.renormalise()
            if transe:
                loss = model.loss(pos, corrupt(pos, n_e, 1, g)[:, 0], cfg.margin)
            else:
                loss = model.loss(pos, corrupt(pos, n_e, cfg.negatives, g), cfg.l2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach())
        row: dict[str, Any] = {"epoch": epoch, "loss": total / math.ceil(len(train) / cfg.batch_size)}
        if not math.isfinite(row["loss"]):
            raise PtmError(f"training diverged at epoch {epoch} (loss {row['loss']}); lower lr (now {cfg.lr})")
        last = epoch == cfg.epochs
        if len(split.valid) and cfg.eval_every > 0 and (epoch % cfg.eval_every == 0 or last):
            model.renormalise()
            row["valid_mrr"] = rank(model, split, "valid", cfg.eval_batch_size)["mrr"]
            if row["valid_mrr"] > best:
                best, best_state = row["valid_mrr"], copy.deepcopy(model.state_dict())
                row["best"] = True
        history.append(row)
        if progress and ("valid_mrr" in row or epoch % 50 == 0 or last):
            log.info("epoch %d: %s", epoch, {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})
    seconds = time.perf_counter() - start
    if best_state is not None:
        model.load_state_dict(best_state)
    model.renormalise()
    results: dict[str, Any] = {"config": asdict(cfg), "entities": n_e, "relations": n_r,
                               "triples": {"train": len(split.train), "valid": len(split.valid), "test": len(split.test)},
                               "seconds": round(seconds, 2), "history": history,
                               "best_epoch": max((r for r in history if r.get("best")), key=lambda r: r["valid_mrr"],
                                                 default={}).get("epoch")}
    if len(split.valid):
        results["valid"] = rank(model, split, "valid", cfg.eval_batch_size)
    if len(split.test):
        results["test"] = rank(model, split, "test", cfg.eval_batch_size)
    return model, results


def embeddings(model: nn.Module) -> tuple[np.ndarray, np.ndarray]:
    """``(entity [E, k], relation [R, k])`` float32 arrays of a trained model."""
    return model.entity.detach().numpy().astype(np.float32), model.relation.detach().numpy().astype(np.float32)
