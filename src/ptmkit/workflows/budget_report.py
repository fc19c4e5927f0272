"""The report of ``ptm budget`` (:mod:`ptmkit.workflows.budget`): a power law fitted to the
held-out loss against compute, the crossover budget where pre-training beats random weights,
``table.md`` and ``budget.png``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from matplotlib.ticker import FormatStrFormatter

from ptmkit.flops import format_flops
from ptmkit.workflows import report

# Kaplan et al. (2020), eq. 1.3: L(C_min) ~ C_min^-0.050, the loss against compute at its best
# allocation; one preset at a fixed size (as here) follows its own curve, flattening toward the loss
# that size can reach.
KAPLAN_ALPHA = 0.050
BASELINE = "random init"


def fit_power_law(points: Sequence[tuple[float, float]]) -> dict[str, float] | None:
    """``L = a * C^(-alpha)`` by least squares on ``log L`` against ``log C``: ``{"a", "alpha"}``,
    or ``None`` with fewer than two distinct positive points.

    >>> fit = fit_power_law([(1e12, 2.0 * 1e12 ** -0.1), (1e14, 2.0 * 1e14 ** -0.1)])
    >>> round(fit["a"], 6), round(fit["alpha"], 6)
    (2.0, 0.1)
    """
    pts = [(c, v) for c, v in points if c > 0 and v is not None and v > 0 and math.isfinite(v)]
    if len({c for c, _ in pts}) < 2:
        return None
    x = np.log([c for c, _ in pts])
    y = np.log([v for _, v in pts])
    slope, intercept = np.polyfit(x, y, 1)
    return {"a": float(math.exp(intercept)), "alpha": float(-slope)}


def crossovers(scores: list[dict[str, Any]], labels: Sequence[str], tasks: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per preset and task, the smallest budget whose mean test score beats the random-init
    baseline's mean + sd (``None``: not reached, or no baseline)."""
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        out[label] = {}
        for task in tasks:
            base = next((s for s in scores if s["model"] == BASELINE and s["task"] == task), None)
            cells = sorted((s for s in scores if s["model"] == label and s["task"] == task), key=lambda s: s["budget"])
            hit = next((s["budget"] for s in cells if base is not None and s["mean"] > base["mean"] + base["sd"]), None)
            out[label][task] = hit
    return out


def markdown(result: dict[str, Any]) -> str:
    """Rows: preset x budget (FLOPs, steps, held-out loss at the branch end, score per task), the
    random-init row; then the fitted power laws and the crossover budgets."""
    tasks = result["tasks"]
    metric = {s["task"]: s["metric"] for s in result["scores"]}
    cell = {(s["model"], s["budget"], s["task"]): s for s in result["scores"]}
    head = ["preset", "budget", "FLOPs", "steps", "held-out loss", *(f"{t} ({metric.get(t, '')})" for t in tasks)]
    rows = []
    if any(s["model"] == BASELINE for s in result["scores"]):
        rows.append([BASELINE, "–", "0", "0", "–",
                     *(report.mean_sd(cell[BASELINE, 0.0, t]) if (BASELINE, 0.0, t) in cell else "–" for t in tasks)])
    for label, m in result["presets"].items():
        for e in m["budgets"]:
            loss = f"{e['loss']:.3f}" if e["loss"] is not None else "–"
            scores = [report.mean_sd(cell[label, e["budget"], t]) if (label, e["budget"], t) in cell else "–" for t in tasks]
            rows.append([label, format_flops(e["budget"]), format_flops(e["flops"]), str(e["steps"]), loss, *scores])
    lines = report.markdown_table(head, rows)
    lines += ["", f"Held-out loss against compute, L = a * C^(-alpha) fitted over the branch ends "
                  f"(Kaplan et al. 2020: alpha = {result['kaplan_alpha']:.3f} for compute):", ""]
    for label, m in result["presets"].items():
        fit = m.get("fit")
        what = f"a = {fit['a']:.4g}, alpha = {fit['alpha']:.3f}" if fit else "not fitted (fewer than two losses)"
        lines.append(f"- {label} ({m['preset']}): {what}")
    lines += ["", "Crossover (the smallest budget whose mean score beats random init's mean + sd):", ""]
    if not any(s["model"] == BASELINE for s in result["scores"]):
        lines.append("- no random-init baseline was fine-tuned (--no-baseline)")
        return "\n".join(lines)
    for label, per_task in result["crossover"].items():
        said = ", ".join(f"{t}: {format_flops(b) if b is not None else 'not reached'}" for t, b in per_task.items())
        lines.append(f"- {label}: {said or 'no tasks'}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Left: held-out loss against FLOPs (log-log) with each preset's fitted power law; then one
    panel per task: test score against FLOPs (log x), random init as a band (mean ± sd)."""
    tasks = result["tasks"]
    labels = list(result["presets"])
    colours = report.colours(len(labels))
    style = {label: dict(color=colours[i % len(colours)], marker="os^vDP*Xph<>"[i % 12]) for i, label in enumerate(labels)}
    fig = report.figure(5.5 * (1 + max(1, len(tasks))), 4.5)
    axes = fig.subplots(1, 1 + max(1, len(tasks)), squeeze=False)[0]
    ax = axes[0]
    for label, m in result["presets"].items():
        pts = [(e["flops"], e["loss"]) for e in m["budgets"] if e["loss"] is not None]
        if m.get("main_curve"):
            ax.plot([f for _, f, _ in m["main_curve"] if f > 0], [v for _, f, v in m["main_curve"] if f > 0],
                    color=style[label]["color"], alpha=0.3, linewidth=1, label=f"{label}: main run (peak LR)")
        if pts:
            ax.plot([c for c, _ in pts], [v for _, v in pts], linestyle="none", label=label, **style[label])
        fit = m.get("fit")
        if fit and pts:
            xs = np.geomspace(min(c for c, _ in pts), max(c for c, _ in pts), 50)
            ax.plot(xs, fit["a"] * xs ** -fit["alpha"], color=style[label]["color"], linestyle="--",
                    label=f"{label}: alpha = {fit['alpha']:.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(FormatStrFormatter("%.3g"))  # losses span less than a decade: plain numbers
    ax.set_xlabel("pre-training FLOPs (forward + backward)")
    ax.set_ylabel("held-out loss at the end of the decay")
    ax.set_title(f"loss vs compute (Kaplan alpha = {result['kaplan_alpha']:.3f})")
    ax.legend(fontsize=7)
    for k, task in enumerate(tasks):
        ax = axes[k + 1]
        for label in labels:
            pts = sorted((s["flops"], s["mean"], s["sd"]) for s in result["scores"] if s["model"] == label and s["task"] == task)
            if pts:
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], capsize=3, label=label,
                            **style[label])
        base = next((s for s in result["scores"] if s["model"] == BASELINE and s["task"] == task), None)
        if base is not None:
            ax.axhspan(base["mean"] - base["sd"], base["mean"] + base["sd"], color="grey", alpha=0.25, label=BASELINE)
            ax.axhline(base["mean"], color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("pre-training FLOPs")
        metric = next((s["metric"] for s in result["scores"] if s["task"] == task), "score")
        ax.set_ylabel(f"test {metric} (mean ± sd over seeds)")
        ax.set_title(f"{task}: fine-tuned at each budget")
        ax.legend(fontsize=7)
    report.save(fig, path)
