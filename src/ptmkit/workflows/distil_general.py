"""``ptm distil TEACHER --general --data TEXT``: task-agnostic distillation of a pre-trained encoder on a
corpus (DistilBERT / TinyBERT's general distillation) into a smaller pre-trained model; a causal LM
teacher (GPT) distils into a smaller causal LM (:mod:`ptmkit.objectives.distil_clm`).

The student is the teacher's architecture with fewer layers (``layers``: the teacher layers it
starts from; default one of two, DistilBERT's choice) and the teacher's tokenizer; it is trained
by ``ptm pretrain``'s loop with the :mod:`ptmkit.objectives.distil_mlm` objective, so the output is an
ordinary pre-training run (checkpoints, exact resume, ``metrics.jsonl``) that ``ptm finetune``
fine-tunes like any other.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ptmkit.build import is_causal
from ptmkit.compress.students import every_other
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained
from ptmkit.train import checkpoint as ckpt
from ptmkit.workflows.pretrain import pretrain

# The student's training when the user sets nothing (DistilBERT: lr 5e-4, warmup; here a CPU-sized budget)
TRAIN = {"lr": 5e-4, "warmup_steps": 100, "max_steps": 2000, "batch_size": 32, "seq_len": 128, "log_every": 50,
         "save_every": 500, "eval_every": 500, "eval_batches": 10, "weight_decay": 0.01}


def general_config(teacher: str | os.PathLike, layers: Sequence[int] | None, weights: dict[str, float]) -> dict[str, Any]:
    """The student run's config: the teacher's model with ``len(layers)`` layers, its tokenizer file, the
    ``distil_mlm`` objective with ``weights`` and :data:`TRAIN` (overrides apply on top)."""
    # absolute: the run's config names the teacher, and a resumed run must name the same one from any directory
    ck = ckpt.resolve_checkpoint(teacher).resolve()
    pre = load_pretrained(ck, heads=False)
    model = dict(pre.config["model"])
    if model.get("encoder", "transformer") != "transformer":
        raise PtmError(f"general distillation cuts a Transformer teacher's layers; this teacher is a "
                       f"{model.get('encoder')!r} encoder")
    keep = list(layers) if layers is not None else every_other(pre.backbone.num_layers)
    model.update(num_layers=len(keep), pruned_heads={})
    if is_causal(pre.config):  # a causal LM distils into a causal LM (the student's own loss: next token)
        weights = {("clm" if k == "mlm" else k): v for k, v in weights.items()}
        objective = {"name": "distil_clm", "teacher": str(ck), "init_layers": ",".join(map(str, keep)), **weights}
    else:
        objective = {"name": "distil_mlm", "teacher": str(ck), "init_layers": ",".join(map(str, keep)), "nsp": False,
                     **weights}
    return {"model": model, "objective": objective, "tokenizer": {"file": str(ck / ckpt.TOKENIZER_FILE)},
            "train": dict(TRAIN)}


def distil_general(teacher: str | os.PathLike, data: Sequence[str | os.PathLike], out: str | os.PathLike,
                   layers: Sequence[int] | None, weights: dict[str, float], overrides: Sequence[str] = (),
                   resume: bool = False, overwrite: bool = False) -> Path:
    """Distil the pre-trained ``teacher`` on ``data`` (text files or a corpus prepared with the teacher's
    tokenizer) into the run directory ``out``."""
    config = general_config(teacher, layers, weights)
    return pretrain(config, list(data) if len(data) > 1 else data[0], out, list(overrides), resume=resume,
                    overwrite=overwrite)


__all__ = ["TRAIN", "distil_general", "general_config"]
