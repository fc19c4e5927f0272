"""A fine-tuned model as a directory that loads on its own: the task model format.

Every fine-tuning run (and every compressed model made from one: a distilled student, a pruned,
cut or quantized model) writes, beside ``results.json``:

* ``best.safetensors``: the task model's weights (encoder under ``backbone.*``, then the head);
* ``tokenizer.json``;
* ``task_model.json``: what rebuilds the module before the weights are read — the encoder's config
  as the encoder itself reports it (so a student's width, a cut model's ``num_layers`` and a pruned
  model's ``pruned_heads`` are recorded), the pre-training config it came from (whether it reads
  left to right), the task (name, type, labels), the fine-tuning settings (pooling, head, task-type
  options), and where the model came from (``derived_from``) and how it was compressed
  (``compression``; a ``quantization`` entry makes the loader rebuild int8 modules through
  :func:`ptmkit.compress.quantize.restore`), and for LoRA or BitFit (:mod:`ptmkit.tasks.efficient`)
  ``parameter_efficient``: the method, whether LoRA's updates were merged, and the ``base``
  checkpoint (``path``, ``sha256`` of its encoder's weights).  With a base and no merge,
  ``best.safetensors`` holds only the small weights (LoRA's ``lora.*``, or the encoder's bias
  terms, and the head); the loader reads the encoder from the base, which must still hold the
  weights it held (another is refused, naming both).

``load_task_model(run_dir)`` returns a :class:`TaskModel`: the module in eval mode, its task type
bound to the task's data (a built-in task is read by name; the user's own task needs its data
passed again), the tokenizer and settings, and ``evaluate(split)``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save
from torch import nn

from ptmkit.artefacts import check_state, check_vocab, load_state, need, state_problem
from ptmkit.build import build_encoder, is_causal
from ptmkit.compress.quantize import restore
from ptmkit.config import from_dict, to_dict
from ptmkit.data.tasks import builtin_tasks, load_task
from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_bytes, atomic_write_text
from ptmkit.nn.adapters import add_adapters
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.base import TaskType, task_type_names, task_type_of, type_of
from ptmkit.tasks.callbacks import BEST_FILE
from ptmkit.tasks.efficient import is_merged, make_efficient, merge, method, small_names, small_state
from ptmkit.tasks.finetune_config import FinetuneConfig
from ptmkit.tokenization import Tokenizer
from ptmkit.train.checkpoint import check_safetensors, tensors_sha256

TASK_MODEL_FILE = "task_model.json"
TOKENIZER_FILE = "tokenizer.json"
FORMAT = 1


def encoder_config(backbone: nn.Module) -> dict[str, Any]:
    """The ``model`` section that rebuilds ``backbone`` as it is now (name + its config's fields)."""
    return {"encoder": backbone.name, **json.loads(json.dumps(to_dict(backbone.config)))}


def encoder_of(model: nn.Module) -> nn.Module:
    """The encoder inside a task model: its ``backbone``, else its first :class:`Encoder` submodule
    (multiple choice scores through a classifier)."""
    backbone = getattr(model, "backbone", None)
    if isinstance(backbone, Encoder):
        return backbone
    for module in model.modules():
        if isinstance(module, Encoder):
            return module
    raise PtmError(f"{type(model).__name__} holds no encoder")


def uses_token_types(backbone: nn.Module, task_data: Any) -> bool:
    """Whether the task's inputs carry token types: the encoder has a type table large enough
    (2 rows for sentence pairs, 1 otherwise)."""
    return getattr(backbone.config, "type_vocab_size", 0) >= (2 if getattr(task_data, "is_pair", False) else 1)


def save_task_model(out_dir: str | Path, model: nn.Module, task: TaskType, config: dict[str, Any], tokenizer: Any,
                    cfg: FinetuneConfig, derived_from: dict[str, Any] | None = None,
                    compression: dict[str, Any] | None = None,
                    weights: dict[str, torch.Tensor] | None = None, base: dict[str, str] | None = None) -> Path:
    """Write ``task_model.json``, ``tokenizer.json`` and ``best.safetensors`` into ``out_dir``
    (each atomically; ``task_model.json`` last, so a directory that has it is complete).

    config: the pre-training config the model descends from (its ``model`` section is replaced by
    the encoder's own, :func:`encoder_config`).  weights: the tensors to store (a quantized
    model's plain tensors); ``None`` stores ``model.state_dict()``.  base: for LoRA (unmerged) or
    BitFit, the pre-trained checkpoint the encoder's weights are (``{"path", "sha256"}``,
    :func:`ptmkit.tasks.efficient.base_record`): only the small weights are stored."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    backbone = encoder_of(model)
    info = {
        "format": FORMAT,
        "task": task.data.name,
        "task_type": task.name,
        "builtin": task.data.name in builtin_tasks(),
        "labels": [str(x) for x in getattr(task.data, "label_names", [])],
        "config": {**config, "model": encoder_config(backbone)},
        "causal": bool(task.causal),
        "finetune": json.loads(json.dumps(to_dict(cfg))),
        "derived_from": derived_from or {},
        "compression": compression or {},
    }
    meta = getattr(task.data, "meta", {}) or {}
    if "train_size" in meta:  # trained on a fixed subset (--train-size): distillation reuses the same one
        info["train_subset"] = {"size": int(meta["train_size"]), "seed": int(meta.get("train_subset_seed", 0))}
    state = weights if weights is not None else {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if method(cfg):
        merged = is_merged(model, cfg)
        info["parameter_efficient"] = {"method": method(cfg), "merged": merged, "base": base}
        if base is not None and not merged:
            state = small_state(model, backbone, state)
    # tensors that share storage (tied embeddings) are stored once each: safetensors refuses aliases
    state = {k: v.clone() if v.is_contiguous() else v.contiguous() for k, v in state.items()}
    atomic_write_bytes(out / BEST_FILE, save(state))
    if isinstance(tokenizer, (str, os.PathLike)):
        atomic_write_bytes(out / TOKENIZER_FILE, Path(tokenizer).read_bytes())
    else:
        tokenizer.save(out / TOKENIZER_FILE)
    atomic_write_text(out / TASK_MODEL_FILE, json.dumps(info, indent=2) + "\n")
    return out


def is_task_model(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding a saved task model."""
    return (Path(path) / TASK_MODEL_FILE).is_file()


@dataclass
class TaskModel:
    """A loaded fine-tuned (or compressed) model, ready to predict and score."""

    model: nn.Module
    task: TaskType
    config: dict[str, Any]
    tokenizer: Any
    cfg: FinetuneConfig
    info: dict[str, Any]
    task_data: Any
    path: Path
    _encoded: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def backbone(self) -> nn.Module:
        return encoder_of(self.model)

    def encoded(self, split: str) -> Any:
        """``task.encode(split)``, computed once."""
        if split not in self._encoded:
            self._encoded[split] = self.task.encode(split)
        return self._encoded[split]

    def predict(self, split: str, model: nn.Module | None = None) -> Any:
        """The task type's predictions for ``split`` (``model``: another module of the same task,
        e.g. a pruned copy; default this one)."""
        m = self.model if model is None else model
        device = next(m.parameters(), torch.empty(0)).device
        with torch.no_grad():
            return self.task.predict_split(m.eval(), split, self.encoded(split), device)

    def evaluate(self, split: str, model: nn.Module | None = None) -> dict[str, float]:
        """The task's metrics on ``split``."""
        return self.task.score(split, self.predict(split, model))


def _task_data_for(info: dict[str, Any], task_data: Any, run: Path) -> Any:
    if task_data is None:
        if not info.get("builtin"):
            raise PtmError(f"{run} was fine-tuned on the user's own task {info.get('task')!r}: give its files again "
                           f"(--train/--dev/--test) to score it")
        task_data = load_task(info["task"])
    given = getattr(task_data, "task_type", "classification")
    if given != info["task_type"]:
        raise PtmError(f"{run} holds a {info['task_type']} model; the task given is a {given} task")
    labels = [str(x) for x in getattr(task_data, "label_names", [])]
    if info.get("labels") and labels != info["labels"]:
        raise PtmError(f"{run} was trained with the labels {info['labels'][:10]}; the task given has "
                       f"{labels[:10]}: give the task it was fine-tuned on")
    subset = info.get("train_subset")
    if subset and task_data.name == info["task"] and len(task_data.train) > subset["size"]:
        # the model was trained on a fixed subset (--train-size): its task is that subset again, so a
        # student distilled from it learns from the examples the teacher saw (dev and test are whole)
        task_data = task_data.with_train_size(subset["size"], subset["seed"])
    return task_data


def read_task_info(run: Path) -> dict[str, Any]:
    """``run/task_model.json``, refused clearly when unreadable or written by a newer ptmkit."""
    file = run / TASK_MODEL_FILE
    try:
        info = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PtmError(f"{file} cannot be read: {exc}") from None
    if not isinstance(info, dict):
        raise PtmError(f"{file} is not a JSON object; it is damaged")
    if info.get("format", 0) > FORMAT:
        raise PtmError(f"{file} was written by a newer ptmkit (format {info['format']}); upgrade ptmkit")
    return info


def _load_on_base(model: nn.Module, record: dict[str, Any], run: Path, header: dict[str, Any],
                  base: str | os.PathLike | None) -> None:
    """A LoRA or BitFit model saved without its encoder: the encoder from the base checkpoint (the
    recorded one, or ``base``), refused unless its weights are those fine-tuned on; then the small
    weights from ``run``."""
    recorded = need(record, "base", dict, run / TASK_MODEL_FILE)
    kind = record.get("method", "parameter-efficient")
    path = Path(base) if base is not None else Path(str(recorded.get("path")))
    if not path.exists():
        raise PtmError(f"{run} holds only its {kind} weights and task head, for the base checkpoint {path}, which is "
                       f"not there: restore it, or give its new place (load_task_model(..., base=PATH))")
    pretrained = load_pretrained(path, heads=False)
    digest = tensors_sha256(pretrained.backbone.state_dict())
    if digest != recorded.get("sha256"):
        raise PtmError(f"{run} was fine-tuned ({kind}) on the base {recorded.get('path')} (weights sha256 "
                       f"{str(recorded.get('sha256'))[:12]}), and {pretrained.path} holds other weights (sha256 "
                       f"{digest[:12]}): load it on the base it was fine-tuned on")
    encoder = encoder_of(model)
    load_state(encoder, pretrained.backbone.state_dict(), pretrained.path, what=f"the encoder {TASK_MODEL_FILE} describes")
    own = model.state_dict(keep_vars=True)
    expected = {k: own[k] for k in small_names(model, encoder) if k in own}
    problem = state_problem(expected, {k: v["shape"] for k, v in header.items() if k != "__metadata__"})
    if problem:
        raise PtmError(f"the weights in {run / BEST_FILE} do not fit the {kind} model {TASK_MODEL_FILE} describes: {problem}")
    model.load_state_dict(load_file(str(run / BEST_FILE)), strict=False)


def load_task_model(run_dir: str | Path, task_data: Any = None, device: str | torch.device = "cpu",
                    base: str | os.PathLike | None = None, merged: bool = False) -> TaskModel:
    """Load the task model saved in ``run_dir`` (a fine-tuning run such as ``OUT/pretrained-seed0``,
    or a compressed model), in eval mode.  ``task_data``: the task to bind it to (default: the
    built-in task it was trained on).  base: for a LoRA or BitFit model saved with only its small
    weights, the base checkpoint to read the encoder from (default: the recorded path); its weights
    must be the ones the model was fine-tuned on.  merged: fold LoRA's updates into the weights
    once loaded (a plain model computing the same, at the base model's cost)."""
    run = Path(run_dir)
    file = run / TASK_MODEL_FILE
    if not file.is_file():
        hint = ""
        if any(run.glob(f"*/{TASK_MODEL_FILE}")):
            hint = f"; it holds runs: {', '.join(sorted(p.parent.name for p in run.glob(f'*/{TASK_MODEL_FILE}'))[:4])}"
        elif (run / BEST_FILE).is_file():
            hint = ("; its fine-tuning is still under way, or was made by an older ptmkit that did not save the "
                    "model's shape (then fine-tune again)")
        raise PtmError(f"{run} is not a fine-tuned model (no {TASK_MODEL_FILE}){hint}")
    info = read_task_info(run)
    tokenizer = Tokenizer.load(run / TOKENIZER_FILE)
    cfg = from_dict(FinetuneConfig, need(info, "finetune", dict, file), "finetune")
    task_data = _task_data_for(info, task_data, run)
    config = need(info, "config", dict, file)
    check_vocab(run / TOKENIZER_FILE, tokenizer.vocab_size, need(config, "model", dict, file), file)
    backbone = build_encoder(config["model"], tokenizer)
    task = task_type_of(task_data, cfg, tokenizer, bool(info.get("causal", is_causal(config))),
                        uses_token_types(backbone, task_data))
    model = task.build(backbone)
    if cfg.adapter_size:
        model.adapters = add_adapters(encoder_of(model), cfg.adapter_size)
    efficient = info.get("parameter_efficient") or {}
    if not efficient.get("merged"):
        make_efficient(model, encoder_of(model), cfg)
    header = check_safetensors(run / BEST_FILE, "fine-tune again")
    spec = (info.get("compression") or {}).get("quantization")
    if efficient.get("base") and not efficient.get("merged") and not spec:
        _load_on_base(model, efficient, run, header, base)
    elif spec:
        model = restore(model, spec, load_file(str(run / BEST_FILE)), run / BEST_FILE)
    else:
        # the header's shapes first: one line naming the first mismatching tensor, nothing read yet
        check_state(model, {k: v["shape"] for k, v in header.items() if k != "__metadata__"}, run / BEST_FILE,
                    what=f"the model {TASK_MODEL_FILE} describes")
        load_state(model, load_file(str(run / BEST_FILE)), run / BEST_FILE, what=f"the model {TASK_MODEL_FILE} describes")
    if merged and getattr(model, "lora", None) is not None:
        merge(model, encoder_of(model))
    model.to(device).eval()
    return TaskModel(model, task, config, tokenizer, cfg, info, task_data, run)


__all__ = ["TASK_MODEL_FILE", "TaskModel", "encoder_config", "encoder_of", "is_task_model", "load_task_model", "save_task_model",
           "uses_token_types"]


def load_predictor(run: str | Path, device: str | torch.device = "cpu") -> TaskModel:
    """The task model in ``run``, bound to its task type's (empty) prediction data; a directory
    that is not a fine-tuned task model, or a task type without prediction, is one line naming the fix."""
    run = Path(run)
    if not is_task_model(run):
        what = "a file" if run.is_file() else ("missing" if not run.exists() else "a directory")
        held = sorted(p.parent.name for p in run.glob(f"*/{TASK_MODEL_FILE}")) if run.is_dir() else []
        hint = (f"; it holds fine-tuned models: {', '.join(held[:4])} (give one of them)" if held else
                "; give a fine-tuning run (OUT/pretrained-seed0 of ptm finetune, or the output of ptm distil, "
                "prune or quantize); for sentence vectors of a pre-trained model use ptm encode")
        raise PtmError(f"{run} ({what}) is not a fine-tuned task model (no {TASK_MODEL_FILE}){hint}")
    info = read_task_info(run)
    kind = type_for(info)
    return load_task_model(run, kind.unlabelled(info, []), device)


def type_for(info: dict[str, Any]) -> type[TaskType]:
    name = str(info.get("task_type", "classification"))
    if name not in task_type_names():
        raise PtmError(f"the model's task type {name!r} is unknown to this ptmkit; task types: "
                       f"{', '.join(task_type_names())}")
    kind = type_of(name)
    if not kind.input_columns:
        kind.unlabelled(info, [])  # raises: not offered for this type, naming the fix
    return kind
