"""The kinds of output directory ptm writes, and the names of its bookkeeping files there."""

from __future__ import annotations

import os
from dataclasses import dataclass

MARKER = ".ptmkit-output.json"
LOCK = ".ptmkit-lock"
JOURNAL = ".ptmkit-journal"  # what the command writing now has written so far, a line per write
VERSION = 2
PathLike = str | os.PathLike[str]
Stat = tuple[int, int]  # (size, mtime_ns) of a file ptm wrote


@dataclass(frozen=True)
class Kind:
    """One kind of output directory.

    names: the top-level entries a command of this kind writes in place (a run's ``config.json``,
    ``checkpoints``, ...); staged outputs take the names of what they built instead.
    overwrite: whether its command offers ``--overwrite`` (the refusal message says so).
    """

    label: str
    command: str
    names: tuple[str, ...] = ()
    overwrite: bool = True


KINDS: dict[str, Kind] = {
    "run": Kind("pre-training run", "ptm pretrain",
                ("config.json", "metrics.jsonl", "loss.png", "checkpoints", "README.md", "tensorboard", "compute.json")),
    "corpus": Kind("prepared corpus", "ptm prepare"),
    "vectors": Kind("static word-vectors run", "ptm pretrain (static model)"),
    "finetune": Kind("fine-tuning output", "ptm finetune",
                     ("results.json", "predictions.jsonl", "metrics.jsonl", "loss.png", "best.safetensors",
                      "README.md", "tensorboard", "task_model.json", "tokenizer.json", "checkpoints")),
    "distil": Kind("distillation output", "ptm distil", ("summary.json", "distil.png", "README.md")),
    "quantize": Kind("quantized task model", "ptm quantize",
                     ("results.json", "task_model.json", "tokenizer.json", "best.safetensors", "quantize.png",
                      "README.md")),
    "prune": Kind("pruned task model", "ptm prune",
                  ("results.json", "task_model.json", "tokenizer.json", "best.safetensors", "curve.json", "curve.png",
                   "README.md")),
    "export": Kind("HF transformers export", "ptm export", overwrite=False),
    "onnx": Kind("ONNX export", "ptm export --format onnx", overwrite=False),
    "checkpoint": Kind("imported checkpoint", "ptm import", overwrite=False),
    "evaluate": Kind("evaluation", "ptm evaluate", ("results.json", "table.md", "table.png")),
    "compare": Kind("comparison", "ptm compare",
                    ("data", "runs", "finetune", "results.json", "table.md", "compare.png")),
    "budget": Kind("compute-budget study", "ptm budget",
                   ("data", "runs", "finetune", "results.json", "table.md", "budget.png")),
    "classifier": Kind("fastText classifier", "ptm fasttext-classify train"),
    "analyse": Kind("analysis", "ptm analyse", ("analysis.json", "report.md", "figures", "vectors")),
    "demo": Kind("demo output", "ptm demo",
                 ("text", "demo.png", "results.json", "summary.md"), overwrite=False),
}

BOOKKEEPING = (MARKER, LOCK, JOURNAL)


__all__ = ["BOOKKEEPING", "JOURNAL", "KINDS", "LOCK", "MARKER", "VERSION", "Kind", "PathLike", "Stat"]
