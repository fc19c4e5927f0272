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

Two ways to build the K-encoder:

* ``objective.k_from_top=N`` (the paper's split): the encoder's top ``N`` layers are the
  K-encoder's token side, the layers below the T-encoder.  In each of those layers the token
  attention is the layer's own, and the fusion is the layer's feed-forward network with the entity
  term added to its inner layer: ``W_t``, ``b`` are the layer's ``fc1``, ``W_t'`` its ``fc2``, the
  LayerNorms its own; only the entity side (entity attention, ``W_e``, ``W_e'``, their norms) is
  this objective's.  ``W_e`` starts at zero, so at step 0 the K-encoder computes exactly the
  encoder it was built from (continuing a pre-trained BERT or MiniLM loses nothing), and without
  entities it always does: the exported encoder (all layers) is what the K-encoder's token side
  computes for text without entities.  Needs a post-LN Transformer (BERT, MiniLM) without layer
  sharing.
* ``objective.k_from_top=0``: ``objective.k_layers`` new aggregators on top of the whole encoder,
  randomly initialised, this objective's own (not exported).

What is fine-tuned is the encoder; ``ptm finetune`` feeds text only (the paper's fine-tuning feeds
the entities through the K-encoder too, which is not built here).

**Alignment.**  The entities come from ``objective.entities`` (a KG-embedding run directory of
``ptm pretrain transe-wn18rr`` or a word2vec-format file); a token is aligned in one of two ways:

* ``objective.alignment=wordnet`` or ``FILE`` (``word<TAB>entity`` lines): by vocabulary entry,
  when the token spells a whole word of the alignment (``wordnet``: each WordNet surface form's
  most frequent sense, function words left out) whose entity has a vector;
* ``objective.alignment=corpus``: by the links ``ptm prepare --link wordnet`` recorded in the
  corpus (multi-word mentions and inflected forms included, :mod:`ptmkit.knowledge.corpus_entities`),
  at the first token of each linked word whose entity has a vector.

Either way the alignment is read from the original text, before MLM corrupts it.

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
from ptmkit.knowledge.corpus_entities import read_entities
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
    alignment: str = "wordnet"  # word<TAB>entity lines, a graph's name (ptmkit.knowledge.lexicons), or "corpus"
    k_layers: int = 1  # new aggregator layers on top of the encoder (with k_from_top=0)
    k_from_top: int = 0  # > 0: the encoder's top layers are the K-encoder's token side (the paper's split)
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
        if self.nsp:
            raise PtmError("ERNIE (objective ernie_thu) reads single segments: set objective.nsp=false")
        if not self.entities:
            raise PtmError("ERNIE needs objective.entities=RUN_DIR or FILE: entity embeddings, e.g. the output of "
                           "`ptm pretrain transe-wn18rr` (its vectors.bin)")
        if not isinstance(self.k_from_top, int) or isinstance(self.k_from_top, bool) or self.k_from_top < 0:
            raise PtmError(f"objective.k_from_top must be an integer >= 0, got {self.k_from_top!r}")
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


def token_entities(tokenizer, vocab_size: int, alignment: dict[str, str], names: list[str]) -> np.ndarray:
    """int64 ``[V]``: each vocabulary entry's entity, as a row of the vectors (``-1``: none)."""
    row = {n: i for i, n in enumerate(names)}
    return np.asarray([row.get(alignment.get(w, ""), -1) if w else -1 for w in token_words(tokenizer, vocab_size)],
                      dtype=np.int64)


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


class EntitySide(nn.Module):
    """The entity half of an aggregator whose token half is one of the encoder's own layers
    (``objective.k_from_top``): entity self-attention, ``W_e`` into the layer's feed-forward
    inner layer, ``W_e'`` out of it, and their LayerNorms.  ``W_e`` starts at zero."""

    def __init__(self, cfg, entity_dim: int, entity_heads: int) -> None:
        super().__init__()
        eps = cfg.layer_norm_eps
        self.entity_attention = SelfAttention(entity_dim, entity_heads, cfg.attention_dropout)
        self.entity_norm, self.entity_out_norm = nn.LayerNorm(entity_dim, eps=eps), nn.LayerNorm(entity_dim, eps=eps)
        self.fuse_entity = nn.Linear(entity_dim, cfg.intermediate_size, bias=False)  # W_e
        self.entity_out = nn.Linear(cfg.intermediate_size, entity_dim)  # W_e'
        self.drop = nn.Dropout(cfg.dropout)
        for m in (self.entity_attention.qkv, self.entity_attention.out, self.entity_out):
            nn.init.normal_(m.weight, 0.0, cfg.init_std)
            nn.init.zeros_(m.bias)
        nn.init.zeros_(self.fuse_entity.weight)  # the layer starts as the encoder's own

    def forward(self, layer: nn.Module, w: torch.Tensor, e: torch.Tensor, token_mask: torch.Tensor | None,
                entity_mask: torch.Tensor, aligned: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``layer`` (a post-LN :class:`ptmkit.encoders.transformer.TransformerLayer`) with the
        entity states fused into its feed-forward network; shapes as :class:`Aggregator`'s."""
        w = layer.attn_norm(w + layer.dropout(layer.attn(w, token_mask, False)))
        e = self.entity_norm(e + self.drop(self.entity_attention(e, entity_mask))) * aligned
        ffn = layer.ffn
        fused = ffn.act(ffn.fc1(w) + self.fuse_entity(e))  # h_j = GELU(W_t w + W_e e + b)  [B, T, I]
        w = layer.ffn_norm(w + layer.dropout(ffn.fc2(fused)))
        e = self.entity_out_norm(e + self.drop(self.entity_out(fused))) * aligned
        return w, e


def top_layer_refusal(encoder: Encoder, n: int) -> str | None:
    """Why the encoder's top ``n`` layers cannot be the K-encoder's token side, or ``None``."""
    cfg = encoder.config
    layers = getattr(encoder, "layers", None)
    if layers is None or not hasattr(encoder, "embed"):
        return f"the {type(encoder).__name__} has no Transformer layers to take the K-encoder from"
    if n >= len(layers):
        return f"objective.k_from_top={n} leaves no T-encoder below it (the encoder has {len(layers)} layers)"
    if (getattr(cfg, "norm", "post") != "post" or getattr(encoder, "relative_bias", None) is not None
            or getattr(cfg, "positions", "absolute") in ("rope", "alibi")):
        return "it needs a post-LN Transformer with absolute or no positions (BERT, MiniLM)"
    if getattr(cfg, "sharing", "none") != "none" or any(layer.ffn.fc1_linear is not None for layer in layers):
        return "it needs layers of their own (no cross-layer sharing) with plain feed-forward networks"
    return None


@register("objective", "ernie_thu")
class ErnieTHU(MaskedLM):
    """MLM + dEA through a K-encoder over the encoder's states (see the module docstring)."""

    config_class = ErnieTHUConfig
    hf_heads = ()  # the MLM head reads the K-encoder, which an HF BERT has no place for

    def __init__(self, cfg: ErnieTHUConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        names, vectors = entity_vectors(cfg.entities)
        self.entity_names = names
        self.token_entity: np.ndarray | None = None  # int64 [V] (by vocabulary), None: the corpus's links
        self._corpus_rows: dict[str, np.ndarray] = {}  # corpus path -> its entity names' vector rows
        if cfg.alignment != "corpus":
            table = token_entities(tokenizer, self.vocab_size, read_alignment(cfg.alignment), names)
            if not (table >= 0).any():
                raise PtmError(f"objective.alignment={cfg.alignment}: no entry of the tokenizer's vocabulary is a word "
                               f"aligned to one of the {len(names)} entities in {cfg.entities}; check the entity names "
                               f"and the words' language and case")
            log.info("ERNIE: %d of %d vocabulary entries aligned to %d entities (of %d, dimension %d)",
                     int((table >= 0).sum()), self.vocab_size, len(np.unique(table[table >= 0])), len(names),
                     vectors.shape[1])
            self.token_entity = table  # read by collate, on the host whatever the model's device
        # the TransE embeddings stay fixed, as in the paper; rebuilt from the file, never saved
        self.register_buffer("entity_table", torch.from_numpy(vectors), persistent=False)  # [N, E]
        mc = encoder.config
        entity_dim = int(vectors.shape[1])
        if cfg.k_from_top:
            refusal = top_layer_refusal(encoder, cfg.k_from_top)
            if refusal:
                raise PtmError(f"objective.k_from_top={cfg.k_from_top}: {refusal}; use objective.k_from_top=0 "
                               f"(new aggregator layers on top)")
            self.k_encoder = nn.ModuleList(EntitySide(mc, entity_dim, cfg.entity_heads) for _ in range(cfg.k_from_top))
        else:
            self.k_encoder = nn.ModuleList(Aggregator(mc, entity_dim, cfg.entity_heads) for _ in range(cfg.k_layers))
        self.dea_dense = nn.Linear(mc.hidden_size, entity_dim)  # w_j^o -> the entity space
        self.dea_norm = nn.LayerNorm(entity_dim, eps=mc.layer_norm_eps)
        self.act = get_activation(mc.activation)
        with torch.no_grad():
            self.dea_dense.weight.normal_(0.0, mc.init_std)
            self.dea_dense.bias.zero_()

    # -- data -------------------------------------------------------------------------------
    def corpus_rows(self, corpus) -> tuple[np.ndarray, np.ndarray]:
        """``(the corpus's entity links int32 [n_tokens], their names' vector rows int64 [K])``."""
        links, names = read_entities(corpus)
        key = str(getattr(corpus, "path", ""))
        if key not in self._corpus_rows:
            row = {n: i for i, n in enumerate(self.entity_names)}
            rows = np.asarray([row.get(n, -1) for n in names], dtype=np.int64)
            if len(rows) and not (rows >= 0).any():
                raise PtmError(f"objective.entities={self.cfg.entities} has a vector for none of the {len(names)} "
                               f"entities linked in {key}: the links and the vectors come from different graphs")
            self._corpus_rows[key] = rows
        return links, self._corpus_rows[key]

    def entity_targets(self, corpus, spans: np.ndarray, ids: np.ndarray, length: np.ndarray) -> np.ndarray:
        """int64 ``[B, T]``: the vector row of the entity aligned to each position of the laid-out
        ``[CLS] S [SEP]`` examples (``-1``: none), from the original tokens ``ids``."""
        if self.token_entity is not None:
            targets = self.token_entity[ids]
        else:
            links, rows = self.corpus_rows(corpus)
            j = np.arange(ids.shape[1])[None, :]
            inside = (j >= 1) & (j <= (length - 2)[:, None])
            src = np.clip(spans[:, :1] + j - 1, 0, len(links) - 1)
            linked = np.where(inside, np.asarray(links[src], dtype=np.int64), -1)
            targets = np.where(linked >= 0, rows[np.maximum(linked, 0)], -1) if len(rows) else np.full_like(linked, -1)
        targets[:, 0] = -1  # [CLS]
        return targets

    def collate(self, corpus, spans, rng):
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        ids, segment, word_starts, length = self.single_inputs(corpus, spans)
        targets = self.entity_targets(corpus, spans, ids, length)  # before the masker corrupts ids in place
        batch = self.finish_batch({}, spans, ids, segment, word_starts, length, rng)
        inputs = dea_corruption(targets, len(self.entity_table), self.cfg.dea_random, self.cfg.dea_mask, rng)
        batch["entity_ids"] = torch.from_numpy(inputs)
        batch["entity_targets"] = torch.from_numpy(targets)
        return batch

    # -- model ------------------------------------------------------------------------------
    def exported_heads(self) -> tuple[str, ...]:
        return ()

    def knowledge_states(self, h: torch.Tensor, batch: dict[str, torch.Tensor],
                         layers: list[nn.Module] | None = None) -> torch.Tensor:
        """The K-encoder: ``h [B, T, H]`` (the T-encoder's output) -> fused token states
        ``[B, T, H]``; ``layers``: the encoder's top layers (``k_from_top``), else the aggregators."""
        ids = batch["entity_ids"]
        aligned = ids >= 0  # [B, T]
        e = self.entity_table[ids.clamp(min=0)] * aligned[..., None]  # [B, T, E]
        t = h.shape[1]
        real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(aligned)
        token_mask = real[:, None, None, :]  # [B, 1, 1, T]
        eye = torch.eye(t, dtype=torch.bool, device=h.device)
        entity_mask = (aligned[:, None, None, :] | eye)  # [B, 1, T, T]: the sequence's entities (and itself)
        w, keep = h, aligned[..., None].to(h.dtype)
        for i, side in enumerate(self.k_encoder):
            if layers is None:
                w, e = side(w, e, token_mask, entity_mask, keep)
            else:
                w, e = side(layers[i], w, e, token_mask, entity_mask, keep)
        return w

    def encode(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """T-encoder then K-encoder: the fused token states ``[B, T, H]`` the heads read."""
        ids, kwargs = batch["input_ids"], {"attention_mask": batch.get("attention_mask"),
                                            "token_type_ids": batch.get("token_type_ids")}
        if not self.cfg.k_from_top:
            return self.knowledge_states(backbone(ids, **kwargs).last_hidden_state, batch)
        # the encoder's layers run here one by one: the bottom ones as the T-encoder, the top
        # ones with the entity side fused in (the encoder's forward would run them without it)
        top = len(backbone.layers) - self.cfg.k_from_top
        x = backbone.embed(ids, kwargs["token_type_ids"])
        padding = kwargs["attention_mask"]
        mask = None if padding is None else padding.bool()[:, None, None, :]  # [B, 1, 1, T]
        for layer in backbone.layers[:top]:
            x = layer(x, mask, False)
        return self.knowledge_states(x, batch, list(backbone.layers[top:]))

    def dea_loss(self, w: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Cross-entropy of each aligned token's entity among the batch's distinct entities."""
        where = targets >= 0
        if not bool(where.any()):
            return None
        candidates, target = torch.unique(targets[where], return_inverse=True)  # [C], [N]
        logits = self.dea_norm(self.act(self.dea_dense(w[where]))) @ self.entity_table[candidates].T  # [N, C]
        return cross_entropy_and_accuracy(logits, target)

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        w = self.encode(backbone, batch)
        loss, metrics, n_predictions = self.mlm_loss(w, batch, backbone.output_embeddings())
        targets = batch["entity_targets"]
        real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(targets, dtype=torch.bool)
        metrics["aligned"] = ((targets >= 0) & real).sum() / real.sum().clamp(min=1)
        dea = self.dea_loss(w, targets)
        if dea is not None:
            metrics["dea_loss"], metrics["dea_acc"] = dea[0].detach(), dea[1]
            loss = loss + self.cfg.dea_weight * dea[0]
        return StepOutput(loss=loss, metrics=metrics, n_tokens=input_tokens(batch), n_predictions=n_predictions)


__all__ = ["Aggregator", "EntitySide", "ErnieTHU", "ErnieTHUConfig", "dea_corruption", "entity_vectors", "token_entities"]
