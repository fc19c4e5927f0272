"""``ptm evaluate``: one fixed protocol over a suite of downstream tasks, for several models.

A suite is a list of built-in tasks (:data:`SUITES`).  Every model is fine-tuned on every task in
every transfer mode (``finetune``: all weights; ``features``: frozen encoder, scalar mix, task
network) with the same protocol: a fixed random subset of ``train_size`` training examples, the
first ``eval_size`` dev and test examples, ``epochs`` epochs, the LR chosen on dev from ``lrs``,
and ``seeds`` fine-tuning seeds.  A from-scratch row (the first model's architecture, randomly
initialised, fine-tuned) is the baseline.  The score of a task is its dev-selection metric:
accuracy (classification, POS tagging, multiple choice), chunk F1 (segmentation, names), F1
(span QA), Pearson's r (regression).

Writes ``OUT/results.json`` (every run), ``OUT/table.md`` (mean ± sd over seeds per model, mode
and task) and ``OUT/table.png``; each run's directory is ``OUT/<model>/<task>/<mode>``.
The same protocol at several training sizes is a learning curve (:mod:`ptmkit.workflows.learning_curve`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit import fileio
from ptmkit.data.tasks import load_task
from ptmkit.errors import PtmError, suggest
from ptmkit.fileio import atomic_write_text
from ptmkit.tasks.finetune import FinetuneConfig, load_model
from ptmkit.workflows.finetune import run_seeds
from ptmkit.workflows.report import bars_per_task, markdown_table, mean_sd, summarize

log = logging.getLogger(__name__)

SUITES: dict[str, tuple[str, ...]] = {
    "en": ("mr", "brown-pos", "wordnet-wsd", "bible-paraphrase", "wordnet-qa"),
    "zh": ("zh-reviews", "peoples-daily-ner", "peoples-daily-pos"),
    "xling": ("bible-genre-en-es", "bible-genre-en-ny", "bible-genre-ny"),  # + workflows.xling's measures
    "vl": (),  # vision-language runs: workflows.vl_eval's retrieval and zero-shot measures only
}
MODES = ("finetune", "features")


@dataclass(frozen=True)
class Protocol:
    """``train_size``: training examples per task (``None``: all of them).  ``features_lrs``: the
    LR grid of the ``features`` mode (``None``: ``lrs``); a frozen encoder under a small head
    usually wants larger steps than fine-tuning all weights."""

    train_size: int | None = 500
    eval_size: int = 1000
    seeds: tuple[int, ...] = (1, 2, 3)
    lrs: tuple[float, ...] = (3e-4, 1e-3)
    features_lrs: tuple[float, ...] | None = None
    epochs: int = 10
    modes: tuple[str, ...] = MODES
    max_seq_len: int = 128
    baseline: bool = True


def protocol_data(data: Any, protocol: Protocol) -> Any:
    """The task with the protocol's training subset and at most ``eval_size`` dev / test examples."""
    if protocol.train_size is not None and len(data.train) > protocol.train_size:
        data = data.with_train_size(protocol.train_size, seed=0)
    first = lambda split: split.subset(np.arange(min(len(split), protocol.eval_size)))  # noqa: E731
    return replace(data, dev=first(data.dev), test=first(data.test))


def protocol_config(data: Any, mode: str, protocol: Protocol) -> FinetuneConfig:
    """The protocol's fine-tuning settings for ``data`` in ``mode`` (features: a BiLSTM head)."""
    chunked = getattr(data, "chunked", False)  # a tagging task whose tags mark chunks
    return FinetuneConfig(epochs=protocol.epochs, mode=mode, max_seq_len=protocol.max_seq_len,
                          select="f1" if chunked else "accuracy",
                          head="bilstm" if mode == "features" else "linear")


def suite_tasks(suite: str | tuple[str, ...]) -> tuple[str, ...]:
    """The tasks of a named suite, or ``suite`` itself when it is a tuple of task names."""
    if isinstance(suite, str):
        if suite not in SUITES:
            raise PtmError(f"unknown suite {suite!r}{suggest(suite, SUITES)}; suites: {', '.join(SUITES)}")
        return SUITES[suite]
    return tuple(suite)


def evaluate(models: dict[str, Any], suite: str | tuple[str, ...], out_dir: str | Path, protocol: Protocol = Protocol(),
             progress: bool = False, resume: bool = False) -> dict[str, Any]:
    """Run the protocol for ``models`` (label -> run, checkpoint or vectors file) on ``suite``.

    resume: continue an interrupted evaluation in ``out_dir``: finished fine-tuning runs are read
    back, an interrupted one continues from its last epoch (``run_seeds(resume=True)``)."""
    tasks = suite_tasks(suite)
    for mode in protocol.modes:
        if mode not in MODES:
            raise PtmError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
    out = Path(out_dir)
    fileio.distinct_parts(list(models), "model label")  # each names a directory: checked before any work
    rows: list[dict[str, Any]] = []
    loaded = {label: load_model(m) for label, m in models.items()}
    for task_name in tasks:
        data = protocol_data(load_task(task_name), protocol)
        for i, (label, pre) in enumerate(loaded.items()):
            for mode in protocol.modes:
                cfg = protocol_config(data, mode, protocol)
                inits = ["pretrained", "random"] if (protocol.baseline and i == 0 and mode == "finetune") else ["pretrained"]
                lrs = protocol.features_lrs if (mode == "features" and protocol.features_lrs) else protocol.lrs
                where = out / fileio.path_part(label, "model label") / fileio.path_part(task_name, "task name") / mode
                runs = run_seeds(pre, data, where, cfg, inits, list(protocol.seeds),
                                 progress=progress, lrs=list(lrs), overwrite=not resume, resume=resume)
                for r in runs:
                    row_model = label if r["init"] == "pretrained" else f"from scratch ({label})"
                    rows.append({"model": row_model, "task": task_name, "mode": mode if r["init"] == "pretrained" else "finetune",
                                 "seed": r["seed"], "n_train": len(data.train), "metric": r["select"], "test": r["test"][r["select"]],
                                 "dev": r["dev"][r["select"]], "lr": r["config"]["lr"]})
                log.info("%s / %s / %s done", label, task_name, mode)
    table = summarize(rows)
    atomic_write_text(out / "results.json", json.dumps({"suite": list(tasks), "protocol": protocol.__dict__, "runs": rows,
                                                  "table": table}, indent=2, default=list) + "\n")
    atomic_write_text(out / "table.md", markdown(table, list(tasks)) + "\n")
    bars_per_task(table, list(tasks), out / "table.png")
    return {"runs": rows, "table": table}


def markdown(table: list[dict[str, Any]], tasks: list[str]) -> str:
    """One row per (model, mode), one column per task: mean ± sd over seeds."""
    metric = {t["task"]: t["metric"] for t in table}
    rows = []
    for model, mode in dict.fromkeys((t["model"], t["mode"]) for t in table):
        cells = {t["task"]: mean_sd(t) for t in table if t["model"] == model and t["mode"] == mode}
        rows.append([model, mode, *(cells.get(t, "–") for t in tasks)])
    return "\n".join(markdown_table(["model", "mode", *(f"{t} ({metric.get(t, '')})" for t in tasks)], rows))
