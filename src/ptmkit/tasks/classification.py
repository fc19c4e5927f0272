"""Sequence classification on top of an encoder (any registered one).

Inputs follow the papers:

* BERT (bidirectional): ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with token types 0…0 1…1;
  the sequence is represented by the pooled ``[CLS]`` state (the pooler's ``tanh(W h_0 + b)``
  when the backbone has one, else ``h_0``).
* GPT (causal): ``a [SEP]`` or ``a [SEP] b [SEP]`` (the delimiter plays GPT's "extract" token);
  only the last token has seen the whole input, so the sequence is represented by the hidden
  state of the last non-padding token.

Batches are right-padded: ``input_ids[B, T]``, ``attention_mask[B, T]``, optional
``token_type_ids[B, T]`` and ``labels[B]``.

GPT's auxiliary language-modelling objective (Radford et al. 2018, §3.2): with
``aux_lm_weight = λ > 0`` the loss is ``L_task + λ L_LM``, where ``L_LM`` is the mean next-token
cross-entropy over the input text (every real token after the first, predicted from the top
layer through the tied output layer, as in pre-training).  It needs a causal encoder whose
output layer is its word embeddings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ptmkit.data.tasks import TaskData, TaskSplit, load_files
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.nn.layer_mix import build_mix, normalize_mix
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.registry import register
from ptmkit.tasks.base import TaskType
from ptmkit.tasks.batches import ShuffledBatches, by_length
from ptmkit.tasks.gpt_inputs import GptTokens, encode_gpt, encode_symmetric
from ptmkit.tasks.inputs import EncodedInputs, encoder_inputs, pad_positions, pad_visible, truncate_pair
from ptmkit.tasks.kbert import MODES, Injector, Knowledge
from ptmkit.tasks.metrics import classification_metrics
from ptmkit.train.step import StepOutput, input_tokens

POOLINGS = ("auto", "cls", "last", "mean", "concat")
HEADS = ("linear", "mlp", "bilstm")


class SequenceClassifier(nn.Module):
    """encoder -> token states -> sequence vector -> task head -> ``[num_labels]`` logits.

    pooling: ``"cls"`` (BERT: the pooler's output, else ``h_0``), ``"last"`` (GPT: the last
        non-pad token), ``"mean"`` (masked mean), ``"concat"`` (ULMFiT's concat pooling
        ``[h_T; maxpool(H); meanpool(H)]`` over the real tokens, ``3 H`` wide) or ``"auto"``
        (``"last"`` for a causal encoder, ``"cls"`` for one with a [CLS] pooler read from its top
        layer, else ``"mean"``).
    dropout: before the head; ``None`` uses the encoder's ``config.dropout``.
    causal: run the encoder with causal attention (a model pre-trained left to right).
    mix: ``"last"`` (the top layer), ``"scalar"`` (ELMo's learned softmax-weighted sum of all
        layers, :class:`~ptmkit.nn.scalar_mix.ScalarMix`) or ``"layer:k"`` (hidden state ``k`` alone,
        0 = embeddings, negative from the top; :mod:`ptmkit.nn.layer_mix`).
    head: ``"linear"`` (dropout + one linear layer, as BERT), ``"mlp"`` (a hidden layer of
        ``head_hidden`` units), or ``"bilstm"`` (a BiLSTM of ``head_hidden`` units per direction
        over the token states, mean-pooled: the small task network of feature-based transfer).
    frozen: feature-based transfer: the encoder's weights stay fixed and it runs without dropout
        or gradient; only the mix and the head learn.
    aux_lm_weight: λ of GPT's auxiliary LM loss (see the module docstring); 0 = off.
    """

    def __init__(self, backbone: nn.Module, num_labels: int, pooling: str = "auto", dropout: float | None = None,
                 causal: bool = False, mix: str = "last", head: str = "linear", head_hidden: int = 128,
                 frozen: bool = False, aux_lm_weight: float = 0.0) -> None:
        super().__init__()
        if aux_lm_weight < 0:
            raise PtmError(f"aux_lm_weight must be >= 0, got {aux_lm_weight}")
        if aux_lm_weight > 0:
            tied = backbone.output_embeddings()
            if not causal or tied is None or tied.shape[1] != backbone.output_size:
                raise PtmError(
                    "aux_lm_weight > 0 (the auxiliary LM loss) needs a causal encoder whose output layer is its "
                    "word embeddings (a model pre-trained with the clm objective); set aux_lm_weight=0"
                )
            if frozen:
                raise PtmError("aux_lm_weight > 0 trains the encoder as a language model; it needs mode=finetune")
        self.aux_lm_weight = float(aux_lm_weight)
        mix = normalize_mix(mix)
        for name, value, allowed in (("pooling", pooling, POOLINGS), ("head", head, HEADS)):
            if value not in allowed:
                raise PtmError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if num_labels < 1:  # 1: a single score (a regression target, or one choice's score)
            raise PtmError(f"a classifier needs at least 1 output, got {num_labels}")
        cfg = backbone.config
        if pooling == "auto":
            has_cls = bool(getattr(cfg, "pooler", False))  # a [CLS] pooler trained by the objective (BERT)
            pooling = "last" if causal else ("cls" if has_cls and mix == "last" else "mean")
        self.backbone = backbone
        self.causal = causal
        self.pooling = pooling
        self.num_labels = num_labels
        self.frozen = frozen
        self.mix = build_mix(mix, backbone)
        self.dropout = nn.Dropout(getattr(cfg, "dropout", 0.1) if dropout is None else dropout)
        width = backbone.output_size * (3 if pooling == "concat" and head != "bilstm" else 1)
        self.head_kind = head
        if head == "bilstm":
            self.lstm = nn.LSTM(width, head_hidden, batch_first=True, bidirectional=True)
            width = 2 * head_hidden
        if head == "mlp":
            self.hidden = nn.Linear(width, head_hidden)
            width = head_hidden
        self.classifier = nn.Linear(width, num_labels)
        std = getattr(cfg, "init_std", 0.02)
        with torch.no_grad():  # BERT's initialisation for the new layers
            for layer in (self.classifier, getattr(self, "hidden", None)):
                if layer is not None:
                    layer.weight.normal_(0.0, std)
                    layer.bias.zero_()
        if frozen:
            self.backbone.requires_grad_(False)

    def train(self, mode: bool = True) -> "SequenceClassifier":
        super().train(mode)
        if self.frozen:
            self.backbone.eval()  # fixed features: no dropout inside the encoder
        return self

    def _states(self, batch: dict[str, torch.Tensor]):
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            out = self.backbone(batch["input_ids"], **encoder_inputs(batch), causal=self.causal,
                                output_hidden_states=self.mix is not None)
        hidden = self.mix(out.hidden_states) if self.mix is not None else out.last_hidden_state  # [B, T, H]
        return out, hidden

    def pool(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The sequence representation ``[B, H']`` fed to the classifier."""
        return self._add_swapped(batch, self._pool(batch, *self._states(batch)))

    def _add_swapped(self, batch: dict[str, torch.Tensor], pooled: torch.Tensor) -> torch.Tensor:
        """GPT's similarity tasks: with ``swap_*`` inputs (the pair in the other order) in the batch,
        the representation is the sum of both orders' (:mod:`ptmkit.tasks.gpt_inputs`)."""
        if "swap_input_ids" not in batch:
            return pooled
        other = {"input_ids": batch["swap_input_ids"], **encoder_inputs(batch, prefix="swap_")}
        return pooled + self._pool(other, *self._states(other))

    def _pool(self, batch: dict[str, torch.Tensor], out, hidden: torch.Tensor) -> torch.Tensor:
        mask = batch["attention_mask"]
        if self.head_kind == "bilstm":
            lengths = mask.long().sum(dim=1).clamp(min=1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(self.dropout(hidden), lengths, batch_first=True, enforce_sorted=False)
            hidden, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=hidden.shape[1])
            return _masked_mean(hidden, mask)
        if self.pooling == "concat":
            return concat_pool(hidden, mask)
        if self.pooling == "cls":
            return out.pooled if (out.pooled is not None and self.mix is None) else hidden[:, 0]
        if self.pooling == "last":
            last = mask.long().sum(dim=1).clamp(min=1) - 1  # [B] index of the last real token (right padding)
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return _masked_mean(hidden, mask)

    def _classify(self, pooled: torch.Tensor) -> torch.Tensor:
        x = self.dropout(pooled)
        if self.head_kind == "mlp":
            x = self.dropout(torch.relu(self.hidden(x)))
        return self.classifier(x)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Unnormalised class scores ``[B, num_labels]``."""
        return self._classify(self.pool(batch))

    def lm_loss(self, batch: dict[str, torch.Tensor], top: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of the input text from the top layer's states ``top [B, T, H]``:
        position ``t`` predicts token ``t + 1`` wherever that is a real token."""
        targets = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, IGNORE_INDEX)
        bias_of = getattr(self.backbone, "output_bias", None)
        return linear_cross_entropy(top[:, :-1].flatten(0, 1), self.backbone.output_embeddings(),
                                    bias_of() if bias_of is not None else None, targets.flatten())

    def distillation_logits(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [B, K], labels [B])``: what a distilled student matches (:mod:`ptmkit.compress.distil`)."""
        return self.logits(batch), batch["labels"]

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """Cross-entropy on ``batch["labels"]`` (+ ``aux_lm_weight`` x the LM loss of the input text);
        metrics: ``accuracy`` (and ``task_loss``, ``lm_loss`` with the auxiliary loss)."""
        out, hidden = self._states(batch)
        logits = self._classify(self._add_swapped(batch, self._pool(batch, out, hidden)))
        labels = batch["labels"]
        loss = F.cross_entropy(logits.float(), labels)
        acc = (logits.detach().argmax(dim=-1) == labels).float().mean()
        metrics = {"accuracy": acc}
        if self.aux_lm_weight > 0:
            lm = self.lm_loss(batch, out.last_hidden_state)
            metrics.update(task_loss=loss.detach(), lm_loss=lm.detach())
            loss = loss + self.aux_lm_weight * lm
        return StepOutput(
            loss=loss,
            metrics=metrics,
            n_tokens=input_tokens(batch),
            n_predictions=int(labels.shape[0]),
        )


def concat_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ULMFiT's concat pooling (Howard & Ruder 2018, eq. 4): ``[h_T; maxpool(H); meanpool(H)]``
    ``[B, 3 D]`` of ``hidden [B, T, D]`` over the real tokens of ``mask [B, T]`` (right padding:
    ``h_T`` is the last real token's state; padding takes no part in the max or the mean)."""
    real = mask != 0
    last = real.long().sum(dim=1).clamp(min=1) - 1
    h_last = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    h_max = hidden.masked_fill(~real[:, :, None], float("-inf")).amax(dim=1)
    return torch.cat([h_last, h_max, _masked_mean(hidden, mask)], dim=-1)


