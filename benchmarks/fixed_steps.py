"""Shared by benchmarks that train variants of a preset for a fixed number of steps on one corpus.

:func:`prepare_text` trains the preset's tokenizer on the training text (the first ``lines``
lines of each file when given) and prepares the training and held-out text with it, once for
all variants; :func:`train_variant` trains the preset with a list of ``key=value`` overrides on
that corpus with the shared Trainer, evaluating on the held-out text every ``eval_every`` steps,
and returns the run's ``metrics.jsonl`` records.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides, from_dict
from ptmkit.data.batches import PretrainBatches
from ptmkit.data.prepare import prepare
from ptmkit.presets import load_preset
from ptmkit.tokenization import Tokenizer
from ptmkit.train.config import TrainConfig
from ptmkit.train.metrics_log import METRICS_FILE, read_metrics
from ptmkit.train.trainer import Trainer, seed_everything
from ptmkit.workflows.pretrain import init_from_corpus


def cut_lines(src: Path, dst: Path, lines: int | None) -> Path:
    """``src``, or its first ``lines`` lines copied to ``dst``."""
    if not lines:
        return src
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for i, line in enumerate(f):
            if i >= lines:
                break
            out.write(line)
    return dst


def prepare_text(preset: str, train: Path, held_out: Path, root: Path, vocab_size: int | None = None,
                 lines: int | None = None) -> tuple[Any, Any, Any]:
    """``(tokenizer, train corpus, held-out corpus)`` for ``preset``'s tokenizer section."""
    section = dict(load_preset(preset).get("tokenizer") or {})
    kind, size = section.pop("kind", "wordpiece"), int(vocab_size or section.pop("vocab_size", 8000))
    section.pop("vocab_size", None)
    train = cut_lines(train, root / "text" / "train.txt", lines)
    held_out = cut_lines(held_out, root / "text" / "held_out.txt", lines and max(1, lines // 10))
    tokenizer = Tokenizer.train([train], kind=kind, vocab_size=size, **section)
    corpora = [prepare([p], tokenizer, root / "corpus" / name, workers=1, overwrite=True, progress=False)
               for name, p in (("train", train), ("held_out", held_out))]
    return tokenizer, corpora[0], corpora[1]


def train_variant(preset: str, overrides: list[str], tokenizer, train_corpus, held_out, run_dir: Path,
                  threads: int = 1) -> tuple[list[dict[str, Any]], float]:
    """Train ``preset`` + ``overrides`` on ``train_corpus``; ``(metrics records, seconds)``."""
    torch.set_num_threads(threads)
    raw = apply_overrides(load_preset(preset), list(overrides))
    config = resolve_config(raw, tokenizer, list(overrides))
    config["train"] = {**config["train"], "num_threads": threads, "save_every": 0}
    cfg = from_dict(TrainConfig, config["train"], "train")
    seed_everything(cfg.seed)
    model = build_model(config, tokenizer)
    obj = model.objective
    spans = obj.example_spans(train_corpus, cfg.seq_len)
    common = dict(seq_len=cfg.seq_len, batch_size=cfg.batch_size, seed=cfg.seed)
    init_from_corpus(model.backbone, obj, train_corpus, spans, cfg)
    held = PretrainBatches(held_out, obj, obj.example_spans(held_out, cfg.seq_len), **common)
    trainer = Trainer(model, PretrainBatches(train_corpus, obj, spans, **common), cfg, run_dir, held,
                      {"config": config, "tokenizer": tokenizer}, progress_bar=False)
    t0 = time.perf_counter()
    trainer.fit()
    return read_metrics(Path(run_dir) / METRICS_FILE), time.perf_counter() - t0
