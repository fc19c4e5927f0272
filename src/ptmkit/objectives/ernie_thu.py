"""ERNIE of Tsinghua (Zhang et al. 2019): token states fused with aligned *knowledge-graph entity
embeddings* in a knowledge-aware encoder, trained with MLM plus the denoising entity
auto-encoder (dEA).

The paper's model is a T-encoder (BERT layers over the tokens) followed by a K-encoder of
``M`` aggregator layers.  Aggregator ``i`` takes the token states ``w`` and the entity states
``e`` (the TransE embeddings of the entities aligned to the tokens, frozen), attends within each
(two multi-head attentions: tokens over tokens, entities over the sequence's entities), and fuses
them through one shared hidden layer:

    h_j  = GELU(W_t w~_j + W_e e~_k + b)        (token j aligned to entity k; W_e term absent otherwise)
    w_j' = LayerNorm(w~_j + W_t' h_j + b_t')     e_k' = LayerNorm(e~_k + W_e' h_j + b_e')

Here the T-encoder is the trained encoder (any registered Transformer, an imported MiniLM
included) and the ``objective.k_layers`` aggregators are this objective's own module: the encoder
learns to serve them, and the MLM and dEA heads read the K-encoder's output.  What is exported and
fine-tuned is the T-encoder (``ptm finetune`` feeds text only; the paper's fine-tuning feeds the
entities through the K-encoder too, which is not built here).

**Alignment.**  A token is aligned when its vocabulary entry spells a whole word of the
alignment (``objective.alignment``: ``word<TAB>entity`` lines, ``wordnet`` = each WordNet surface
form's most frequent sense) whose entity has a row in the entity vectors (``objective.entities``:
a KG-embedding run directory of ``ptm pretrain transe-wn18rr`` or a word2vec-format file).  The
alignment is read from the original token, before MLM corrupts it.

**dEA.**  Of the aligned tokens, ``dea_random`` (5 %) get a random entity instead of theirs,
``dea_mask`` (15 %) lose their alignment (no entity input), the rest (80 %) keep it; every aligned
token then predicts its true entity from its K-encoder state, a softmax over the distinct entities
of the batch (the paper: of the sequence) with the entity embeddings as the output layer:
``p(e | w_j) = softmax(linear(w_j^o) . E^T)``.  The loss is ``L_MLM + dea_weight * L_dEA``.

Batch keys: MaskedLM's, plus ``entity_ids [B, T]`` (row of the entity table given as input,
``-1``: none) and ``entity_targets [B, T]`` (the true entity row of each aligned token, ``-1``:
not aligned).  Metrics: ``dea_loss``, ``dea_acc``, ``aligned`` (share of real tokens aligned).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.interop.word2vec_format import read_vectors
from ptmkit.nn.activations import get_activation
from ptmkit.objectives.base import StepOutput, TokenizerLike, input_tokens
from ptmkit.objectives.lexicon import read_alignment, token_words
from ptmkit.objectives.mlm import MaskedLM, MLMConfig, cross_entropy_and_accuracy
from ptmkit.registry import register

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErnieTHUConfig(MLMConfig):
    nsp: bool = False
    entities: str | None = None  # entity vectors: a KG-embedding run directory (vectors.bin) or a vectors file
    alignment: str = "wordnet"  # word<TAB>entity lines, or the name of a graph (ptmkit.knowledge.lexicons)
    k_layers: int = 1  # aggregator layers of the K-encoder
    entity_heads: int = 1  # attention heads over the entity states (must divide the entity dimension)
    dea_weight: float = 1.0
    dea_random: float = 0.05  # aligned tokens given a random entity
    dea_mask: float = 0.15  # aligned tokens whose alignment is hidden

    def __post_init__(self) -> None:
        for name in ("dea_weight", "dea_random", "dea_mask"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        super().__post_init__()
        if not self.entities:
            raise PtmError("ERNIE needs objective.entities=RUN_DIR or FILE: entity embeddings, e.g. the output of "
                           "`ptm pretrain transe-wn18rr` (its vectors.bin)")
        if self.k_layers < 1 or self.entity_heads < 1:
            raise PtmError(f"objective.k_layers and objective.entity_heads must be >= 1, got {self.k_layers} and "
                           f"{self.entity_heads}")
        if self.dea_weight < 0 or self.dea_random < 0 or self.dea_mask < 0 or self.dea_random + self.dea_mask > 1:
            raise PtmError(f"objective.dea_random and objective.dea_mask must be >= 0 and sum to <= 1, and "
                           f"objective.dea_weight >= 0 (got {self.dea_random}, {self.dea_mask}, {self.dea_weight})")


def entity_vectors(path: str) -> tuple[list[str], np.ndarray]:
    """``(names, vectors float32 [N, D])`` of ``objective.entities``: a run directory holding
    ``vectors.bin`` or a vectors file in any format ``ptm vectors`` reads."""
    p = Path(path)
    f = p / "vectors.bin" if p.is_dir() else p
    if not f.is_file():
        raise PtmError(f"objective.entities={path}: no entity vectors there (give the output directory of "
                       f"`ptm pretrain transe-wn18rr` or a word2vec-format file)")
    names, vectors = read_vectors(f)
    return names, np.asarray(vectors, dtype=np.float32)


def token_entities(tokenizer, vocab_size: int, alignment: dict[str, str], names: list[str]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(table int64 [V], rows int64 [K])``: each vocabulary entry's row among the K entities
    some entry aligns to (``-1``: none), and those entities' rows in the vectors file."""
    row = {n: i for i, n in enumerate(names)}
    found = [row.get(alignment.get(w, ""), -1) if w else -1 for w in token_words(tokenizer, vocab_size)]
    found = np.asarray(found, dtype=np.int64)
    rows, inverse = np.unique(found[found >= 0], return_inverse=True)
    table = np.full(vocab_size, -1, dtype=np.int64)
    table[found >= 0] = inverse
    return table, rows


