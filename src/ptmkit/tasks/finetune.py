"""Fine-tuning a pre-trained encoder on a downstream task (Devlin et al. 2019, §4), whatever its
type (one registered file each: :mod:`ptmkit.tasks.base`).

``finetune`` builds ``SequenceClassifier(encoder)`` and trains it through the same
:class:`~ptmkit.train.trainer.Trainer` as pre-training (AdamW without decay on norms and biases,
linear warmup and decay or ULMFiT's slanted triangular schedule, AMP, DDP, the NaN guard,
atomic checkpoints every epoch and exact resume).  Dev-based model selection and gradual
unfreezing are Trainer callbacks (:mod:`ptmkit.tasks.callbacks`).  The test split is scored
with the selected epoch's weights.  ``init="random"`` gives the baseline without pre-training:
the same architecture, config and tokenizer, freshly initialised.

Two transfer modes (Peters et al. 2018; Devlin et al. 2019): ``mode="finetune"`` trains every
weight; ``mode="features"`` keeps the encoder fixed and trains only a scalar mix of its layers
and a small task network (``head="mlp"`` or ``"bilstm"``).
Parameter-efficient fine-tuning keeps the encoder's weights fixed too and trains a small part
beside the head: Houlsby adapters (``adapter_size``), LoRA (``lora_rank``) or BitFit (``bitfit``;
:mod:`ptmkit.tasks.efficient`: LoRA and BitFit save only their weights, on a recorded base).

Several tasks at once (MT-DNN, :mod:`ptmkit.tasks.multitask`): pass a ``MultiTaskData``
(``load_tasks("mr,brown-pos")``); the shared encoder gets one head per task and the run is
otherwise this one.  GPT's input transformations for clm models: ``gpt_transform``
(:mod:`ptmkit.tasks.gpt_inputs`).

Outputs in ``out_dir``: ``results.json`` (config, per-epoch history, dev and test metrics),
``predictions.jsonl`` (one test example per line: text, label, prediction, probabilities),
``metrics.jsonl`` + ``loss.png`` (train loss per epoch, dev scores) and ``best.safetensors`` (the
selected classifier's weights).  ``checkpoints/`` holds the resumable state while the run is
under way and is removed when it has finished.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from ptmkit import outputs
from ptmkit.artefacts import load_state
from ptmkit.build import build_encoder, objective_class
from ptmkit.config import to_dict
from ptmkit.data.tasks import TaskData
from ptmkit.encoders.static_vectors import load_vectors
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text, read_record
from ptmkit.identity import content_sha256, differences
from ptmkit.nn.adapters import add_adapters, freeze_for_adapters
from ptmkit.pretrained import load_pretrained
from ptmkit.runcard import write_run_card
from ptmkit.tasks.base import task_type_of
from ptmkit.tasks.callbacks import BEST_FILE, AuxWeightDecay, DevSelection, StagedFreezing
from ptmkit.tasks.classification import SequenceClassifier, classifier_on
from ptmkit.tasks.efficient import base_record, is_merged, make_efficient, merge, method
from ptmkit.tasks.finetune_config import MODES, RECIPES, SCHEDULES, FinetuneConfig, recipe_config
from ptmkit.tasks.gpt_inputs import GptTokens, init_new_rows
from ptmkit.tasks.saved import encoder_of, save_task_model, uses_token_types
from ptmkit.tasks.split_languages import SplitLanguages, feeding
from ptmkit.tasks.training import Training
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.budget import few_steps, warn_once
from ptmkit.train.optim import parameter_depths
from ptmkit.train.trainer import Trainer

log = logging.getLogger(__name__)

INITS = ("pretrained", "random")
RESULTS_FILE = "results.json"


# ------------------------------------------------------------------------------------- the model


def load_model(model: Any):
    """A :class:`ptmkit.train.checkpoint.Pretrained` from a run/checkpoint path, a word2vec / GloVe
    / fastText vectors file (a ``static_vectors`` encoder), or itself."""
    if model is None:
        raise PtmError("no model given: pass a pre-training run or checkpoint directory")
    if isinstance(model, (str, os.PathLike)):
        if Path(model).is_file():  # a word-vectors file: first-generation features

            return load_vectors(model)

        return load_pretrained(model, heads=False)
    return model


def after_intermediate_task(pretrained: Any, run_dir: str | os.PathLike) -> Any:
    """Two-stage fine-tuning (an intermediate task, then the target; Phang et al. 2018, the
    surveys' "multi-stage" transfer): ``pretrained`` with its encoder replaced by the one a
    finished fine-tuning in ``run_dir`` selected (``best.safetensors``, keys ``backbone.*``).  The
    encoder must be of the same architecture; the intermediate task's head is left behind."""
    path = Path(run_dir) / BEST_FILE
    if not path.is_file():
        raise PtmError(f"{run_dir} holds no {BEST_FILE}: give the directory of a finished fine-tuning run "
                       f"(OUT/pretrained-seed0, say), not its parent")
    ckpt.check_safetensors(path, "fine-tune the intermediate task again")
    state = {k[len("backbone."):]: v for k, v in load_file(str(path)).items() if k.startswith("backbone.")}
    backbone = copy.deepcopy(pretrained.backbone)
    load_state(backbone, state, path, what="this model's encoder (another architecture or size?)")
    return dc_replace(pretrained, backbone=backbone, objective=None, path=Path(run_dir))


def check_aux_lm(config: dict[str, Any], cfg: FinetuneConfig) -> None:
    """``aux_lm_weight > 0`` needs a model pre-trained as a causal LM with a tied output layer (an
    objective that declares ``generation = "causal_lm"``); :class:`PtmError` otherwise."""
    if cfg.aux_lm_weight <= 0:
        return

    name, cls, _ = objective_class(config.get("objective"))
    if getattr(cls, "generation", None) != "causal_lm":
        raise PtmError(
            f"aux_lm_weight={cfg.aux_lm_weight:g} adds GPT's auxiliary LM loss, which needs a causal LM with a tied "
            f"output layer (objective clm); this model was pre-trained with {name!r}: set aux_lm_weight=0"
        )


def check_splits(task_data: Any) -> None:
    """Every split of every task holds examples (data built in Python skips the file readers' checks):
    an empty train split gives no batch, an empty dev or test split no score."""
    for name, data in (getattr(task_data, "tasks", None) or {task_data.name: task_data}).items():
        for split in ("train", "dev", "test"):
            if len(data.split(split)) == 0:
                raise PtmError(f"task {name}: the {split} split is empty; every split needs at least one example")


def _backbone(pretrained: Any, init: str, seed: int):
    """A copy of the pre-trained backbone, or a fresh one of the same config (``init="random"``);
    the new task layers built after it depend only on ``seed``."""
    if init not in INITS:
        raise PtmError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    torch.manual_seed(seed)
    if init == "pretrained":
        return copy.deepcopy(pretrained.backbone)

    return build_encoder(pretrained.config["model"], pretrained.tokenizer)


def build_classifier(pretrained: Any, num_labels: int, cfg: FinetuneConfig, init: str, seed: int) -> SequenceClassifier:
    """The classifier on a copy of the pre-trained backbone, or on a fresh one (``init="random"``)."""
    check_aux_lm(pretrained.config, cfg)
    return classifier_on(_backbone(pretrained, init, seed), num_labels, cfg, pretrained.causal)


def _lowest_trainable(clf: SequenceClassifier, cfg: FinetuneConfig):
    """``epoch -> lowest trainable depth`` for gradual unfreezing / frozen embeddings, or ``None``."""
    if not (cfg.gradual_unfreeze or cfg.freeze_embeddings):
        return None
    top = clf.backbone.num_layers + 1

    def lowest(epoch: int) -> int:
        floor = max(0, top - (epoch - 1)) if cfg.gradual_unfreeze else 0
        return max(floor, 1) if cfg.freeze_embeddings else floor

    return lowest


# -------------------------------------------------------------------------------------- outputs


def _check_resumed(out: Path, recorded: dict[str, Any], asked: dict[str, Any], finished: bool) -> None:
    """--resume continues a run only with the settings and data it started with: another learning
    rate would be recorded but never used (the optimizer state trains on), another file mixes
    epochs of two data sets.  Names every difference."""
    defaults = json.loads(json.dumps(to_dict(FinetuneConfig())))  # a setting added later ran at its default
    stored = dict(recorded)
    if "finetune" in stored:  # an epoch checkpoint's config
        stored["config"] = stored.pop("finetune")
    stored = {k: stored.get(k) for k in asked}
    # a setting added later ran at its default; one that has since moved (into ``task``) is not compared
    stored["config"] = {k: v for k, v in {**defaults, **(stored["config"] or {})}.items() if k in defaults}
    if stored.get("data_sha256") is None:  # written before data fingerprints: not compared
        stored["data_sha256"] = asked["data_sha256"]
    diffs = differences(stored, asked)
    diffs = [d.replace("data_sha256:", "data (SHA-256 of the task's examples):") for d in diffs]
    if diffs:
        what = "a finished run" if finished else "an interrupted run"
        raise PtmError(
            f"cannot resume: {out} holds {what} with other "
            f"settings ({'; '.join(diffs[:5])}{'; ...' if len(diffs) > 5 else ''}); resume with the same settings "
            f"and data, or choose a new -o"
        )


def _resumable(out: Path) -> bool:
    """Whether an interrupted fine-tuning in ``out`` has progress a --resume would continue."""
    return any(out.glob("**/checkpoints/latest")) or any(out.glob("**/results.json"))


# -------------------------------------------------------------------------------------- training


def finetune(
    model: Any,
    task_data: TaskData,
    out_dir: str | Path | None,
    cfg: FinetuneConfig = FinetuneConfig(),
    init: str = "pretrained",
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = True,
    desc: str | None = None,
    resume: bool = False,
    callbacks: tuple = (),
    training: Training | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` (a run/checkpoint path or a loaded ``Pretrained``) on ``task_data``.

    Returns the result dict also written to ``out_dir/results.json`` (``out_dir=None`` writes
    nothing and cannot be resumed): ``dev``/``test`` metrics of the selected epoch,
    ``best_epoch``, per-epoch ``history``.  ``resume=True`` continues an interrupted run in
    ``out_dir`` from its last epoch checkpoint (the result is the uninterrupted run's) and
    returns a finished run's results as they are.  ``callbacks`` are passed on to the Trainer.
    ``training``: what the run optimises around the task model (:class:`~ptmkit.tasks.training.Training`:
    plain fine-tuning by default; distillation, module replacing).  The selected task model is saved
    in ``out_dir`` (:mod:`ptmkit.tasks.saved`), so ``load_task_model(out_dir)`` reloads it.
    """
    model_path = (model,) if isinstance(model, (str, os.PathLike)) else ()
    if out_dir is None:
        return _finetune(model, task_data, None, cfg, init, seed, progress, desc, resume, callbacks, training)
    out = Path(out_dir)
    # out_dir must be new, empty, or hold fine-tuning output of ptm's (``overwrite`` starts it over,
    # ``resume`` continues it); an input inside it is refused.  A failure keeps what --resume needs.
    with outputs.writing(out, "finetune", inputs=model_path, overwrite=overwrite, reuse=resume,
                         keep=lambda: _resumable(out)) as session:
        if overwrite and session.state == "own":
            outputs.clean(out)
        return _finetune(model, task_data, out, cfg, init, seed, progress, desc, resume, callbacks, training)


def _finetune(model: Any, task_data: TaskData, out: Path | None, cfg: FinetuneConfig, init: str, seed: int,
              progress: bool, desc: str | None, resume: bool, callbacks: tuple,
              training: Training | None) -> dict[str, Any]:
    """:func:`finetune` once ``out`` is open for writing (or ``None``: nothing is written)."""
    started = time.time()
    training = training or Training()
    data_sha256 = content_sha256(task_data)
    identity = {"config": to_dict(cfg), "init": init, "seed": seed, "data_sha256": data_sha256}
    if training.describe():  # plain fine-tuning records nothing more (runs written before stay resumable)
        identity["training"] = training.describe()
    asked = json.loads(json.dumps(identity))
    if resume and out is not None and (out / RESULTS_FILE).is_file():
        done = read_record(out / RESULTS_FILE, "move it away (or restore it) and resume again: the run "
                           "is then trained again from its last checkpoint, if any")
        _check_resumed(out, done, asked, finished=True)
        return done
    if resume and out is not None and ckpt.latest_checkpoint(out) is not None:
        latest = ckpt.latest_checkpoint(out)
        _check_resumed(out, ckpt.read_config(latest), asked, finished=False)
    check_splits(task_data)
    pretrained = load_model(model)
    tokenizer = pretrained.tokenizer
    max_position = pretrained.backbone.max_positions()
    if max_position is not None and cfg.max_seq_len > max_position:
        raise PtmError(f"max_seq_len={cfg.max_seq_len} exceeds the model's max_position={max_position}")
    with_types = uses_token_types(pretrained.backbone, task_data)

    causal = pretrained.causal
    if cfg.gpt_transform and not causal:
        raise PtmError("gpt_transform=true frames the input for a left-to-right model (GPT's extract token is read "
                       "last); this model is bidirectional: set gpt_transform=false")
    task = task_type_of(task_data, cfg, tokenizer, causal, with_types)
    encoded = {s: task.encode(s) for s in ("train", "dev", "test")}
    check_aux_lm(pretrained.config, cfg)
    backbone = _backbone(pretrained, init, seed)
    if cfg.layerdrop:  # LayerDrop while fine-tuning (Fan et al. 2020): the model can be cut to any depth afterwards
        if not hasattr(backbone, "layerdrop"):
            raise PtmError(f"layerdrop={cfg.layerdrop:g} skips Transformer layers; the {backbone.name!r} encoder has "
                           f"none to skip: set layerdrop=0")
        backbone.layerdrop = float(cfg.layerdrop)
    clf = task.build(backbone)
    languages = SplitLanguages.attach(backbone, pretrained.config, tokenizer, task_data)  # XLM's language embeddings
    if cfg.gpt_transform:  # after the head, so the head's initialisation does not depend on the switch

        init_new_rows(backbone, GptTokens.of(tokenizer))
    if cfg.adapter_size:
        clf.adapters = add_adapters(clf.backbone, cfg.adapter_size)
        freeze_for_adapters(clf.backbone)
    make_efficient(clf, encoder_of(clf), cfg)  # LoRA or BitFit, when asked for
    # the base the small weights will be saved against: its path and the digest of its encoder's weights
    base = base_record(pretrained, init) if method(cfg) and out is not None else None
    trained, batches = training.wrap(clf, task, encoded, task.batches(encoded["train"], seed), seed)
    train_cfg = cfg.train_config(task.train_size(encoded["train"]), seed, batches.steps_per_epoch)
    warn_once(few_steps(train_cfg.max_steps, batches.steps_per_epoch, cfg.epochs, cfg.batch_size, training.activity))

    def evaluate_dev(m: torch.nn.Module) -> dict[str, float]:
        m = training.kept(m)
        with feeding(languages, "dev"):
            predicted = task.predict_split(m, "dev", encoded["dev"], next(m.parameters()).device)
        return task.score("dev", task.choose_on_dev(m, predicted))

    selection = DevSelection(evaluate_dev, task.select, batches.steps_per_epoch, out, kept=training.kept)
    callbacks = [selection, *callbacks]
    lowest = _lowest_trainable(clf, cfg)
    if lowest is not None:
        callbacks.append(StagedFreezing(parameter_depths(trained)[0], lowest, batches.steps_per_epoch))
    if cfg.aux_lm_weight > 0 and cfg.aux_lm_decay != 1.0:
        callbacks.append(AuxWeightDecay(cfg.aux_lm_weight, cfg.aux_lm_decay, batches.steps_per_epoch))
    record = {k: v for k, v in identity.items() if k != "config"}
    trainer = Trainer(trained, batches, train_cfg, out, None, {"config": {"finetune": to_dict(cfg), **record}},
                      callbacks, desc=desc or f"fine-tune {init} seed={seed}", progress_bar=progress)
    selection.is_main = trainer.is_main
    trainer.fit(resume=resume and out is not None and ckpt.latest_checkpoint(out) is not None)

    clf.load_state_dict(selection.best_state())
    # counted as trained, before LoRA's updates are merged away
    num_parameters = sum(p.numel() for p in clf.parameters())
    trainable_parameters = sum(p.numel() for n, p in clf.named_parameters()
                               if p.requires_grad and not (cfg.mode == "features" and n.startswith("backbone.")))
    if cfg.lora_merge:  # before predicting: the predictions written are the saved (merged) model's
        merge(clf, encoder_of(clf))
    device = trainer.device
    with feeding(languages, "dev"):
        dev_pred = task.predict_split(clf, "dev", encoded["dev"], device)
    with feeding(languages, "test"):
        test_pred = task.predict_split(clf, "test", encoded["test"], device)
    result: dict[str, Any] = {
        "task": task_data.name,
        "task_type": getattr(task_data, "task_type", "classification"),
        "init": init,
        "seed": seed,
        "model": str(model) if isinstance(model, (str, os.PathLike)) else None,
        "labels": [str(x) for x in task_data.label_names],
        "sizes": {s: len(task_data.split(s)) for s in ("train", "dev", "test")},
        "best_epoch": selection.best_epoch,
        "select": task.select,
        "metrics": list(task.metrics),
        "dev": task.score("dev", dev_pred),
        "test": task.score("test", test_pred),
        "history": selection.history,
        "config": to_dict(cfg),
        "data_sha256": data_sha256,
        "num_parameters": num_parameters,
        "trainable_parameters": trainable_parameters,
        "time_s": round(time.time() - started, 2),
    }
    for key, value in (("training", training.describe()), ("derived_from", training.derived_from()),
                       ("compression", training.compression())):
        if value:
            result[key] = value
    if out is not None and trainer.is_main:
        save_task_model(out, clf, task, pretrained.config, tokenizer, cfg,
                        derived_from={"model": result["model"], "init": init, **training.derived_from()},
                        compression=training.compression(),
                        weights=None if is_merged(clf, cfg) else selection.best_state(), base=base)
        task.write_predictions(out / "predictions.jsonl", "test", test_pred)
        atomic_write_text(out / RESULTS_FILE, json.dumps(result, indent=2) + "\n")
        outputs.discard(out / ckpt.CHECKPOINTS)  # the run is complete: its resume state has served
        origins = [getattr(model, "path", model), (training.derived_from().get("teacher") or {}).get("run")]
        write_run_card(out, derives_from=[o for o in origins if o is not None])
    return result


__all__ = ["INITS", "MODES", "RECIPES", "SCHEDULES", "FinetuneConfig", "after_intermediate_task", "build_classifier",
           "check_aux_lm", "check_splits", "finetune", "load_model", "recipe_config"]
