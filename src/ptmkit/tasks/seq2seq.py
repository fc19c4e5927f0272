"""Sequence-to-sequence fine-tuning: source text -> target text with an encoder–decoder (BART,
T5, MASS; Lewis et al. 2020, Raffel et al. 2020).

Data: three files (JSONL, CSV or TSV) with a ``source`` and a ``target`` column (``--column
source=... --column target=...``).  A row without a target, with an empty source or target, or
whose target does not fit the decoder is refused naming its file and line.

Encoding: the source is ``[CLS] source [SEP]`` (cut to ``max_seq_len`` tokens, as classification
cuts its inputs); the target is ``target [SEP]``, which the decoder reads shifted right behind its
start token (teacher forcing) and must predict in full: a target longer than ``max_target_len``
tokens, or than the decoder's positions, is an error, never cut (a cut target would teach the
model to stop early).

Training minimises the mean cross-entropy of the target tokens through the encoder–decoder's
tied output layer (:func:`~ptmkit.nn.linear_ce.linear_cross_entropy`, as in pre-training).
Prediction decodes every source with the shared decoding loop (:mod:`ptmkit.generation`):
greedy by default, beam search with ``num_beams`` (``length_penalty``, ``no_repeat_ngram_size``,
``early_stopping``), the key/value cache throughout.  Scores (well-kept libraries, so numbers
compare with published ones): corpus BLEU and chrF from ``sacrebleu``, ROUGE-L F1 from
``rouge-score``, the teacher-forced ``loss`` (mean target-token NLL), and the same three text
scores for the *copy baseline* (output = source), which tells how much a model changes for the
better.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ptmkit.data.tasks import SPLITS, TaskSplits, read_numbered_rows
from ptmkit.errors import PtmError, suggest
from ptmkit.fileio import atomic_write_text
from ptmkit.generation import GenerationConfig, Seq2SeqStepper, decode
from ptmkit.nn.linear_ce import linear_cross_entropy
from ptmkit.nn.targets import IGNORE_INDEX, target_mask
from ptmkit.registry import register
from ptmkit.tasks.base import TaskType
from ptmkit.tasks.batches import ShuffledBatches, by_length
from ptmkit.train.step import StepOutput, input_tokens

# ------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Seq2SeqSplit:
    """``sources[N]`` and ``targets[N]`` texts; ``where[N]``: each pair's ``file:line``."""

    sources: list[str]
    targets: list[str]
    where: list[str]

    def __len__(self) -> int:
        return len(self.sources)

    def subset(self, index: np.ndarray) -> Seq2SeqSplit:
        idx = [int(i) for i in index]
        pick = lambda items: [items[i] for i in idx]  # noqa: E731
        return Seq2SeqSplit(pick(self.sources), pick(self.targets), pick(self.where))


@dataclass(frozen=True)
class Seq2SeqData(TaskSplits):
    """A text-to-text task (three :class:`Seq2SeqSplit`)."""

    name: str
    train: Seq2SeqSplit
    dev: Seq2SeqSplit
    test: Seq2SeqSplit
    meta: dict[str, Any] = field(default_factory=dict)

    task_type = "seq2seq"
    label_names = ["text"]
    is_pair = False


def read_pairs(path: str | Path, source: str = "source", target: str = "target") -> Seq2SeqSplit:
    """One split of (source, target) pairs; every refusal names the file and line."""
    rows = read_numbered_rows(path)  # refuses an empty split, non-UTF-8 text and broken rows, naming the line
    sources, targets, where = [], [], []
    for n, row in rows:
        for column in (source, target):
            if column not in row:
                have = ", ".join(map(str, row))
                raise PtmError(f"{path}:{n}: no {column!r} column{suggest(column, list(row))} (the row has {have}); "
                               f"name the columns with --column source=... --column target=...")
        src, tgt = row[source], row[target]
        if src is None or not str(src).strip():
            raise PtmError(f"{path}:{n}: the source is empty; every pair needs a text to rewrite")
        if tgt is None or not str(tgt).strip():
            raise PtmError(f"{path}:{n}: the target is missing or empty; every pair needs the text to produce")
        sources.append(str(src))
        targets.append(str(tgt))
        where.append(f"{Path(path)}:{n}")
    return Seq2SeqSplit(sources, targets, where)


