"""Students for distillation, built from a teacher task model (they share its tokenizer, so both
read the same token ids).

* ``layers`` — the teacher's encoder cut to some of its layers (DistilBERT, Sanh et al. 2019:
  one layer of every two), embeddings included: the student starts where the teacher is.
* ``transformer`` — a smaller Transformer of the teacher's family, freshly initialised (layers,
  width, heads, feed-forward size by ``KEY=VALUE``), as TinyBERT's student.
* ``bilstm`` — Tang et al. (2019), "Distilling task-specific knowledge from BERT into simple
  neural networks": a one-layer BiLSTM over word embeddings.  By default its cells and embeddings
  are as wide as the teacher (Tang et al.: 300), so the word table starts as the teacher's token
  embeddings (they used word2vec's); another ``hidden_size`` starts from random embeddings.
* ``pretrained`` — an encoder saved elsewhere (a task-agnostic distilled model, say); it must have
  been trained with the teacher's tokenizer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from ptmkit.build import build_encoder
from ptmkit.config import to_dict
from ptmkit.errors import PtmError
from ptmkit.pretrained import Pretrained, load_pretrained

KINDS = ("layers", "transformer", "bilstm", "pretrained")
# Tang et al. (2019): one BiLSTM layer (they used 300 units, over 300-d word2vec embeddings)
BILSTM = {"encoder": "lstm", "num_layers": 1, "bidirectional": True, "residual": False, "char_cnn": False,
          "dropout": 0.1, "projection_size": None}


@dataclass(frozen=True)
class StudentSpec:
    """kind: one of :data:`KINDS`; layers: the teacher layers a ``layers`` student keeps (0-based;
    ``None``: every other one, the top one included); config: encoder settings of a ``transformer``
    or ``bilstm`` student; path: a ``pretrained`` student's run or checkpoint."""

    kind: str = "layers"
    layers: tuple[int, ...] | None = None
    config: tuple[tuple[str, Any], ...] = ()
    path: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "layers": list(self.layers) if self.layers is not None else None,
                "config": dict(self.config), "path": self.path}


def every_other(num_layers: int) -> list[int]:
    """DistilBERT's choice: one layer of every two, ending with the top one (6 -> 1, 3, 5)."""
    return list(range(num_layers - 1, -1, -2))[::-1]


def build_student(teacher: Any, spec: StudentSpec, seed: int) -> Pretrained:
    """The student encoder (as a ``Pretrained`` without heads, for ``finetune``) for the teacher task
    model ``teacher`` (:class:`ptmkit.tasks.saved.TaskModel`)."""
    if spec.kind not in KINDS:
        raise PtmError(f"unknown student {spec.kind!r}; students: {', '.join(KINDS)}")
    t_enc = teacher.backbone
    torch.manual_seed(seed)
    model_cfg = dict(teacher.config["model"])
    if spec.kind == "layers":
        if not hasattr(t_enc, "keep_layers"):
            raise PtmError(f"a student of the teacher's layers needs a Transformer teacher; this one is "
                           f"{t_enc.name!r}: choose --student transformer or bilstm")
        encoder = copy.deepcopy(t_enc)
        encoder.keep_layers(list(spec.layers) if spec.layers is not None else every_other(t_enc.num_layers))
    elif spec.kind == "pretrained":
        loaded = load_pretrained(spec.path, heads=False)
        if loaded.tokenizer.sha256() != teacher.tokenizer.sha256():
            raise PtmError(f"the student {spec.path} was trained with another tokenizer than the teacher: teacher and "
                           f"student must share one (they read the same token ids); distil from a student made "
                           f"with the teacher's tokenizer")
        encoder = loaded.backbone
    else:
        base = {**BILSTM, "vocab_size": model_cfg["vocab_size"], "hidden_size": t_enc.output_size} \
            if spec.kind == "bilstm" else model_cfg
        given = dict(spec.config)
        if "vocab_size" in given and given["vocab_size"] != model_cfg["vocab_size"]:
            raise PtmError("the student reads the teacher's token ids: its vocab_size is the teacher's")
        encoder = build_encoder({**base, **given, "pruned_heads": {}} if spec.kind == "transformer"
                                else {**base, **given}, teacher.tokenizer)
        if spec.kind == "bilstm":
            _embeddings_from(encoder, t_enc)
    config = {**teacher.config, "model": {"encoder": encoder.name, **to_dict(encoder.config)}}
    return Pretrained(config, teacher.tokenizer, encoder.train(), None, None)


def _embeddings_from(student: Any, teacher: Any) -> None:
    """Copy the teacher's token embeddings into the student's word table where the shapes agree."""
    s, t = student.input_embeddings(), teacher.input_embeddings()
    if s is not None and t is not None and s.weight.shape == t.weight.shape:
        with torch.no_grad():
            s.weight.copy_(t.weight)


def copy_head(student: torch.nn.Module, teacher: torch.nn.Module) -> list[str]:
    """Start the student's task head (pooler aside: it is the encoder's) from the teacher's: every
    parameter outside the encoder whose name and shape agree.  Returns the names copied."""
    t_state = {k: v for k, v in teacher.state_dict().items() if not k.startswith("backbone.")}
    s_state = student.state_dict()
    same = {k: v for k, v in t_state.items() if k in s_state and s_state[k].shape == v.shape}
    student.load_state_dict(same, strict=False)
    return sorted(same)


__all__ = ["KINDS", "StudentSpec", "build_student", "copy_head", "every_other"]
