"""A learning curve: the :mod:`ptmkit.workflows.evaluate` protocol at several training-set sizes.

Every size runs the whole protocol (every model, mode, seed and LR, and the from-scratch
baseline) on a fixed random subset of that many training examples; ``None`` ("all") uses the
full training split.  The subsets of one task are nested: they are prefixes of one fixed
permutation (:meth:`~ptmkit.data.tasks.TaskSplits.with_train_size`, seed 0), so a larger size
adds examples and never swaps them.  A size at or above a task's training-set size is that task's
"all" and runs once.

The claim it lets one read off (Howard & Ruder 2018, Fig. 3; Peters et al. 2018, Fig. 1): the gap
between a pre-trained model and the same architecture from scratch is largest when labelled data
is scarce.  ``OUT/learning_curve.md`` gives, per task, mean ± sd over seeds per (model, mode) and
training size, and a last row with the pre-training gain (best pre-trained mean minus the
from-scratch mean); ``OUT/learning_curve.json`` holds every run and cell;
``OUT/learning_curve.png`` plots score against training size (log x), one line per (model, mode),
error bars = sd over seeds.  Each size's own evaluation is in ``OUT/n-<size>/`` (``n-all``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from ptmkit.data.tasks import load_task
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.workflows import report
from ptmkit.workflows.evaluate import Protocol, evaluate, suite_tasks

log = logging.getLogger(__name__)

ALL = "all"


def parse_train_sizes(text: str | list | tuple) -> tuple[int | None, ...]:
    """``"100,500,2000,all"`` (or a list of ints / ``"all"``) -> ``(100, 500, 2000, None)``, ascending
    with ``None`` (all) last; :class:`PtmError` on anything but positive integers and ``all``."""
    items = [x.strip() for x in text.split(",")] if isinstance(text, str) else list(text)
    sizes: set[int] = set()
    whole = False
    for item in items:
        if item is None or (isinstance(item, str) and item.lower() == ALL):
            whole = True
            continue
        try:
            n = int(item)
        except (TypeError, ValueError):
            n = 0
        if isinstance(item, bool) or n <= 0 or str(n) != str(item).strip():
            raise PtmError(f"--train-sizes takes positive integers and 'all', comma-separated (100,500,all); got {item!r}")
        sizes.add(n)
    if not sizes and not whole:
        raise PtmError("--train-sizes is empty: give sizes such as 100,500,2000,all")
    return (*sorted(sizes), *((None,) if whole else ()))


def size_label(size: int | None) -> str:
    return ALL if size is None else str(size)


def learning_curve(models: dict[str, Any], suite: str | tuple[str, ...], out_dir: str | Path,
                   protocol: Protocol = Protocol(), train_sizes: tuple[int | None, ...] = (100, 500, 2000, None),
                   progress: bool = False, resume: bool = False) -> dict[str, Any]:
    """Run the protocol of ``protocol`` (its ``train_size`` aside) once per size of ``train_sizes``
    (``resume``: as :func:`ptmkit.workflows.evaluate.evaluate`'s).

    Returns ``{"runs": [...], "table": [...]}``: every run (``evaluate``'s rows plus
    ``train_size``, the asked size or ``"all"``, and ``n_train``, the examples used) and the mean
    and sd over seeds per (model, mode, task, n_train)."""
    sizes = parse_train_sizes(train_sizes)
    tasks = suite_tasks(suite)
    n_full = {t: len(load_task(t).train) for t in tasks}
    out = Path(out_dir)
    rows: list[dict[str, Any]] = []
    done: dict[str, set[int]] = {t: set() for t in tasks}
    for size in sizes:
        # a size at or above a task's training set is its "all": run each effective size once
        here = tuple(t for t in tasks if min(size or n_full[t], n_full[t]) not in done[t])
        if not here:
            continue
        for t in here:
            done[t].add(min(size or n_full[t], n_full[t]))
        log.info("learning curve: %s training examples on %s", size_label(size), ", ".join(here))
        result = evaluate(models, here, out / f"n-{size_label(size)}", replace(protocol, train_size=size), progress,
                          resume=resume)
        rows += [{**r, "train_size": size_label(size) if size is None or size < n_full[r["task"]] else ALL}
                 for r in result["runs"]]
    table = summarize(rows)
    atomic_write_text(out / "learning_curve.json", json.dumps(
        {"suite": list(tasks), "train_sizes": [size_label(s) for s in sizes], "protocol": protocol.__dict__,
         "runs": rows, "table": table}, indent=2, default=list) + "\n")
    atomic_write_text(out / "learning_curve.md", markdown(table, list(tasks)) + "\n")
    plot(table, list(tasks), out / "learning_curve.png")
    return {"runs": rows, "table": table}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample sd of the test score over seeds per (model, mode, task, n_train), by task and size."""
    table = report.summarize(rows, keys=("model", "mode", "task", "n_train"))
    return sorted(table, key=lambda c: (c["task"], c["n_train"]))


def _is_scratch(model: str) -> bool:
    return model.startswith("from scratch")


def gains(table: list[dict[str, Any]], task: str) -> dict[int, float]:
    """``n_train -> best pre-trained mean - from-scratch mean`` for ``task`` (sizes with both)."""
    out = {}
    for n in sorted({c["n_train"] for c in table if c["task"] == task}):
        cells = [c for c in table if c["task"] == task and c["n_train"] == n]
        scratch = [c["mean"] for c in cells if _is_scratch(c["model"])]
        pre = [c["mean"] for c in cells if not _is_scratch(c["model"])]
        if scratch and pre:
            out[n] = max(pre) - scratch[0]
    return out


def markdown(table: list[dict[str, Any]], tasks: list[str]) -> str:
    """One table per task: rows (model, mode), columns training sizes, then the pre-training gain."""
    parts = []
    for task in tasks:
        cells = [c for c in table if c["task"] == task]
        if not cells:
            continue
        sizes = sorted({(c["n_train"], c["train_size"]) for c in cells})
        head = [f"n = {n}" if label != ALL else f"all ({n})" for n, label in sizes]
        rows = []
        for model, mode in dict.fromkeys((c["model"], c["mode"]) for c in cells):
            by_n = {c["n_train"]: c for c in cells if (c["model"], c["mode"]) == (model, mode)}
            rows.append([model, mode, *(report.mean_sd(by_n[n]) if n in by_n else "–" for n, _ in sizes)])
        gain = gains(table, task)
        if gain:
            rows.append(["**pre-training gain**", "best − scratch", *(f"{gain[n]:+.3f}" if n in gain else "–" for n, _ in sizes)])
        lines = [f"### {task} (test {cells[0]['metric']}, mean ± sd over seeds)", "",
                 *report.markdown_table(["model", "mode", *head], rows)]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def plot(table: list[dict[str, Any]], tasks: list[str], path: Path) -> None:
    """Score against training size (log x), one panel per task, one line per (model, mode)."""
    tasks = [t for t in tasks if any(c["task"] == t for c in table)]
    fig = report.figure(4.2 * max(len(tasks), 1), 3.6)
    axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        cells = [c for c in table if c["task"] == task]
        for model, mode in dict.fromkeys((c["model"], c["mode"]) for c in cells):
            line = sorted((c for c in cells if (c["model"], c["mode"]) == (model, mode)), key=lambda c: c["n_train"])
            ax.errorbar([c["n_train"] for c in line], [c["mean"] for c in line], yerr=[c["sd"] for c in line],
                        marker="o", capsize=3, ls="--" if _is_scratch(model) else "-", label=f"{model} ({mode})")
        ax.set_xscale("log")
        ax.set_xlabel("training examples")
        ax.set_ylabel(f"test {cells[0]['metric']}")
        ax.set_title(task)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    report.save(fig, path)