def _masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(hidden.dtype).unsqueeze(-1)  # [B, T, 1]
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


# ------------------------------------------------------------------------------------------ inputs


def encode_inputs(
    token_ids: list[list[int]],
    pair_ids: list[list[int]] | None,
    max_len: int,
    cls_id: int,
    sep_id: int,
    causal: bool,
) -> EncodedInputs:
    """Add the special tokens of the family and truncate to ``max_len`` tokens in all.

    ``token_ids``/``pair_ids`` are plain token ids (no specials).  BERT: ``[CLS] a [SEP] (b [SEP])``;
    GPT: ``a [SEP] (b [SEP])``.  Token types are 0 up to and including the first ``[SEP]``, then 1.
    """
    n_special = (0 if causal else 1) + (2 if pair_ids is not None else 1)
    budget = max_len - n_special
    if budget < 1 + (pair_ids is not None):
        raise PtmError(f"max_seq_len={max_len} leaves no room for text after the special tokens")
    head = np.array([] if causal else [cls_id], dtype=np.int64)
    sep = np.array([sep_id], dtype=np.int64)
    ids: list[np.ndarray] = []
    types: list[np.ndarray] = []
    for i, a in enumerate(token_ids):
        a = np.asarray(a, dtype=np.int64)
        if pair_ids is None:
            a = a[:budget]
            seq = np.concatenate([head, a, sep])
            typ = np.zeros(len(seq), dtype=np.int64)
        else:
            b = np.asarray(pair_ids[i], dtype=np.int64)
            la, lb = truncate_pair(len(a), len(b), budget)
            first = np.concatenate([head, a[:la], sep])
            second = np.concatenate([b[:lb], sep])
            seq = np.concatenate([first, second])
            typ = np.concatenate([np.zeros(len(first), np.int64), np.ones(len(second), np.int64)])
        ids.append(seq)
        types.append(typ)
    return EncodedInputs(ids, types)


