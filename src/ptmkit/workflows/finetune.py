"""Fine-tune a pre-trained model on a task over several inits, seeds and learning rates: the
workflow behind ``ptm finetune`` (and inside ``ptm evaluate``, ``ptm compare`` and the demos).

One run is :func:`ptmkit.tasks.finetune.finetune`; :func:`run_seeds` repeats it for every
(init, seed) and keeps, per pair, the learning rate of a grid with the best dev score;
:func:`finetune_runs` is the command: OUT checked before any slow loading, the model (or the
encoder a first fine-tuning stage selected) and the task read, the grid run in place (epoch
checkpoints included, so ``--resume`` continues it), ``OUT/summary.json`` written and the table printed;
with both inits (``--init both``) ``OUT/inits.png`` draws the test score with and without pre-training.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Sequence

from ptmkit import outputs
from ptmkit.config import apply_overrides, from_dict, to_dict
from ptmkit.data.tasks import TaskData, load_task
from ptmkit.errors import PtmError, suggest
from ptmkit.fileio import atomic_write_text
from ptmkit.tasks.base import option_keys, read_task_files
from ptmkit.tasks.finetune import _resumable, after_intermediate_task, finetune, load_model
from ptmkit.tasks.finetune_config import FinetuneConfig, recipe_config
from ptmkit.tasks.multitask import load_tasks
from ptmkit.tasks.saved import load_task_model
from ptmkit.workflows.report import format_table, init_figure, summarize_inits

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
INITS_FIGURE = "inits.png"  # --init both: the test score with and without pre-training


def parse_overrides(overrides: list[str], recipe: str | None = None, base: FinetuneConfig | None = None) -> FinetuneConfig:
    """``lr=1e-4 epochs=3 crf=true`` (or ``finetune.lr=...``, ``train.epochs=...``) -> :class:`FinetuneConfig`, starting
    from the named recipe's settings (``ulmfit``) when given.  A key of a task type's own settings
    (``crf``, ``doc_stride``, ``task_schedule``, ...) goes into ``FinetuneConfig.task``, where the
    task type reads it; a key that is neither is an error naming the nearest valid key."""
    common = {f.name for f in fields(FinetuneConfig)} - {"task"}
    typed = set(option_keys())
    items = []
    for o in overrides:
        key, eq, value = o.partition("=")
        key = key.strip().removeprefix("finetune.")
        if key.startswith("train.") and key.removeprefix("train.") in common:  # pre-training's spelling: train.epochs
            key = key.removeprefix("train.")
        top = key.split(".")[0]
        if eq and top not in common and top != "task":
            if top not in typed:
                known = sorted(common | typed)
                raise PtmError(f"unknown config key {top!r}{suggest(top, known)}; fine-tuning settings: {', '.join(known)}")
            key = f"task.{key}"
        items.append(f"finetune.{key}{eq}{value}")
    raw = apply_overrides({"finetune": to_dict(base if base is not None else recipe_config(recipe))}, items)
    return from_dict(FinetuneConfig, raw["finetune"], "finetune")


def task_data(task: str | None = None, tasks: str | None = None, files: Sequence[str | None] = (None, None, None),
              task_type: str | None = None, columns: dict[str, str] | None = None) -> Any:
    """The task to fine-tune on: a built-in ``task``, several built-in ``tasks`` (``mr,brown-pos``:
    multi-task), or the user's ``files`` (train, dev, test) of ``task_type`` (``None``: the one
    their columns show) with ``columns`` naming their columns."""
    if task and any(files):
        raise PtmError("give either --task or --train/--dev/--test, not both")
    if tasks:
        if task or any(files):
            raise PtmError("--tasks trains several built-in tasks together; leave out --task and --train/--dev/--test")
        return load_tasks(tasks)
    if task:
        return load_task(task)
    if not all(files):
        missing = [n for n, f in zip(("--train", "--dev", "--test"), files) if not f]
        raise PtmError(f"no task given: use --task mr (--tasks mr,brown-pos for several), or give all of --train --dev "
                       f"--test (missing {', '.join(missing)})")
    return read_task_files(task_type, *files, **(columns or {}))


def finetune_runs(model: str | os.PathLike, load_data: Any, out_dir: str | os.PathLike, cfg: FinetuneConfig,
                  inits: Sequence[str], seeds: Sequence[int], lrs: Sequence[float] | None = None,
                  train_size: int | None = None, after: str | None = None, inputs: Sequence[Any] = (),
                  overwrite: bool = False, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """``ptm finetune``: fine-tune ``model`` (a run, checkpoint or vectors file) on the task that
    ``load_data()`` reads, for every init and seed (and LR of ``lrs``), into ``out_dir``.

    train_size: a fixed random subset of that many training examples.  after: the directory of a
    finished fine-tuning whose selected encoder replaces the model's (two-stage fine-tuning).
    inputs: every file the command reads (refused inside ``out_dir``).  Returns what
    ``OUT/summary.json`` holds."""
    if resume and overwrite:
        raise PtmError("--resume continues the runs in OUT and --overwrite replaces them: give one of them")
    out = Path(out_dir)
    outputs.check(out, "finetune", inputs, overwrite, reuse=resume)  # before any slow loading
    pretrained = load_model(model)  # fail on a bad checkpoint before fetching or reading data
    if after:
        pretrained = after_intermediate_task(pretrained, after)
    data = load_data()
    if train_size is not None:
        data = data.with_train_size(train_size)
    # The runs write in place, epoch checkpoints included, so an interrupted fine-tuning can be
    # resumed; --overwrite removes ptm's earlier results only now that every input has been read.
    # A run that fails before anything resumable exists leaves nothing behind, so the corrected
    # retry is not refused.
    with outputs.writing(out, "finetune", inputs, overwrite=overwrite, reuse=resume, names=[SUMMARY_FILE, INITS_FIGURE],
                         keep=lambda: _resumable(out)) as session:
        if overwrite and session.state == "own":
            outputs.clean(out)
        _print_plan(data, inits, seeds)
        results = run_seeds(pretrained, data, out, cfg, list(inits), list(seeds), progress=progress, lrs=lrs, resume=resume)
        for r in results:
            r["model"] = str(model)
        summary = summarize_inits(results)
        written = {"model": str(Path(model)), "task": data.name, "summary": summary, "runs": results}
        atomic_write_text(out / SUMMARY_FILE, json.dumps(written, indent=2) + "\n")
        if init_figure(summary, out / INITS_FIGURE, data.name):
            print(f"figure: {out / INITS_FIGURE}")
        print(format_table(summary))
    print(f"results: {out / SUMMARY_FILE}")
    return written


def eval_only(run: str | os.PathLike, load_data: Any, out_dir: str | os.PathLike, inputs: Sequence[Any] = (),
              overwrite: bool = False) -> dict[str, Any]:
    """``ptm finetune RUN --eval-only``: score the task model saved in ``run`` (a fine-tuned, distilled,
    pruned or quantized model) on the dev and test splits of its task (``load_data()`` when given,
    else the built-in task it was trained on) without training; ``out_dir`` gets ``results.json``
    and the test ``predictions.jsonl``."""
    out = Path(out_dir)
    outputs.check(out, "finetune", inputs, overwrite)
    tm = load_task_model(run, load_data() if load_data is not None else None)
    with outputs.writing(out, "finetune", inputs, overwrite=overwrite, names=["results.json", "predictions.jsonl"]) as session:
        if overwrite and session.state == "own":
            outputs.clean(out)
        test_pred = tm.predict("test")
        result = {"task": tm.task_data.name, "task_type": tm.task.name, "model": str(run), "eval_only": True,
                  "select": tm.task.select, "metrics": list(tm.task.metrics), "dev": tm.evaluate("dev"),
                  "test": tm.task.score("test", test_pred), "compression": tm.info.get("compression") or {},
                  "derived_from": tm.info.get("derived_from") or {}}
        tm.task.write_predictions(out / "predictions.jsonl", "test", test_pred)
        atomic_write_text(out / "results.json", json.dumps(result, indent=2) + "\n")
    key = result["select"]
    print(f"{run}: dev {key} {result['dev'][key]:.4f}, test {key} {result['test'][key]:.4f}")
    print(f"results: {out / 'results.json'}")
    return result


def _print_plan(data: Any, inits: Sequence[str], seeds: Sequence[int]) -> None:
    kind = getattr(data, "task_type", "classification")
    labels = f", {len(data.label_names)} labels ({', '.join(map(str, data.label_names[:12]))})" if hasattr(data, "num_labels") else ""
    print(
        f"fine-tune {data.name} ({kind}): {len(data.train)} train / {len(data.dev)} dev / {len(data.test)} test"
        f"{labels}; inits {', '.join(inits)}; seeds {' '.join(map(str, seeds))}",
        flush=True,
    )


def run_seeds(
    model: Any,
    task_data: TaskData,
    out_dir: str | Path | None,
    cfg: FinetuneConfig,
    inits: list[str],
    seeds: list[int],
    overwrite: bool = False,
    progress: bool = True,
    lrs: list[float] | None = None,
    resume: bool = False,
) -> list[dict[str, Any]]:
    """``finetune`` for every (init, seed); run ``i`` writes into ``out_dir/{init}-seed{seed}``.

    lrs: optional grid of peak learning rates; each (init, seed) is then trained once per LR
    (in ``.../lr-{lr}``) and the LR with the best dev score is kept, as Devlin et al. (2019)
    select the LR on dev.  Every condition gets the same grid, so neither is favoured by the
    choice of a single LR.  The result records all candidates under ``lr_search``.
    resume: continue an interrupted grid: finished runs are read back, an interrupted one
    resumes from its last epoch, the rest start.
    """
    pretrained = load_model(model)
    results = []
    grid = list(lrs) if lrs else [cfg.lr]
    n = len(inits) * len(seeds) * len(grid)
    done = 0
    for seed in seeds:  # seeds outermost: a partial run still compares the inits on equal seeds
        for init in inits:
            sub = Path(out_dir) / f"{init}-seed{seed}" if out_dir is not None else None
            candidates = []
            for lr in grid:
                done += 1
                run_cfg = replace(cfg, lr=float(lr))
                run_dir = (sub / f"lr-{lr:g}" if lrs else sub) if sub is not None else None
                desc = f"[{done}/{n}] {init} seed={seed}" + (f" lr={lr:g}" if lrs else "")
                r = finetune(pretrained, task_data, run_dir, run_cfg, init=init, seed=seed, overwrite=overwrite,
                             progress=progress, desc=desc, resume=resume)
                if isinstance(model, (str, os.PathLike)):
                    r["model"] = str(model)
                key = r["select"]
                log.info("%s: dev %s %.4f (epoch %d), test %s %.4f", desc, key, r["dev"][key], r["best_epoch"], key, r["test"][key])
                candidates.append(r)
            best = candidates[0]
            for r in candidates[1:]:
                if _better(r["select"], r["dev"][r["select"]], best["dev"][r["select"]]):
                    best = r
            if lrs:
                best = {**best, "lr_search": [{"lr": r["config"]["lr"], "dev": r["dev"], "test": r["test"]} for r in candidates]}
            results.append(best)
    return results


def _better(metric: str, new: float, best: float | None) -> bool:
    if best is None:
        return True
    return new < best if metric == "loss" else new > best
