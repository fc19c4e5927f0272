"""Train a vision–language model (a preset with a ``vision`` section) through ``ptm pretrain`` /
:func:`ptmkit.pretrain`: image–text data, a tokenizer (learnt from the training captions, or the
text tower's own), the model, then the one Trainer.

Reads top-down: :func:`train_vl` opens the run directory, reads the data
(:func:`ptmkit.vision.data.load_image_text`), builds the tokenizer, config and model, and trains;
the run directory holds checkpoints (``config.json`` with every section resolved, the weights of
``image.``, ``text.`` and ``objective.``, the tokenizer), ``metrics.jsonl``, ``loss.png`` and
``compute.json`` (FLOPs per step, as the Trainer counts them, and images seen).  ``--resume``
continues exactly: the batch of each step is a function of (seed, epoch, step).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ptmkit import outputs
from ptmkit.config import apply_overrides, from_dict
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text, read_record
from ptmkit.presets import load_preset
from ptmkit.runcard import write_run_card
from ptmkit.tokenization import Tokenizer
from ptmkit.train import checkpoint as ckpt
from ptmkit.train import distributed as dist
from ptmkit.train.config import TrainConfig
from ptmkit.train.state import seed_everything
from ptmkit.train.trainer import Trainer
from ptmkit.vision.augment import AugmentConfig
from ptmkit.vision.batches import ImageTextBatches
from ptmkit.vision.build import ImageTextDataConfig, build_vl_model, is_vision_language, resolve_vl_config
from ptmkit.vision.data import ImageTextSet, load_image_text, resize_images
from ptmkit.vision.load import load_text_tower
from ptmkit.workflows import rundir

log = logging.getLogger(__name__)
COMPUTE_FILE = "compute.json"


def vision_language_config(preset_or_config: Any) -> dict[str, Any] | None:
    """The raw config when ``preset_or_config`` is a vision–language preset, YAML or dict; else ``None``."""
    if preset_or_config is None:
        return None
    if isinstance(preset_or_config, dict):
        return preset_or_config if is_vision_language(preset_or_config) else None
    try:
        raw = load_preset(str(preset_or_config))
    except PtmError:
        return None  # not a preset this route reads: the text route reports it
    return raw if is_vision_language(raw) else None


def stored_vl_config(run_dir: Path) -> dict[str, Any] | None:
    """A resumable run's stored config when it is a vision–language run.  RUN_DIR is checked to be
    ptm's first: nothing is read from a folder that only looks like a run."""
    if not run_dir.is_dir():
        return None
    outputs.check(run_dir, "run", [], reuse=True)
    latest = ckpt.latest_checkpoint(run_dir)
    if latest is None:
        return None
    config = ckpt.read_config(latest)
    return config if is_vision_language(config) else None


def train_vl(raw: dict[str, Any], data: Any, out_dir: str | Path, overrides: Sequence[str] = (), overwrite: bool = False,
             verbose: bool = True, resume: bool = False) -> Path:
    """Train the vision–language config ``raw`` on ``data`` (``emoji``, the recipe's directory, or a
    directory with ``captions.jsonl``) into ``out_dir``; ``overrides`` are ``section.key=value``."""
    run_dir = Path(out_dir)
    data = _one_data(data)
    stored = stored_vl_config(run_dir) if resume else None
    raw = _resumed(stored, overrides) if stored is not None else apply_overrides(raw, list(overrides))
    train_cfg = from_dict(TrainConfig, raw.get("train"), "train")
    data_cfg = from_dict(ImageTextDataConfig, raw.get("data"), "data")
    info = dist.init_distributed(train_cfg.device)
    inputs = [Path(data)] if Path(data).exists() else []
    with contextlib.ExitStack() as stack:
        run = rundir.open_run(run_dir, resume, overwrite, info, inputs, stack)
        image_size = int((raw.get("vision") or {}).get("image_size", 64))
        dataset = image_text_set(data, data_cfg, image_size, train_cfg.seed)
        text = None
        if run.resuming:
            tokenizer = Tokenizer.load(ckpt.latest_checkpoint(run_dir) / ckpt.TOKENIZER_FILE)
        elif (raw.get("text") or {}).get("init"):
            text, tokenizer, model_section = load_text_tower(raw["text"]["init"])
            raw = {**raw, "model": model_section}
        else:
            tokenizer = caption_tokenizer(dataset, data_cfg, raw.get("tokenizer") or {}, data)
        config = resolve_vl_config(raw, tokenizer)
        record = {"data": [{"name": Path(data).name, "bytes": int(dataset.images.nbytes),
                            "sha256": data_fingerprint(dataset)}], "eval_data": None}  # the run card's layout
        if run.resuming:
            rundir.check_compatible(stored, config)
            _check_same_data(run_dir, record)
        elif run.overwrite and info.is_main:
            outputs.clean(run_dir)
        seed_everything(train_cfg.seed)
        model = build_vl_model(config, tokenizer, text)
        augment = from_dict(AugmentConfig, config["augment"], "augment")
        batches = ImageTextBatches(dataset, tokenizer, train_cfg.batch_size, train_cfg.seed, augment, data_cfg.max_len,
                                   rank=info.rank, world_size=info.world_size)
        if batches.steps_per_epoch == 0:
            raise PtmError(f"the training split has {len(batches.concepts)} concepts, fewer than "
                           f"train.batch_size={train_cfg.batch_size}; use a smaller batch")
        run.write_record(config, record)
        trainer = Trainer(model, batches, train_cfg, run_dir, batches, {"config": config, "tokenizer": tokenizer},
                          desc=config["objective"]["name"], progress_bar=verbose)
        if verbose and info.is_main:
            n = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"{config['objective']['name']}: {config['vision']['encoder']} image encoder + "
                  f"{'no text encoder' if model.text is None else 'text transformer'}"
                  f"{' (frozen)' if model.frozen_text else ''}, {n:,} trained parameters; "
                  f"{len(batches.concepts):,} training concepts, {batches.steps_per_epoch} steps per epoch", flush=True)
        result = trainer.fit(resume=resume)
        if info.is_main:
            compute = {"flops_per_step": trainer.flops_per_step, "steps": trainer.step,
                       "images_seen": trainer.step * train_cfg.batch_size,
                       "flops": (trainer.flops_per_step or 0.0) * trainer.step}
            atomic_write_text(run_dir / COMPUTE_FILE, json.dumps(compute, indent=1) + "\n")
            write_run_card(run_dir, derives_from=[config["text"]["init"]] if config["text"]["init"] else [])
        if verbose and info.is_main:
            shown = ", ".join(f"{k.replace('_', ' ')} {v:.4g}" for k, v in result.items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "eval_ppl")
            print(f"final: {shown}\nrun: {run_dir}  (evaluate: ptm evaluate {run_dir} --suite vl -o OUT)", flush=True)
    return run_dir


