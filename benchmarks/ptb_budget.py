"""Shared by the PTB pre-training benchmarks: PTB prepared with a preset's tokenizer, and a preset
pre-trained on PTB train for a time budget with the shared Trainer.

The tokenizer is trained on PTB train with the preset's ``tokenizer`` section (deterministic, so
two presets with the same section get the same tokenizer); train, valid and test are prepared
with it (one PTB line = one sentence).  The number of steps is sized so that the LR schedule ends
within the budget: three probe steps (after one warm-up step) give the seconds per step; a
callback stops the run if it goes past the budget anyway (``stop`` then says so).  The clock is
the wall clock (``time.perf_counter``) unless ``clock="cpu"`` (process CPU time over all threads).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch

from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides, from_dict
from ptmkit.data.batches import PretrainBatches
from ptmkit.data.corpus import Corpus
from ptmkit.data.prepare import prepare
from ptmkit.data.sources.base import fetch
from ptmkit.presets import load_preset
from ptmkit.tokenization import Tokenizer
from ptmkit.train.config import TrainConfig
from ptmkit.train.trainer import Trainer, seed_everything
from ptmkit.workflows.pretrain import init_from_corpus

SPLITS = ("train", "valid", "test")


class BudgetExceeded(Exception):
    pass


def ptb_files() -> dict[str, Path]:
    ptb = fetch("ptb")
    return {split: ptb / f"{split}.txt" for split in SPLITS}


def raw_preset(preset: str, overrides: list[str]) -> dict[str, Any]:
    return apply_overrides(load_preset(preset), list(overrides))


def ptb_corpora(raw: dict[str, Any], root: Path, cache: dict[str, Any] | None = None) -> tuple[Any, dict[str, Corpus]]:
    """The preset's tokenizer trained on PTB train, and PTB's three splits prepared with it.
    ``cache`` (a dict) reuses both for presets whose tokenizer sections are equal."""
    section = dict(raw.get("tokenizer") or {})
    key = json.dumps(section, sort_keys=True)
    if cache is not None and key in cache:
        return cache[key]
    files = ptb_files()
    kind, vocab_size = section.pop("kind", "bpe"), section.pop("vocab_size", 8000)
    tokenizer = Tokenizer.train([files["train"]], kind=kind, vocab_size=vocab_size, **section)
    where = root / f"ptb-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    corpora = {split: prepare([files[split]], tokenizer, where / split, workers=1, overwrite=True, progress=False)
               for split in SPLITS}
    if cache is not None:
        cache[key] = (tokenizer, corpora)
    return tokenizer, corpora


def step_seconds(model, batches: PretrainBatches, lr: float, clock, steps: int = 3) -> float:
    """Seconds (by ``clock``) of one AdamW training step, after one warm-up step."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for s in range(steps + 1):
        if s == 1:
            t0 = clock()
        model(batches(0, s)).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (clock() - t0) / steps


def pretrain_for_budget(raw: dict[str, Any], overrides: list[str], tokenizer, corpora: dict[str, Corpus],
                        budget: float, run_dir: Path, clock_kind: str = "wall", threads: int = 1,
                        seed: int | None = None, max_steps: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Pre-train ``raw`` (a preset dict with overrides applied) on PTB train for ``budget`` seconds.
    ``max_steps`` fixes the schedule's length instead of sizing it from the probe.  Returns the
    trained ``PretrainModel`` and a dict describing the run."""
    clock = time.process_time if clock_kind == "cpu" else time.perf_counter
    torch.set_num_threads(threads)
    config = resolve_config(raw, tokenizer, list(overrides))
    if seed is not None:
        config["train"]["seed"] = int(seed)
    train_cfg = from_dict(TrainConfig, config["train"], "train")
    seed_everything(train_cfg.seed)
    model = build_model(config, tokenizer)
    obj = model.objective
    spans = obj.example_spans(corpora["train"], train_cfg.seq_len)
    common = dict(seq_len=train_cfg.seq_len, batch_size=train_cfg.batch_size, seed=train_cfg.seed)
    source = PretrainBatches(corpora["train"], obj, spans, **common)
    probe = None
    if max_steps is None:
        probe = step_seconds(model, source, train_cfg.lr, clock)
        max_steps = max(1, int(budget / (1.1 * probe)))  # a long run is a little slower than the probe
    settings = {"max_steps": int(max_steps), "warmup_steps": min(train_cfg.warmup_steps, max(1, max_steps // 10)),
                "eval_every": max(1, max_steps // 4), "save_every": 0, "eval_batches": 10,
                "log_every": max(1, max_steps // 20), "num_threads": threads}
    config["train"] = {**config["train"], **settings}
    train_cfg = from_dict(TrainConfig, config["train"], "train")
    seed_everything(train_cfg.seed)
    model = build_model(config, tokenizer)  # fresh weights: the probe's steps are not kept
    obj = model.objective
    init_from_corpus(model.backbone, obj, corpora["train"], spans, train_cfg)
    valid = PretrainBatches(corpora["valid"], obj, obj.example_spans(corpora["valid"], train_cfg.seq_len), **common)
    c0 = clock()

    def guard(trainer, step):
        if clock() - c0 > 1.05 * budget:
            raise BudgetExceeded

    trainer = Trainer(model, PretrainBatches(corpora["train"], obj, spans, **common), train_cfg, run_dir, valid,
                      {"config": config, "tokenizer": tokenizer}, callbacks=[guard], progress_bar=False)
    stop = "schedule finished"
    t0 = time.perf_counter()
    try:
        trainer.fit()
    except BudgetExceeded:
        stop = f"budget reached at step {trainer.step} of {max_steps}"
    info = {
        "steps": trainer.step, "max_steps": int(max_steps), "stop": stop,
        "epochs": round(trainer.step / source.steps_per_epoch, 3),
        "probe_seconds_per_step": None if probe is None else round(probe, 4),
        "train_seconds_wall": round(time.perf_counter() - t0, 1), f"train_seconds_{clock_kind}": round(clock() - c0, 1),
        "batch_size": train_cfg.batch_size, "seq_len": train_cfg.seq_len, "lr": train_cfg.lr, "seed": train_cfg.seed,
        "parameters": sum(p.numel() for p in model.parameters()), "vocab_size": tokenizer.vocab_size,
    }
    model.eval()
    return model, info
