"""The figures of the compression commands, drawn from what each command measured (nothing is
scored again here): ``ptm quantize``'s size, speed and scores before and after
(:func:`quantize_figure`), ``ptm distil``'s teacher against its students (:func:`distil_figure`).
``ptm prune``'s curve is :func:`ptmkit.workflows.prune.plot_curve`.  Every figure is written
through :func:`ptmkit.workflows.report.save` (so through ``fileio.save_figure``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.workflows.report import figure, save

BEFORE, AFTER = "#9e9e9e", "#1f77b4"


def _label_bars(ax: Any, xs: Any, values: list[float], fmt: str, rotation: int = 0) -> None:
    """Each bar's value above it."""
    for x, v in zip(xs, values):
        ax.text(x, v, fmt.format(v), ha="center", va="bottom", fontsize=7, rotation=rotation)


def _headroom(ax: Any, values: list[float], room: float = 1.18) -> None:
    """Room above the tallest bar for its label and the legend."""
    top = max(values, default=0.0)
    if top > 0:
        ax.set_ylim(min(0.0, *values), top * room)


def quantize_figure(results: dict[str, Any], path: Path) -> Path:
    """Three panels, float32 (grey) beside int8 (blue): the weights file's size in MB, the
    encoder's milliseconds per call at each batch size timed, and each split's scores."""
    fig = figure(12, 3.8)
    size_ax, speed_ax, score_ax = fig.subplots(1, 3)
    size = results["size"]
    unit, scale = ("MB", 1e6) if size["float32_bytes"] >= 1e6 else ("kB", 1e3)
    sizes = [size["float32_bytes"] / scale, size["int8_bytes"] / scale]
    size_ax.bar([0, 1], sizes, color=[BEFORE, AFTER], width=0.6)
    _label_bars(size_ax, [0, 1], sizes, "{:.2f}")
    size_ax.set_xticks([0, 1], ["float32", "int8"])
    size_ax.set_ylabel(f"best.safetensors ({unit})")
    size_ax.set_title(f"size (ratio {size['ratio']:.3f})")

    speed = results["speed"]
    batches = [k for k in speed if k.startswith("batch_")]
    xs = np.arange(len(batches))
    for offset, name, colour in ((-0.2, "float32", BEFORE), (0.2, "int8", AFTER)):
        ms = [speed[b][f"{name}_ms"] for b in batches]
        speed_ax.bar(xs + offset, ms, 0.4, color=colour, label=name)
        _label_bars(speed_ax, xs + offset, ms, "{:.2f}")
    _headroom(speed_ax, [speed[b][f"{n}_ms"] for b in batches for n in ("float32", "int8")])
    speed_ax.set_xticks(xs, [f"batch {b.removeprefix('batch_')}\n({speed[b]['speedup']:.2f}x)" for b in batches])
    speed_ax.set_ylabel(f"ms per encoder call ({speed['seq_len']} tokens)")
    speed_ax.set_title(f"speed, {speed['threads']} threads")
    speed_ax.legend(fontsize=7)

    cells = [(split, metric) for split in ("dev", "test") for metric in results[split]["float32"]
             if metric in results[split]["int8"] and metric != "loss"]
    xs = np.arange(len(cells))
    for offset, name, colour in ((-0.2, "float32", BEFORE), (0.2, "int8", AFTER)):
        values = [float(results[s][name][m]) for s, m in cells]
        score_ax.bar(xs + offset, values, 0.4, color=colour, label=name)
        _label_bars(score_ax, xs + offset, values, "{:.3f}", rotation=90)
    _headroom(score_ax, [float(results[s][n][m]) for s, m in cells for n in ("float32", "int8")], 1.3)
    score_ax.set_xticks(xs, [f"{s}\n{m}" for s, m in cells], fontsize=7)
    score_ax.set_title("scores")
    score_ax.legend(fontsize=7)
    return save(fig, path)


def distil_figure(summary: dict[str, Any], path: Path) -> Path:
    """The teacher's dev and test score (grey) beside each student's (blue, one bar per seed), in
    the task's selection metric, with the parameter counts in the legend."""
    runs = summary["runs"]
    metric = runs[0]["select"]
    teacher = summary["teacher"]
    fig = figure(max(5.5, 1.6 + 1.2 * (len(runs) + 1)), 4)
    ax = fig.subplots()
    labels = ["teacher"] + [f"student\nseed {r['seed']}" for r in runs]
    xs = np.arange(len(labels))
    for offset, split, hatch in ((-0.2, "dev", ""), (0.2, "test", "//")):
        values = [float(teacher[split][metric])] + [float(r[split][metric]) for r in runs]
        ax.bar(xs + offset, values, 0.4, color=[BEFORE] + [AFTER] * len(runs), hatch=hatch, edgecolor="white",
               label=split)
        _label_bars(ax, xs + offset, values, "{:.3f}")
    _headroom(ax, [float(teacher[s][metric]) for s in ("dev", "test")] + [float(r[s][metric]) for r in runs
                                                                             for s in ("dev", "test")], 1.3)
    ax.set_xticks(xs, labels)
    ax.set_ylabel(metric)
    ax.set_title(f"{summary.get('method', 'distillation')}: the student has {summary['parameter_ratio']:.0%} of the "
                 f"teacher's non-embedding parameters", fontsize=9)
    ax.legend(fontsize=7, loc="upper right", ncol=2, title="split (solid: dev, hatched: test)", title_fontsize=7)
    return save(fig, path)


__all__ = ["distil_figure", "quantize_figure"]