def load_pair_files(train: str | Path, dev: str | Path, test: str | Path, name: str | None = None,
                    source: str = "source", target: str = "target") -> Seq2SeqData:
    splits = [read_pairs(p, source, target) for p in (train, dev, test)]
    return Seq2SeqData(name or Path(train).stem, *splits, meta={"files": [str(train), str(dev), str(test)]})


# --------------------------------------------------------------------------------------- encoding


@dataclass
class EncodedPairs:
    """Per pair: ``sources[i]`` ``[CLS] ... [SEP]`` and ``targets[i]`` ``... [SEP]`` token ids."""

    sources: list[np.ndarray]
    targets: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.sources)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(s) for s in self.sources), dtype=np.int64, count=len(self.sources))


def encode_pairs(split: Seq2SeqSplit, tokenizer: Any, max_source_len: int, max_target_len: int) -> EncodedPairs:
    """Token ids of every pair (see the module docstring); a target over ``max_target_len`` tokens
    (its [SEP] included) is an error naming its file and line."""
    cls, sep = int(tokenizer.cls_id), int(tokenizer.sep_id)
    sources = [np.asarray([cls, *ids[: max_source_len - 2], sep], dtype=np.int64)
               for ids in tokenizer.encode_batch(split.sources)]
    targets = []
    for i, ids in enumerate(tokenizer.encode_batch(split.targets)):
        if len(ids) + 1 > max_target_len:
            raise PtmError(
                f"{split.where[i]}: the target has {len(ids) + 1} tokens with its [SEP], more than the decoder allows "
                f"({max_target_len}: max_target_len, at most the model's positions); shorten it or raise max_target_len"
            )
        targets.append(np.asarray([*ids, sep], dtype=np.int64))
    return EncodedPairs(sources, targets)