def refuse_text_options(data_weights: Any, fmt: bool, eval_data: Any, init_from: Any) -> None:
    """``ptm pretrain``'s text-only options, refused for a vision–language run."""
    if data_weights is not None or fmt or eval_data is not None or init_from:
        raise PtmError("--data-weights, --field/--column, --eval-data and --init-from are for text pre-training; an image-text "
                       "run evaluates on its dev concepts, and text.init=RUN starts its text tower from a trained model")


def _one_data(data: Any) -> str:
    items = [data] if isinstance(data, (str, Path)) else list(data or [])
    if len(items) != 1:
        raise PtmError("a vision–language run reads one image–text data set: --data emoji, or a directory with captions.jsonl")
    return str(items[0])


def _resumed(stored: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """The run's own config; on resume only the train settings resume allows may change."""
    for item in overrides:
        key = item.partition("=")[0].removeprefix("train.")
        if key not in rundir.RESUMABLE_CHANGES:
            raise PtmError(f"cannot change {item.partition('=')[0]} on --resume (the run's config is its own); "
                           f"resume without it, or start a new run")
    return apply_overrides(stored, [o if o.startswith("train.") else f"train.{o}" for o in overrides])


def image_text_set(data: str, cfg: ImageTextDataConfig, image_size: int, seed: int) -> ImageTextSet:
    """The data at the encoder's image size (the emoji's 64 px block-averaged to 32 or 16)."""
    dataset = load_image_text(data, cfg.styles, cfg.locale, image_size=image_size, seed=seed)
    if dataset.image_size != image_size:
        dataset.images = resize_images(np.asarray(dataset.images), image_size)
    return dataset


def caption_tokenizer(dataset: ImageTextSet, cfg: ImageTextDataConfig, section: dict[str, Any], data: str) -> Tokenizer:
    """A tokenizer learnt from the training concepts' names and keywords in ``cfg.tokenizer_locales``."""
    texts: list[str] = []
    train = np.unique(dataset.concept[dataset.split == "train"])
    for locale in cfg.tokenizer_locales:
        other = dataset if locale == dataset.locale else load_image_text(data, cfg.styles[:1], locale)
        for c in train:
            texts.extend(filter(None, [other.names[c], " ".join(other.keywords[c])]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "captions.txt"
        atomic_write_text(path, "\n".join(texts) + "\n", durable=False)
        return Tokenizer.train([path], section.get("kind", "wordpiece"), int(section.get("vocab_size", 2000)),
                               min_frequency=int(section.get("min_frequency", 1)))


def data_fingerprint(dataset: ImageTextSet) -> str:
    """SHA-256 over the images, concepts, splits and captions: a resumed run must read the same."""
    h = hashlib.sha256()
    for arr in (np.ascontiguousarray(dataset.images), dataset.concept, dataset.split.astype("U8")):
        h.update(np.asarray(arr).tobytes())
    h.update(json.dumps([dataset.names, dataset.keywords], ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def _check_same_data(run_dir: Path, record: dict[str, Any]) -> None:
    stored = read_record(run_dir / rundir.INPUTS_FILE, "it records the data the run was trained on: restore it, or "
                         "start a new run directory")
    if stored.get("data") != record["data"]:
        raise PtmError(f"cannot resume: the data differ from those the run was trained on "
                       f"({', '.join(str(d.get('name')) for d in stored.get('data') or [])}); "
                       f"resume with the same --data, or start a new run directory")
