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
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ptmkit import outputs
from ptmkit.config import to_dict
from ptmkit.data.tasks import TaskData
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.identity import content_sha256, differences
from ptmkit.nn.layer_mix import MIXES, normalize_mix
from ptmkit.tasks.base import task_type_of
from ptmkit.tasks.classification import HEADS, POOLINGS, SequenceClassifier, classifier_on

log = logging.getLogger(__name__)

INITS = ("pretrained", "random")
MODES = ("finetune", "features")
SCHEDULES = ("linear", "slanted_triangular")
RESULTS_FILE = "results.json"


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning settings.

    lr: peak AdamW learning rate (BERT used 2e-5..5e-5 for base models; small models and
        randomly initialised ones like more, ~1e-4).
    warmup: fraction of the optimizer steps with a linear LR warmup (then linear decay to 0).
    max_seq_len: tokens per example including the special tokens (truncated beyond).
    dropout: before the classifier; ``None`` keeps the backbone's dropout rate.
    pooling: ``auto`` (``cls`` for BERT, ``last`` for GPT), ``cls``, ``last``, ``mean`` or
        ``concat`` (ULMFiT: ``[h_T; maxpool(H); meanpool(H)]``).
    select: dev metric that picks the epoch whose weights are kept (``loss`` is minimised).

    Fine-tuning strategies (Howard & Ruder 2018; Sun et al. 2019), all off by default:

    layer_decay: discriminative fine-tuning: layer ``i`` of ``L`` gets ``lr * layer_decay**(L - i)``
        and the embeddings ``lr * layer_decay**(L + 1)``, the new head ``lr`` (ULMFiT: 1 / 2.6).
    gradual_unfreeze: epoch 1 trains only the head (and pooler), every further epoch unfreezes
        the next layer down, the embeddings last (ULMFiT).
    freeze_embeddings: keep the (pre-trained) embedding layer fixed, so that words absent from a
        small training set keep their pre-trained neighbourhoods.
    schedule: ``linear`` (warmup then linear decay, BERT) or ``slanted_triangular`` (ULMFiT:
        ``warmup`` plays the paper's ``cut_frac``, the ratio is 32).

    ULMFiT's classifier fine-tuning with all its tricks is ``RECIPES["ulmfit"]``
    (:func:`recipe_config`, ``ptm finetune --recipe ulmfit``).

    Transfer mode and task network:

    mode: ``finetune`` (train everything) or ``features`` (frozen encoder: only ``mix`` and the
        head learn).
    mix: ``auto`` (``scalar`` for features, ``last`` for fine-tuning), ``last`` (top layer),
        ``scalar`` (ELMo's softmax-weighted mix of all layers) or ``layer:k`` / the integer ``k``
        (hidden state ``k`` alone: 0 = embeddings, ``num_layers`` = top, negative from the top;
        layer-wise probing).  An index outside the encoder's layers is refused when the head is built.
    head: ``linear``, ``mlp`` or ``bilstm`` (``head_hidden`` units).

    aux_lm_weight: GPT's auxiliary language-modelling loss (Radford et al. 2018): the loss is
        ``L_task + aux_lm_weight * L_LM`` over the input text (0 = off; the paper uses 0.5).  Only
        for models pre-trained as a causal LM with a tied output layer (the clm objective).
    aux_lm_decay: SiATL's schedule (Chronopoulou et al. 2019): epoch ``e`` weighs the LM loss by
        ``aux_lm_weight * aux_lm_decay ** (e - 1)``; 1 keeps it constant (GPT).
    task: the task type's own settings (``{"crf": True}`` for tagging, ``doc_stride`` for span QA,
        ``task_schedule`` for multi-task, decoding for seq2seq), read and validated by the type
        (:attr:`ptmkit.tasks.base.TaskType.options_class`); on the command line they are plain
        ``KEY=VALUE`` overrides like the others.
    gpt_transform: GPT's input transformations (Radford et al. 2018; :mod:`ptmkit.tasks.gpt_inputs`):
        ``<start> a (<delim> b) <extract>`` per sequence (per choice for multiple choice), the head
        reading the extract token; for a model pre-trained left to right (clm).  Off by default,
        which keeps the family's plain ``a [SEP] (b [SEP])``.
    symmetric_pairs: with ``gpt_transform``, GPT's similarity tasks: each pair is read in both
        orders and the two extract states are added before the head.
    adapter_size: bottleneck adapters of this many units after every attention and feed-forward
        sub-layer (Houlsby et al. 2019); the encoder's other weights stay fixed (layer norms
        train); 0 = off.

    Training loop: ``precision`` (fp32 | bf16, autocast on CUDA or CPU), ``device``, ``num_threads`` as in
    pre-training's ``train`` section.
    """

    epochs: int = 10
    lr: float = 1e-4
    batch_size: int = 32
    eval_batch_size: int = 128
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_seq_len: int = 128
    clip_norm: float = 1.0
    dropout: float | None = None
    pooling: str = "auto"
    select: str = "accuracy"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    layer_decay: float = 1.0
    gradual_unfreeze: bool = False
    freeze_embeddings: bool = False
    schedule: str = "linear"
    mode: str = "finetune"
    mix: str = "auto"
    head: str = "linear"
    head_hidden: int = 128
    aux_lm_weight: float = 0.0
    aux_lm_decay: float = 1.0
    adapter_size: int = 0
    gpt_transform: bool = False
    symmetric_pairs: bool = False
    precision: str = "fp32"
    device: str = "auto"
    num_threads: int = 0
    task: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.task, dict):
            raise PtmError(f"task holds the task type's settings as a mapping, got {self.task!r}")
        for name in ("epochs", "batch_size", "eval_batch_size", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"{name} must be a positive integer, got {value!r}")
        for name in ("lr", "warmup", "weight_decay", "clip_norm", "eps", "layer_decay", "aux_lm_weight", "aux_lm_decay"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"{name} must be a number, got {value!r}") from None
        if self.lr <= 0:
            raise PtmError(f"lr must be positive, got {self.lr}")
        if not 0.0 <= self.warmup < 1.0:
            raise PtmError(f"warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.weight_decay < 0 or self.clip_norm < 0:
            raise PtmError("weight_decay and clip_norm must be >= 0")
        if not 0.0 < self.layer_decay <= 1.0:
            raise PtmError(f"layer_decay must be in (0, 1] (1 disables it; ULMFiT uses 1/2.6), got {self.layer_decay}")
        for name in ("gradual_unfreeze", "freeze_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.dropout is not None and not 0.0 <= float(self.dropout) < 1.0:
            raise PtmError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.pooling not in POOLINGS:
            raise PtmError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if not isinstance(self.select, str) or not self.select:
            raise PtmError(f"select names a dev metric of the task type, got {self.select!r}")
        object.__setattr__(self, "mix", normalize_mix(self.mix, ("auto", *MIXES)))  # an integer k -> "layer:k"
        for name, allowed in (("mode", MODES), ("schedule", SCHEDULES), ("head", HEADS)):
            if getattr(self, name) not in allowed:
                raise PtmError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.mode == "features" and (self.gradual_unfreeze or self.freeze_embeddings):
            raise PtmError("mode=features keeps the whole encoder fixed; gradual_unfreeze and freeze_embeddings apply to mode=finetune")
        if isinstance(self.aux_lm_weight, bool) or not isinstance(self.aux_lm_weight, (int, float)) or self.aux_lm_weight < 0:
            raise PtmError(f"aux_lm_weight must be a number >= 0 (0 = no auxiliary LM loss), got {self.aux_lm_weight!r}")
        if not 0.0 < self.aux_lm_decay <= 1.0:
            raise PtmError(f"aux_lm_decay must be in (0, 1] (1 keeps the LM weight constant), got {self.aux_lm_decay}")
        if self.aux_lm_weight > 0 and self.mode == "features":
            raise PtmError("aux_lm_weight > 0 trains the encoder as a language model; it needs mode=finetune")
        if not isinstance(self.adapter_size, int) or isinstance(self.adapter_size, bool) or self.adapter_size < 0:
            raise PtmError(f"adapter_size must be an integer >= 0 (0 = no adapters), got {self.adapter_size!r}")
        if self.adapter_size and (self.mode == "features" or self.gradual_unfreeze or self.freeze_embeddings):
            raise PtmError("adapter_size > 0 trains adapters inside a fixed encoder; it needs mode=finetune without "
                           "gradual_unfreeze or freeze_embeddings")
        for name in ("gpt_transform", "symmetric_pairs"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.symmetric_pairs and not self.gpt_transform:
            raise PtmError("symmetric_pairs=true reads a pair in both orders with GPT's input transformation; "
                           "set gpt_transform=true as well")
        if not isinstance(self.head_hidden, int) or self.head_hidden <= 0:
            raise PtmError(f"head_hidden must be a positive integer, got {self.head_hidden!r}")

    @property
    def resolved_mix(self) -> str:
        return self.mix if self.mix != "auto" else ("scalar" if self.mode == "features" else "last")

    def train_config(self, n_train: int, seed: int, steps_per_epoch: int | None = None):
        """The Trainer's settings for ``n_train`` examples (``ceil(n_train / batch_size)`` steps an
        epoch, unless the batch source says ``steps_per_epoch``): one checkpoint and one log line per epoch."""
        from ptmkit.train.config import TrainConfig

        steps_per_epoch = steps_per_epoch or -(-n_train // self.batch_size)
        total = steps_per_epoch * self.epochs
        return TrainConfig(
            batch_size=self.batch_size, lr=self.lr, betas=tuple(self.betas), eps=self.eps, weight_decay=self.weight_decay,
            warmup_steps=int(round(self.warmup * total)), max_steps=total, schedule=self.schedule,
            layer_decay=self.layer_decay, clip_norm=self.clip_norm, log_every=steps_per_epoch, save_every=steps_per_epoch,
            eval_every=0, keep_checkpoints=1, seed=seed, precision=self.precision, device=self.device,
            num_threads=self.num_threads,
        )


# ULMFiT (Howard & Ruder 2018, section 3.3): concat pooling, a hidden layer of 50 units,
# discriminative fine-tuning (each layer down gets the LR / 2.6), slanted triangular LRs
# (cut_frac 0.1, ratio 32), gradual unfreezing (one more layer group per epoch, from the top),
# Adam with beta1 0.7, beta2 0.99, base LR 0.01.
RECIPES: dict[str, dict[str, Any]] = {
    "ulmfit": {
        "pooling": "concat", "head": "mlp", "head_hidden": 50, "layer_decay": 1 / 2.6, "gradual_unfreeze": True,
        "schedule": "slanted_triangular", "warmup": 0.1, "betas": (0.7, 0.99), "lr": 1e-2,
    },
}


def recipe_config(name: str | None, **changes: Any) -> FinetuneConfig:
    """A :class:`FinetuneConfig` from the named recipe (``None``: the defaults), then ``changes``."""
    if name is not None and name not in RECIPES:
        from ptmkit.errors import suggest

        raise PtmError(f"unknown fine-tuning recipe {name!r}{suggest(name, tuple(RECIPES))}; recipes: {', '.join(RECIPES)}")
    return replace(FinetuneConfig(), **{**(RECIPES[name] if name else {}), **changes})


# ------------------------------------------------------------------------------------- the model


def load_model(model: Any):
    """A :class:`ptmkit.train.checkpoint.Pretrained` from a run/checkpoint path, a word2vec / GloVe
    / fastText vectors file (a ``static_vectors`` encoder), or itself."""
    if model is None:
        raise PtmError("no model given: pass a pre-training run or checkpoint directory")
    if isinstance(model, (str, os.PathLike)):
        if Path(model).is_file():  # a word-vectors file: first-generation features
            from ptmkit.encoders.static_vectors import load_vectors

            return load_vectors(model)
        from ptmkit.pretrained import load_pretrained

        return load_pretrained(model, heads=False)
    return model


def after_intermediate_task(pretrained: Any, run_dir: str | os.PathLike) -> Any:
    """Two-stage fine-tuning (an intermediate task, then the target; Phang et al. 2018, the
    surveys' "multi-stage" transfer): ``pretrained`` with its encoder replaced by the one a
    finished fine-tuning in ``run_dir`` selected (``best.safetensors``, keys ``backbone.*``).  The
    encoder must be of the same architecture; the intermediate task's head is left behind."""
    from dataclasses import replace as dc_replace

    from safetensors.torch import load_file

    from ptmkit.tasks.callbacks import BEST_FILE

    path = Path(run_dir) / BEST_FILE
    if not path.is_file():
        raise PtmError(f"{run_dir} holds no {BEST_FILE}: give the directory of a finished fine-tuning run "
                       f"(OUT/pretrained-seed0, say), not its parent")
    state = {k[len("backbone."):]: v for k, v in load_file(str(path)).items() if k.startswith("backbone.")}
    backbone = copy.deepcopy(pretrained.backbone)
    try:
        backbone.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise PtmError(f"the encoder fine-tuned in {run_dir} does not fit this model's encoder "
                       f"(another architecture or size?): {str(exc).splitlines()[0]}") from None
    return dc_replace(pretrained, backbone=backbone, objective=None, path=Path(run_dir))


def check_aux_lm(config: dict[str, Any], cfg: FinetuneConfig) -> None:
    """``aux_lm_weight > 0`` needs a model pre-trained as a causal LM with a tied output layer (an
    objective that declares ``generation = "causal_lm"``); :class:`PtmError` otherwise."""
    if cfg.aux_lm_weight <= 0:
        return
    from ptmkit.build import objective_class

    name, cls, _ = objective_class(config.get("objective"))
    if getattr(cls, "generation", None) != "causal_lm":
        raise PtmError(
            f"aux_lm_weight={cfg.aux_lm_weight:g} adds GPT's auxiliary LM loss, which needs a model pre-trained as a "
            f"causal LM with a tied output layer (objective clm); this one was pre-trained with {name!r}: "
            f"set aux_lm_weight=0"
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
    from ptmkit.build import build_encoder

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
) -> dict[str, Any]:
    """Fine-tune ``model`` (a run/checkpoint path or a loaded ``Pretrained``) on ``task_data``.

    Returns the result dict also written to ``out_dir/results.json`` (``out_dir=None`` writes
    nothing and cannot be resumed): ``dev``/``test`` metrics of the selected epoch,
    ``best_epoch``, per-epoch ``history``.  ``resume=True`` continues an interrupted run in
    ``out_dir`` from its last epoch checkpoint (the result is the uninterrupted run's) and
    returns a finished run's results as they are.  ``callbacks`` are passed on to the Trainer.
    """
    model_path = (model,) if isinstance(model, (str, os.PathLike)) else ()
    if out_dir is None:
        return _finetune(model, task_data, None, cfg, init, seed, progress, desc, resume, callbacks)
    out = Path(out_dir)
    # out_dir must be new, empty, or hold fine-tuning output of ptm's (``overwrite`` starts it over,
    # ``resume`` continues it); an input inside it is refused.  A failure keeps what --resume needs.
    with outputs.writing(out, "finetune", inputs=model_path, overwrite=overwrite, reuse=resume,
                         keep=lambda: _resumable(out)) as session:
        if overwrite and session.state == "own":
            outputs.clean(out)
        return _finetune(model, task_data, out, cfg, init, seed, progress, desc, resume, callbacks)


def _finetune(model: Any, task_data: TaskData, out: Path | None, cfg: FinetuneConfig, init: str, seed: int,
              progress: bool, desc: str | None, resume: bool, callbacks: tuple) -> dict[str, Any]:
    """:func:`finetune` once ``out`` is open for writing (or ``None``: nothing is written)."""
    from ptmkit.tasks.callbacks import AuxWeightDecay, DevSelection, StagedFreezing
    from ptmkit.train import checkpoint as ckpt
    from ptmkit.train.optim import parameter_depths
    from ptmkit.train.trainer import Trainer

    started = time.time()
    data_sha256 = content_sha256(task_data)
    asked = json.loads(json.dumps({"config": to_dict(cfg), "init": init, "seed": seed, "data_sha256": data_sha256}))
    if resume and out is not None and (out / RESULTS_FILE).is_file():
        done = json.loads((out / RESULTS_FILE).read_text(encoding="utf-8"))
        _check_resumed(out, done, asked, finished=True)
        return done
    if resume and out is not None and ckpt.latest_checkpoint(out) is not None:
        latest = ckpt.latest_checkpoint(out)
        _check_resumed(out, ckpt.read_config(latest), asked, finished=False)
    check_splits(task_data)
    pretrained = load_model(model)
    tokenizer = pretrained.tokenizer
    mcfg = pretrained.backbone.config
    max_position = getattr(mcfg, "max_position", None)
    if max_position is not None and getattr(mcfg, "positions", "absolute") == "absolute" and cfg.max_seq_len > max_position:
        raise PtmError(f"max_seq_len={cfg.max_seq_len} exceeds the model's max_position={max_position}")
    with_types = getattr(mcfg, "type_vocab_size", 0) >= (2 if getattr(task_data, "is_pair", False) else 1)

    causal = pretrained.causal
    if cfg.gpt_transform and not causal:
        raise PtmError("gpt_transform=true frames the input for a left-to-right model (GPT's extract token is read "
                       "last); this model is bidirectional: set gpt_transform=false")
    task = task_type_of(task_data, cfg, tokenizer, causal, with_types)
    encoded = {s: task.encode(s) for s in ("train", "dev", "test")}
    check_aux_lm(pretrained.config, cfg)
    backbone = _backbone(pretrained, init, seed)
    clf = task.build(backbone)
    if cfg.gpt_transform:  # after the head, so the head's initialisation does not depend on the switch
        from ptmkit.tasks.gpt_inputs import GptTokens, init_new_rows

        init_new_rows(backbone, GptTokens.of(tokenizer))
    if cfg.adapter_size:
        from ptmkit.nn.adapters import add_adapters, freeze_for_adapters

        clf.adapters = add_adapters(clf.backbone, cfg.adapter_size)
        freeze_for_adapters(clf.backbone)
    batches = task.batches(encoded["train"], seed)
    train_cfg = cfg.train_config(task.train_size(encoded["train"]), seed, batches.steps_per_epoch)

    def evaluate_dev(m: torch.nn.Module) -> dict[str, float]:
        return task.score("dev", task.predict_split(m, "dev", encoded["dev"], next(m.parameters()).device))

    selection = DevSelection(evaluate_dev, task.select, batches.steps_per_epoch, out)
    callbacks = [selection, *callbacks]
    lowest = _lowest_trainable(clf, cfg)
    if lowest is not None:
        callbacks.append(StagedFreezing(parameter_depths(clf)[0], lowest, batches.steps_per_epoch))
    if cfg.aux_lm_weight > 0 and cfg.aux_lm_decay != 1.0:
        callbacks.append(AuxWeightDecay(cfg.aux_lm_weight, cfg.aux_lm_decay, batches.steps_per_epoch))
    trainer = Trainer(clf, batches, train_cfg, out, None,
                      {"config": {"finetune": to_dict(cfg), "init": init, "seed": seed, "data_sha256": data_sha256}},
                      callbacks, desc=desc or f"fine-tune {init} seed={seed}", progress_bar=progress)
    selection.is_main = trainer.is_main
    trainer.fit(resume=resume and out is not None and ckpt.latest_checkpoint(out) is not None)

    clf.load_state_dict(selection.best_state())
    device = trainer.device
    dev_pred = task.predict_split(clf, "dev", encoded["dev"], device)
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
        "num_parameters": sum(p.numel() for p in clf.parameters()),
        "trainable_parameters": sum(p.numel() for n, p in clf.named_parameters()
                                    if p.requires_grad and not (cfg.mode == "features" and n.startswith("backbone."))),
        "time_s": round(time.time() - started, 2),
    }
    if out is not None and trainer.is_main:
        task.write_predictions(out / "predictions.jsonl", "test", test_pred)
        atomic_write_text(out / RESULTS_FILE, json.dumps(result, indent=2) + "\n")
        shutil.rmtree(out / ckpt.CHECKPOINTS, ignore_errors=True)  # the run is complete: its resume state has served
    return result