def collate_pairs(enc: EncodedPairs, rows: np.ndarray, pad_id: int, start_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` / ``attention_mask`` ``[B, S]``, ``decoder_input_ids`` (start
    token, then the target shifted right) and ``labels`` ``[B, T]`` (-100 at padding)."""
    src = [enc.sources[int(r)] for r in rows]
    tgt = [enc.targets[int(r)] for r in rows]
    S, T = max(len(s) for s in src), max(len(t) for t in tgt)
    input_ids = np.full((len(rows), S), pad_id, dtype=np.int64)
    attention = np.zeros((len(rows), S), dtype=np.int64)
    labels = np.full((len(rows), T), IGNORE_INDEX, dtype=np.int64)
    decoder_input = np.full((len(rows), T), pad_id, dtype=np.int64)
    for b, (s, t) in enumerate(zip(src, tgt)):
        input_ids[b, : len(s)], attention[b, : len(s)] = s, 1
        labels[b, : len(t)] = t
        decoder_input[b, 0] = start_id
        decoder_input[b, 1 : len(t)] = t[:-1]
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention),
            "decoder_input_ids": torch.from_numpy(decoder_input), "labels": torch.from_numpy(labels)}


# ------------------------------------------------------------------------------------------ model


class Seq2SeqModel(nn.Module):
    """An encoder–decoder and its tied output layer: target-token cross-entropy for training,
    :meth:`generate` for prediction."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        needed = ("encode", "decode", "start_cache", "lm_input")
        missing = [m for m in needed if not callable(getattr(backbone, m, None))]
        if missing:
            raise PtmError(
                f"seq2seq fine-tuning needs an encoder–decoder (BART, T5, MASS), and the {backbone.name} encoder has "
                f"no decoder; pre-train one of those, or fine-tune this model on a classification task"
            )
        self.backbone = backbone

    def token_losses(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        """Mean cross-entropy over the batch's real target tokens, and their count."""
        out = self.backbone(batch["input_ids"], attention_mask=batch["attention_mask"],
                            decoder_input_ids=batch["decoder_input_ids"],
                            decoder_attention_mask=target_mask(batch["labels"]))
        real = batch["labels"] != IGNORE_INDEX
        h = self.backbone.lm_input(out.last_hidden_state[real])  # [N, H]: only real positions reach the vocabulary
        loss = linear_cross_entropy(h, self.backbone.output_embeddings(), self.backbone.output_bias(),
                                    batch["labels"][real])
        return loss, int(h.shape[0])

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        loss, n = self.token_losses(batch)
        return StepOutput(loss=loss, metrics={"nll": loss.detach()}, n_tokens=input_tokens(batch),
                          n_predictions=n)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cfg: GenerationConfig, eos_id: int,
                 pad_id: int) -> torch.Tensor:
        """Decoded token ids ``[B, L]`` for the sources ``[B, S]`` (``pad_id`` after ``eos_id``)."""
        stepper = Seq2SeqStepper(self.backbone, input_ids, attention_mask, use_cache=True)
        return decode(stepper, cfg, eos_id=eos_id, pad_id=pad_id)


# ------------------------------------------------------------------------------------ evaluation


def text_scores(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (sacrebleu's defaults: 13a tokenisation, BLEU-4) and the mean ROUGE-L
    F1 (rouge-score, with stemming), all in [0, 100]."""
    try:
        import sacrebleu
        from rouge_score import rouge_scorer
    except ImportError as exc:  # optional dependencies of this task type
        raise PtmError(f"seq2seq scores need sacrebleu and rouge-score ({exc.name} is missing): "
                       f"pip install 'ptmkit[seq2seq]'") from None
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    rouge = [scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(hypotheses, references)]
    return {"bleu": float(sacrebleu.corpus_bleu(hypotheses, [references]).score),
            "chrf": float(sacrebleu.corpus_chrf(hypotheses, [references]).score),
            "rouge_l": 100.0 * float(np.mean(rouge)) if rouge else 0.0}


@dataclass(frozen=True)
class Seq2SeqOptions:
    """max_target_len: the longest target in tokens with its [SEP] (a longer one is an error) and
    the most tokens decoded.  Decoding of the dev and test predictions: num_beams (1 = greedy),
    length_penalty, no_repeat_ngram_size, early_stopping (with beams; HF transformers' rules)."""

    max_target_len: int = 128
    num_beams: int = 1
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    early_stopping: bool = True

    def __post_init__(self) -> None:
        for name in ("max_target_len", "num_beams"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.early_stopping, bool):
            raise PtmError(f"early_stopping must be true or false, got {self.early_stopping!r}")

    def generation(self) -> GenerationConfig:
        beams = self.num_beams > 1
        return GenerationConfig(max_new_tokens=self.max_target_len, greedy=True, num_beams=self.num_beams,
                                length_penalty=self.length_penalty if beams else 1.0,
                                early_stopping=self.early_stopping if beams else False,
                                no_repeat_ngram_size=self.no_repeat_ngram_size)


@register("task_type", "seq2seq")
class Seq2Seq(TaskType):
    """Text-to-text fine-tuning of an encoder–decoder, decoded greedily or by beam search."""

    name = "seq2seq"
    options_class = Seq2SeqOptions
    metrics = ("bleu", "chrf", "rouge_l", "loss")
    columns = {"source": "source", "target": "target"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.options.generation()  # refuse bad decoding settings before training
        for name in ("aux_lm_weight", "gpt_transform", "symmetric_pairs", "adapter_size"):
            if getattr(self.cfg, name):
                raise PtmError(f"{name} does not apply to seq2seq fine-tuning; leave it at its default")
        if self.cfg.mode == "features":
            raise PtmError("seq2seq fine-tuning trains the decoder with the encoder: use mode=finetune")

    @classmethod
    def read_files(cls, train: Any, dev: Any, test: Any, name: str | None = None, source: str = "source",
                   target: str = "target") -> Seq2SeqData:
        return load_pair_files(train, dev, test, name=name, source=source, target=target)

    @classmethod
    def matches(cls, fields: set[str]) -> bool:
        return {"source", "target"} <= fields

    def encode(self, split: str) -> EncodedPairs:
        return encode_pairs(self.data.split(split), self.tokenizer, self.cfg.max_seq_len, self.options.max_target_len)

    def build(self, backbone: nn.Module) -> Seq2SeqModel:
        model = Seq2SeqModel(backbone)
        positions = backbone.max_positions()
        if positions is not None and positions < self.options.max_target_len:
            raise PtmError(f"max_target_len={self.options.max_target_len} exceeds the decoder's {positions} positions; "
                           f"set max_target_len <= {positions}")
        self.start_id = int(backbone.config.decoder_start_token_id)
        return model

    def batches(self, encoded_train: EncodedPairs, seed: int) -> ShuffledBatches:
        pad, start = int(self.tokenizer.pad_id), self._start_id()
        return ShuffledBatches(len(encoded_train), lambda rows: collate_pairs(encoded_train, rows, pad, start),
                               self.cfg.batch_size, seed)

    def _start_id(self) -> int:
        if not hasattr(self, "start_id"):
            raise PtmError("build the model before its batches")
        return self.start_id

    @torch.no_grad()
    def predict(self, model: nn.Module, encoded: EncodedPairs, device: Any) -> tuple[list[str], float]:
        """The decoded texts (in the split's order) and the teacher-forced mean token loss."""
        model.eval()
        pad, sep = int(self.tokenizer.pad_id), int(self.tokenizer.sep_id)
        texts: list[str] = [""] * len(encoded)
        total, count = 0.0, 0
        rows = lambda index: collate_pairs(encoded, index, pad, self._start_id())  # noqa: E731
        gen = self.options.generation()
        for index, batch in by_length(encoded.lengths, self.cfg.eval_batch_size, rows, device):
            loss, n = model.token_losses(batch)
            total, count = total + float(loss) * n, count + n
            ids = model.generate(batch["input_ids"], batch["attention_mask"], gen, eos_id=sep, pad_id=pad)
            for r, i in enumerate(index):
                texts[int(i)] = self.tokenizer.decode([int(t) for t in ids[r] if int(t) not in (sep, pad)])
        return texts, total / max(count, 1)

    def score(self, split: str, predictions: tuple[list[str], float]) -> dict[str, float]:
        texts, loss = predictions
        part = self.data.split(split)
        copy = text_scores(part.sources, part.targets)
        return {**text_scores(texts, part.targets), "loss": loss, **{f"copy_{k}": v for k, v in copy.items()}}

    def write_predictions(self, path: Path, split: str, predictions: tuple[list[str], float]) -> None:
        part = self.data.split(split)
        rows = (json.dumps({"source": s, "target": t, "prediction": p}, ensure_ascii=False)
                for s, t, p in zip(part.sources, part.targets, predictions[0]))
        atomic_write_text(path, "\n".join(rows) + "\n")

    # -- prediction on new rows (ptm predict): decoded with the model's own settings (greedy unless
    # it was fine-tuned with num_beams), the target-side loss of an empty target ignored
    input_columns = ("source",)
    line_column = "source"

    @classmethod
    def unlabelled(cls, info: dict[str, Any], rows: list[dict[str, Any]]) -> Seq2SeqData:
        empty = Seq2SeqSplit([], [], [])
        test = Seq2SeqSplit([str(r["source"]) for r in rows], [""] * len(rows), [f"row {n}" for n in range(1, len(rows) + 1)])
        return Seq2SeqData(str(info.get("task", "task")), empty, empty, test)

    def records(self, predictions: tuple[list[str], float]) -> list[dict[str, Any]]:
        return [{"source": s, "prediction": p} for s, p in zip(self.data.test.sources, predictions[0])]


__all__ = ["EncodedPairs", "Seq2Seq", "Seq2SeqData", "Seq2SeqModel", "Seq2SeqOptions", "Seq2SeqSplit", "SPLITS",
           "collate_pairs", "encode_pairs", "load_pair_files", "read_pairs", "text_scores"]
