"""The pre-training objective interface and the model the trainer trains.

An :class:`Objective` owns everything specific to one pre-training task: how examples are cut
from the corpus (``example_spans``), how a batch is built (``collate``: masking, sentence pairs,
labels; all randomness from the given generator), its output heads and its loss (``forward``).
The trainer only sees :class:`PretrainModel`, whose ``forward(batch)`` returns a ``StepOutput``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.train.step import StepOutput, input_tokens

__all__ = ["CorpusLike", "Objective", "PretrainModel", "StepOutput", "TokenizerLike", "input_tokens"]


class CorpusLike(Protocol):
    """What objectives read from a corpus (``ptmkit.data.corpus.Corpus`` provides it).

    tokens: 1-D integer array (usually a memory map); sentences: int64 token offsets
    ``[n_sentences + 1]``; documents: int64 sentence offsets ``[n_documents + 1]``.
    """

    tokens: np.ndarray
    sentences: np.ndarray
    documents: np.ndarray


class TokenizerLike(Protocol):
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int


class Objective(nn.Module):
    """Base class of pre-training objectives; subclasses register with ``@register("objective", name)``.

    Class attributes every objective declares:

    * ``config_class``: the frozen dataclass built from the preset's ``objective`` section.
    * ``encoders``: the registered encoder names it can train (the builder refuses other pairings).
    * ``causal``: it trains the encoder to read left to right, so downstream use attends causally.
    * ``hf_heads``: the pre-training heads an HF export may carry (e.g. ``("mlm", "nsp")``);
      :meth:`exported_heads` narrows them to those this instance has.
    * ``reads_streams``: its examples are consecutive blocks of one stream
      (:meth:`example_spans` returns them in stream order) and training batches must lay them
      out as parallel streams: row ``i`` of step ``t + 1`` continues the text of row ``i`` of
      step ``t`` (:class:`ptmkit.data.batches.PretrainBatches` then adds ``stream_ids`` and
      ``stream_steps`` to each training batch).  Segment recurrence (XLNet's memory) and
      carried LSTM states rely on it.
    * ``generation``: what the trained model can generate with :mod:`ptmkit.generation`:
      ``"causal_lm"`` (a left-to-right LM whose output layer is the tied word embeddings: it
      continues a text), ``"seq2seq"`` (an encoder–decoder: it writes an output for a source) or
      ``None`` (it cannot generate).
    * ``generates_with_heads``: generation runs through this objective's heads (UniLM predicts
      each next token with its MLM head), so :func:`ptmkit.generation.generate` loads them and
      decodes with :meth:`stepper`; ``False`` (clm, bart): the encoder alone generates.
    * ``hf_family``: the registered HF family its models are exported as when no format is asked
      for and that family can express the model (RoBERTa, ALBERT); ``None``: the first family
      that can (:func:`ptmkit.interop.infer_format`).
    * ``serves_as``: the objective a trained model is loaded with for use (export, generation),
      when this one's extra parts serve in training only (a distillation objective's teacher:
      ``"mlm"``, ``"clm"``); ``None``: this one.
    * ``adds_input_embeddings``: in pre-training the objective adds a vector of its own to each
      vocabulary entry's input embedding (SenseBERT's supersense embeddings ``S M x``), given by
      :meth:`input_embedding_offsets`.  The encoder alone, loaded for use, has it folded into its
      word embeddings (:func:`ptmkit.pretrained.fold_input_embeddings`), so it computes what it
      computed in pre-training.
    * ``perplexity``: what the logs' ``ppl`` is the exponential of: ``"loss"`` when the loss is a
      mean token negative log-likelihood, the metric that is one when the loss adds other terms
      (``"mlm_loss"`` beside NSP or a teacher's signals), ``None`` when no term is one;
      ``perplexities``: metrics that are such likelihoods too, each also logged as ``<name>_ppl``
      (the biLM's ``forward_loss`` and ``backward_loss``).

    Cross-step state (a memory carried from one training step to the next) is not a weight: an
    objective that keeps some sets ``carries_state`` and implements ``carried_state_dict`` /
    ``load_carried_state_dict``.  The trainer saves it in ``trainer_state.pt``, never in
    ``model.safetensors``, so a resumed run continues with it and an exported model has none.
    :class:`ptmkit.objectives.carried.StreamState` keeps such state per stream.

    It is constructed as ``cls(cfg, encoder, tokenizer)``: heads are sized from the encoder
    (``encoder.output_size``, its config) and tie to ``encoder.output_embeddings()`` at forward time.
    """

    config_class: ClassVar[type]
    encoders: ClassVar[tuple[str, ...]] = ("transformer",)
    causal: ClassVar[bool] = False
    hf_heads: ClassVar[tuple[str, ...]] = ()
    generation: ClassVar[str | None] = None
    generates_with_heads: ClassVar[bool] = False
    reads_streams: ClassVar[bool] = False
    hf_family: ClassVar[str | None] = None
    perplexity: ClassVar[str | None] = "loss"
    perplexities: ClassVar[tuple[str, ...]] = ()
    serves_as: ClassVar[str | None] = None
    adds_input_embeddings: ClassVar[bool] = False

    def __init__(self, cfg: Any, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__()
        self.cfg = cfg
        self.model_cfg = encoder.config
        self.position_limit = encoder.max_positions()  # the longest sequence the encoder takes (None: any)
        model_vocab = int(getattr(encoder.config, "vocab_size", 0))
        vocab = int(tokenizer.vocab_size)
        if vocab > model_vocab:
            raise PtmError(
                f"the tokenizer has {vocab} tokens but the model's vocab_size is {model_vocab} "
                f"(vocab mismatch): set model.vocab_size >= {vocab}"
            )
        self.vocab_size = vocab
        self.pad_id = int(tokenizer.pad_id)

    # -- data -------------------------------------------------------------------------------
    def example_spans(self, corpus: CorpusLike, seq_len: int) -> np.ndarray:
        """Token spans ``int64 [N, 2]`` (start, end), one per training example, computed once."""
        raise NotImplementedError

    def collate(self, corpus: CorpusLike, spans: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """Build a batch from ``spans [B, 2]``; every tensor has the example dimension first."""
        raise NotImplementedError

    def init_from_corpus(self, corpus: CorpusLike, spans: np.ndarray) -> None:
        """Data-dependent initialisation from the training examples ``spans [N, 2]`` (before step 1;
        a resumed run loads its weights instead).  The default does nothing."""

    # -- model ------------------------------------------------------------------------------
    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        raise NotImplementedError

    def stepper(self, backbone: Encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                use_cache: bool = True) -> Any:
        """A :class:`ptmkit.generation.Stepper` over the prompts ``input_ids [B, S]`` /
        ``attention_mask [B, S]`` (padded as ``generation`` asks: left for ``causal_lm``, right
        for ``seq2seq``), for an objective with ``generates_with_heads``."""
        raise PtmError(f"{type(self).__name__} does not decode through its heads")

    def exported_heads(self) -> tuple[str, ...]:
        """The heads of ``hf_heads`` this instance has (an HF export writes these)."""
        return tuple(self.hf_heads)

    def input_embedding_offsets(self) -> torch.Tensor | None:
        """``[V, H]``: what this objective adds to each vocabulary entry's input embedding in
        pre-training (differentiable: the objective's forward uses it), or ``None`` when this
        instance adds nothing; only called where ``adds_input_embeddings`` is declared."""
        return None

    # -- state carried across training steps --------------------------------------------------
    # the setting that switches the carried state off, named in errors (e.g. under DDP)
    carried_state_switch: ClassVar[str] = ""

    @property
    def carries_state(self) -> bool:
        """Whether this instance keeps state from one training step to the next."""
        return False

    def carried_state_dict(self) -> dict[str, Any]:
        """The cross-step state (CPU tensors), saved in the training checkpoint."""
        return {}

    def load_carried_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`carried_state_dict` (a resumed run)."""


def token_counts(corpus: CorpusLike, spans: np.ndarray, vocab_size: int) -> np.ndarray:
    """How often each token id occurs inside ``spans [N, 2]`` (overlaps counted once): ``int64 [V]``."""
    n = len(corpus.tokens)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    cover = np.zeros(n + 1, dtype=np.int32)
    np.add.at(cover, np.clip(spans[:, 0], 0, n), 1)
    np.add.at(cover, np.clip(spans[:, 1], 0, n), -1)
    inside = np.cumsum(cover[:-1]) > 0
    ids = np.asarray(corpus.tokens)[inside].astype(np.int64)
    return np.bincount(ids, minlength=vocab_size)[:vocab_size]


class PretrainModel(nn.Module):
    """Encoder + ``Objective``; state-dict keys start with ``backbone.`` and ``objective.``."""

    def __init__(self, backbone: Encoder, objective: Objective) -> None:
        super().__init__()
        self.backbone = backbone
        self.objective = objective

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        return self.objective(self.backbone, batch)