def dea_corruption(targets: np.ndarray, n_entities: int, p_random: float, p_mask: float,
                   rng: np.random.Generator) -> np.ndarray:
    """The entity inputs of dEA from the true alignments ``targets [B, T]`` (``-1``: none): a
    share ``p_random`` of the aligned tokens get a random entity, ``p_mask`` none, the rest theirs."""
    u = rng.random(targets.shape)
    aligned = targets >= 0
    inputs = targets.copy()
    swap = aligned & (u < p_random)
    inputs[swap] = rng.integers(0, n_entities, size=int(swap.sum()))
    inputs[aligned & (u >= p_random) & (u < p_random + p_mask)] = -1
    return inputs


class SelfAttention(nn.Module):
    """Multi-head self-attention ``x [B, T, D] -> [B, T, D]`` under ``mask [B, 1, T, T]``
    (bool, True = may attend), through PyTorch's SDPA."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise PtmError(f"an attention over width {dim} cannot have {heads} heads (objective.entity_heads must "
                           f"divide the entity dimension)")
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Aggregator(nn.Module):
    """One K-encoder layer (the paper's aggregator): token and entity self-attention, then the
    information fusion layer.  ``w [B, T, H]``, ``e [B, T, E]`` (entity state at its token's
    position, zero where none is aligned), ``aligned [B, T, 1]`` (float 0/1)."""

    def __init__(self, cfg, entity_dim: int, entity_heads: int) -> None:
        super().__init__()
        h, eps, p = cfg.hidden_size, cfg.layer_norm_eps, cfg.dropout
        self.token_attention = SelfAttention(h, cfg.num_heads, cfg.attention_dropout)
        self.entity_attention = SelfAttention(entity_dim, entity_heads, cfg.attention_dropout)
        self.token_norm, self.entity_norm = nn.LayerNorm(h, eps=eps), nn.LayerNorm(entity_dim, eps=eps)
        self.fuse_token = nn.Linear(h, cfg.intermediate_size)  # W_t, b
        self.fuse_entity = nn.Linear(entity_dim, cfg.intermediate_size, bias=False)  # W_e
        self.token_out, self.entity_out = nn.Linear(cfg.intermediate_size, h), nn.Linear(cfg.intermediate_size, entity_dim)
        self.token_out_norm, self.entity_out_norm = nn.LayerNorm(h, eps=eps), nn.LayerNorm(entity_dim, eps=eps)
        self.act = get_activation(cfg.activation)
        self.drop = nn.Dropout(p)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, cfg.init_std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, w: torch.Tensor, e: torch.Tensor, token_mask: torch.Tensor, entity_mask: torch.Tensor,
                aligned: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.token_norm(w + self.drop(self.token_attention(w, token_mask)))
        e = self.entity_norm(e + self.drop(self.entity_attention(e, entity_mask))) * aligned
        fused = self.act(self.fuse_token(w) + self.fuse_entity(e))  # h_j [B, T, I]
        w = self.token_out_norm(w + self.drop(self.token_out(fused)))
        e = self.entity_out_norm(e + self.drop(self.entity_out(fused))) * aligned
        return w, e


@register("objective", "ernie_thu")
class ErnieTHU(MaskedLM):
    """MLM + dEA through a K-encoder over the encoder's states (see the module docstring)."""

    config_class = ErnieTHUConfig
    hf_heads = ()  # the MLM head reads the K-encoder, which an HF BERT has no place for

    def __init__(self, cfg: ErnieTHUConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        names, vectors = entity_vectors(cfg.entities)
        table, rows = token_entities(tokenizer, self.vocab_size, read_alignment(cfg.alignment), names)
        if not len(rows):
            raise PtmError(f"objective.alignment={cfg.alignment} with objective.entities={cfg.entities}: no entry of "
                           f"the tokenizer's vocabulary is a word aligned to an entity of the vectors ({len(names)} "
                           f"entities), so no token would be aligned; check that the alignment names the vectors' "
                           f"entities and the language and case of the words")
        log.info("ERNIE: %d of %d vocabulary entries aligned to %d entities (of %d, dimension %d)",
                 int((table >= 0).sum()), self.vocab_size, len(rows), len(names), vectors.shape[1])
        self.token_entity = table  # int64 [V], read by collate (on the host, whatever the model's device)
        # the TransE embeddings stay fixed, as in the paper; rebuilt from the file, never saved
        self.register_buffer("entity_table", torch.from_numpy(vectors[rows]), persistent=False)  # [K, E]
        mc = encoder.config
        entity_dim = int(vectors.shape[1])
        self.k_encoder = nn.ModuleList(Aggregator(mc, entity_dim, cfg.entity_heads) for _ in range(cfg.k_layers))
        self.dea_dense = nn.Linear(mc.hidden_size, entity_dim)  # w_j^o -> the entity space
        self.dea_norm = nn.LayerNorm(entity_dim, eps=mc.layer_norm_eps)
        self.act = get_activation(mc.activation)
        with torch.no_grad():
            self.dea_dense.weight.normal_(0.0, mc.init_std)
            self.dea_dense.bias.zero_()

    # -- data -------------------------------------------------------------------------------
    def finish_batch(self, batch, spans, ids, segment, word_starts, length, rng):
        targets = self.token_entity[ids]  # read before the masker corrupts ids in place
        targets[:, 0] = -1  # [CLS]
        batch = super().finish_batch(batch, spans, ids, segment, word_starts, length, rng)
        inputs = dea_corruption(targets, len(self.entity_table), self.cfg.dea_random, self.cfg.dea_mask, rng)
        batch["entity_ids"] = torch.from_numpy(inputs)
        batch["entity_targets"] = torch.from_numpy(targets)
        return batch

    # -- model ------------------------------------------------------------------------------
    def exported_heads(self) -> tuple[str, ...]:
        return ()

    def knowledge_states(self, h: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The K-encoder: ``h [B, T, H]`` (the encoder's output) -> fused token states ``[B, T, H]``."""
        ids = batch["entity_ids"]
        aligned = ids >= 0  # [B, T]
        e = self.entity_table[ids.clamp(min=0)] * aligned[..., None]  # [B, T, E]
        t = h.shape[1]
        real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(aligned)
        token_mask = real[:, None, None, :]  # [B, 1, 1, T]
        eye = torch.eye(t, dtype=torch.bool, device=h.device)
        entity_mask = (aligned[:, None, None, :] | eye)  # [B, 1, T, T]: the sequence's entities (and itself)
        w = h
        for layer in self.k_encoder:
            w, e = layer(w, e, token_mask, entity_mask, aligned[..., None].to(h.dtype))
        return w

    def dea_loss(self, w: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Cross-entropy of each aligned token's entity among the batch's distinct entities."""
        where = targets >= 0
        if not bool(where.any()):
            return None
        candidates, target = torch.unique(targets[where], return_inverse=True)  # [C], [N]
        logits = self.dea_norm(self.act(self.dea_dense(w[where]))) @ self.entity_table[candidates].T  # [N, C]
        return cross_entropy_and_accuracy(logits, target)

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        out = backbone(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                       token_type_ids=batch.get("token_type_ids"))
        w = self.knowledge_states(out.last_hidden_state, batch)
        loss, metrics, n_predictions = self.mlm_loss(w, batch, backbone.output_embeddings())
        targets = batch["entity_targets"]
        real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(targets, dtype=torch.bool)
        metrics["aligned"] = ((targets >= 0) & real).sum() / real.sum().clamp(min=1)
        dea = self.dea_loss(w, targets)
        if dea is not None:
            metrics["dea_loss"], metrics["dea_acc"] = dea[0].detach(), dea[1]
            loss = loss + self.cfg.dea_weight * dea[0]
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch), n_predictions=n_predictions)


__all__ = ["Aggregator", "ErnieTHU", "ErnieTHUConfig", "dea_corruption", "entity_vectors", "token_entities"]