def collate(
    inputs: EncodedInputs,
    index: np.ndarray,
    pad_id: int,
    labels: np.ndarray | None = None,
    with_token_types: bool = True,
) -> dict[str, torch.Tensor]:
    """Right-pad the examples ``index`` to their longest length; returns the batch dict."""
    lengths = inputs.lengths[index]
    T = int(lengths.max())
    B = len(index)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    for row, i in enumerate(index):
        n = lengths[row]
        ids[row, :n] = inputs.ids[i]
        types[row, :n] = inputs.types[i]
    mask = np.arange(T)[None, :] < lengths[:, None]  # [B, T]
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask.astype(np.int64))}
    if with_token_types:
        batch["token_type_ids"] = torch.from_numpy(types)
    if inputs.positions is not None:
        batch["position_ids"] = pad_positions(inputs.positions, index, T)
    if inputs.visible is not None:
        batch["attn_mask"] = pad_visible(inputs.visible, index, T)
    if inputs.swapped is not None:  # both orders of each pair, scored together
        other = collate(inputs.swapped, index, pad_id, None, with_token_types)
        batch.update({f"swap_{k}": v for k, v in other.items()})
    if labels is not None:  # class indices, or float targets (regression)
        y = np.asarray(labels)[index]
        batch["labels"] = torch.from_numpy(y.astype(np.float32) if y.dtype.kind == "f" else y.astype(np.int64))
    return batch


# ------------------------------------------------------------------------------ the task type


def token_ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Plain token ids (no special tokens) for each text."""
    return [list(ids) for ids in tokenizer.encode_batch(texts)]


def encode_split(split: TaskSplit, tokenizer: Any, max_len: int, causal: bool, gpt_transform: bool = False,
                 symmetric: bool = False) -> EncodedInputs:
    """The split's texts (and pairs) with the family's special tokens, or GPT's start / delimiter /
    extract tokens (``gpt_transform``; ``symmetric``: both orders of each pair)."""
    pairs = token_ids(tokenizer, split.text_pairs) if split.text_pairs is not None else None
    texts = token_ids(tokenizer, split.texts)
    if gpt_transform:
        tokens = GptTokens.of(tokenizer)
        if symmetric:
            if pairs is None:
                raise PtmError("symmetric_pairs=true scores a pair in both orders, but this task has single texts; "
                               "set symmetric_pairs=false")
            return encode_symmetric(texts, pairs, max_len, tokens)
        return encode_gpt(texts, pairs, max_len, tokens)
    return encode_inputs(texts, pairs, max_len, tokenizer.cls_id, tokenizer.sep_id, causal)


def classifier_on(backbone: Any, num_labels: int, cfg: Any, causal: bool) -> SequenceClassifier:
    """``SequenceClassifier`` on ``backbone`` with the settings of ``cfg`` (a ``FinetuneConfig``)."""
    return SequenceClassifier(backbone, num_labels, pooling=cfg.pooling, dropout=cfg.dropout, causal=causal,
                              mix=cfg.resolved_mix, head=cfg.head, head_hidden=cfg.head_hidden,
                              frozen=cfg.mode == "features", aux_lm_weight=cfg.aux_lm_weight)


@torch.no_grad()
def predict(model: SequenceClassifier, inputs: EncodedInputs, pad_id: int, batch_size: int, with_token_types: bool,
            device: torch.device | str = "cpu") -> np.ndarray:
    """Class probabilities ``[N, K]`` (float64), in the order of ``inputs`` (leaves ``model`` in eval mode)."""
    model.eval()
    probs = np.zeros((len(inputs), model.num_labels), dtype=np.float64)
    rows = lambda index: collate(inputs, index, pad_id, with_token_types=with_token_types)  # noqa: E731
    for index, batch in by_length(inputs.lengths, batch_size, rows, device):
        probs[index] = torch.softmax(model.logits(batch).double(), dim=-1).cpu().numpy()
    return probs


def score(probs: np.ndarray, labels: np.ndarray, num_labels: int) -> dict[str, float]:
    """Metrics of the arg-max predictions plus the mean cross-entropy ``loss``."""
    out = classification_metrics(labels, probs.argmax(axis=1), num_labels)
    out["loss"] = float(-np.log(np.clip(probs[np.arange(len(labels)), labels], 1e-12, None)).mean())
    return out


def write_predictions(path: Path, split: TaskSplit, label_names: list[Any], probs: np.ndarray) -> None:
    """One JSON line per example: text (and pair), gold label, prediction, class probabilities."""
    lines = []
    for i, text in enumerate(split.texts):
        row: dict[str, Any] = {"text": text}
        if split.text_pairs is not None:
            row["text_pair"] = split.text_pairs[i]
        row["label"] = label_names[int(split.labels[i])]
        row["prediction"] = label_names[int(probs[i].argmax())]
        row["probabilities"] = {str(name): round(float(p), 6) for name, p in zip(label_names, probs[i])}
        lines.append(json.dumps(row, ensure_ascii=False))
    atomic_write_text(path, "\n".join(lines) + "\n")


@dataclass(frozen=True)
class ClassificationOptions:
    """Knowledge injected at fine-tuning time (K-BERT, :mod:`ptmkit.tasks.kbert`), off by default.

    knowledge: a triples file (``head<TAB>relation<TAB>tail``); ``""``: none.
    knowledge_mode: ``kbert`` (soft positions and the visible matrix) or ``plain`` (the triples'
        tokens inserted as text, ordinary positions and attention: the paper's ablation).
    knowledge_branches: the triples injected per mention, at most.
    """

    knowledge: str = ""
    knowledge_mode: str = "kbert"
    knowledge_branches: int = 2

    def __post_init__(self) -> None:
        if self.knowledge_mode not in MODES:
            raise PtmError(f"knowledge_mode must be one of {', '.join(MODES)}, got {self.knowledge_mode!r}")
        if not isinstance(self.knowledge_branches, int) or self.knowledge_branches < 1:
            raise PtmError(f"knowledge_branches must be an integer >= 1, got {self.knowledge_branches!r}")


@register("task_type", "classification")
class Classification(TaskType):
    """Sentence and sentence-pair classification: a :class:`SequenceClassifier` over the labels of
    a :class:`~ptmkit.data.tasks.TaskData`; with ``knowledge=...``, K-BERT's injected triples."""

    name = "classification"
    options_class = ClassificationOptions
    metrics = ("accuracy", "f1", "macro_f1", "loss")
    columns = {"text": "text", "text_pair": None, "label": "label"}

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, text: str = "text",
                   text_pair: str | None = None, label: str = "label") -> TaskData:
        return load_files(train, dev, test, text_column=text, text_pair_column=text_pair, label_column=label, name=name)

    @property
    def knowledge(self) -> ClassificationOptions:
        """The knowledge options (a subclass with options of its own injects none)."""
        o = self.options
        return o if isinstance(o, ClassificationOptions) else ClassificationOptions()

    def encode(self, split: str) -> EncodedInputs:
        o = self.knowledge
        if o.knowledge:
            if self.cfg.gpt_transform or self.causal:
                raise PtmError("knowledge injection (K-BERT) frames the input for a bidirectional encoder with "
                               "[CLS]; a left-to-right model cannot take it: drop knowledge=")
            data = self.data.split(split)
            injector = Injector(self._knowledge(), self.tokenizer, o.knowledge_mode, o.knowledge_branches)
            return injector.encode(data.texts, data.text_pairs, self.cfg.max_seq_len)
        return encode_split(self.data.split(split), self.tokenizer, self.cfg.max_seq_len, self.causal,
                            self.cfg.gpt_transform, self.cfg.symmetric_pairs)

    def _knowledge(self) -> Knowledge:
        if getattr(self, "_kg", None) is None:
            self._kg = Knowledge.read(self.knowledge.knowledge)
        return self._kg

    def build(self, backbone: nn.Module) -> nn.Module:
        if self.knowledge.knowledge and self.knowledge.knowledge_mode == "kbert":
            refusal = backbone.visible_matrix_refusal()
            if refusal is not None:
                raise PtmError(f"knowledge_mode=kbert: {refusal}; use knowledge_mode=plain (the triples as text) "
                               f"or a Transformer encoder with absolute positions")
        return classifier_on(backbone, self.data.num_labels, self.cfg, self.causal)

    def batches(self, encoded_train: EncodedInputs, seed: int) -> ShuffledBatches:
        labels, pad, types = self.data.train.labels, self.tokenizer.pad_id, self.with_types
        return ShuffledBatches(len(encoded_train), lambda rows: collate(encoded_train, rows, pad, labels, types),
                               self.cfg.batch_size, seed)

    def predict(self, model: nn.Module, encoded: EncodedInputs, device: Any) -> np.ndarray:
        return predict(model, encoded, self.tokenizer.pad_id, self.cfg.eval_batch_size, self.with_types, device)

    def score(self, split: str, predictions: np.ndarray) -> dict[str, float]:
        return score(predictions, self.data.split(split).labels, self.data.num_labels)

    def write_predictions(self, path: Path, split: str, predictions: np.ndarray) -> None:
        write_predictions(path, self.data.split(split), self.data.label_names, predictions)

    # -- prediction on new rows (ptm predict) ----------------------------------------------------
    input_columns = ("text",)
    optional_columns = ("text_pair",)
    line_column = "text"

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> TaskData:
        labels = [label_value(x) for x in info.get("labels") or []]
        test = unlabelled_split(rows)
        empty = TaskSplit([], np.zeros(0, np.int64), None if test.text_pairs is None else [])
        return TaskData(str(info.get("task", "task")), labels, empty, empty, test)

    def records(self, predictions: np.ndarray) -> list[dict[str, Any]]:
        part, names = self.data.test, self.data.label_names
        out = []
        for i, text in enumerate(part.texts):
            row: dict[str, Any] = {"text": text}
            if part.text_pairs is not None:
                row["text_pair"] = part.text_pairs[i]
            row["prediction"] = names[int(predictions[i].argmax())]
            row["probabilities"] = {str(n): round(float(p), 6) for n, p in zip(names, predictions[i])}
            out.append(row)
        return out


def label_value(name: str) -> Any:
    """A label as ``task_model.json`` records it (a string) back as the training data had it: an
    integer label (MR's ``0`` / ``1``) is an integer again."""
    return int(name) if name.lstrip("-").isdigit() and str(int(name)) == name else name


def unlabelled_split(rows: list[dict[str, Any]]) -> TaskSplit:
    """Rows with a ``text`` (and ``text_pair``) as a split without labels (zeros)."""
    texts = [str(r["text"]) for r in rows]
    pairs = [str(r["text_pair"]) for r in rows] if rows and "text_pair" in rows[0] else None
    return TaskSplit(texts, np.zeros(len(texts), np.int64), pairs)
