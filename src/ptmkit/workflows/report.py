"""What the workflows report, written once: scores summarised over seeds, tables (plain text and
Markdown) and figures.

* :func:`summarize`: mean and sample sd of the test scores over seeds per group of rows (``ptm
  evaluate``, ``ptm compare``, learning curves); :func:`summarize_inits`: the same per init of
  :func:`ptmkit.workflows.finetune.run_seeds` results, every metric, with the per-seed values
  (``ptm finetune``, the demos), and :func:`format_table` prints it.
* :func:`markdown_table`, :func:`mean_sd`: the Markdown the workflows write.
* :func:`figure` / :func:`save`: a Matplotlib figure drawn off-screen (no pyplot state, no
  window) and written to a PNG; :func:`bars_per_task`, :func:`demo_figure` (whose right panel,
  :func:`init_bars`, is ``ptm finetune --init both``'s :func:`init_figure`) and
  :func:`pretrain_curve` are the plots more than one workflow draws.
* :func:`seed_gains`: the per-seed gain of pre-training over the random initialisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ptmkit import fileio
from ptmkit.train.metrics_log import read_metrics


# -- scores over seeds ----------------------------------------------------------------------------------
def mean_sd_of(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample sd (0 for a single value) of ``values``."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def summarize(rows: list[dict[str, Any]], keys: tuple[str, ...] = ("model", "mode", "task")) -> list[dict[str, Any]]:
    """Mean and sample sd of the test scores over seeds per group of equal ``keys``; each group
    also keeps the ``metric`` and any field of its first row that is not per seed."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    per_seed = {"seed", "test", "dev", "lr"}
    out = []
    for rs in groups.values():
        mean, sd = mean_sd_of([r["test"] for r in rs])
        shared = {k: x for k, x in rs[0].items() if k not in per_seed}
        out.append({**shared, "mean": mean, "sd": sd, "n": len(rs)})
    return out


def summarize_inits(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per init: mean and sample sd over seeds of each test and dev metric, plus the per-seed values."""
    out: dict[str, dict[str, Any]] = {}
    for init in dict.fromkeys(r["init"] for r in results):
        rows = [r for r in results if r["init"] == init]
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in rows], "n": len(rows)}
        for split in ("test", "dev"):
            for metric in rows[0][split]:
                values = [float(r[split][metric]) for r in rows]
                mean, sd = mean_sd_of(values)
                entry[f"{split}_{metric}"] = {"mean": mean, "sd": sd, "values": values}
        entry["best_epochs"] = [r["best_epoch"] for r in rows]
        if rows[0].get("metrics"):
            entry["metrics"] = list(rows[0]["metrics"])
        out[init] = entry
    return out


def seed_gains(results: list[dict[str, Any]], metric: str = "accuracy") -> dict[str, Any]:
    """The gain of the ``pretrained`` over the ``random`` init in test ``metric``, seed by seed:
    ``{"mean", "sd", "per_seed": {seed: gain}, "positive_seeds"}``."""
    random = {r["seed"]: r["test"][metric] for r in results if r["init"] == "random"}
    per_seed = {r["seed"]: r["test"][metric] - random[r["seed"]] for r in results if r["init"] == "pretrained"}
    gains = np.array(list(per_seed.values()), dtype=np.float64)
    mean, sd = mean_sd_of(gains)
    return {"mean": mean, "sd": sd, "per_seed": {str(k): float(v) for k, v in per_seed.items()},
            "positive_seeds": int((gains > 0).sum())}


# -- tables ---------------------------------------------------------------------------------------------
def mean_sd(cell: dict[str, Any]) -> str:
    """``0.812 ± 0.014`` from a summarised cell's ``mean`` and ``sd``."""
    return f"{cell['mean']:.3f} ± {cell['sd']:.3f}"


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table with the header ``head``."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


_METRIC_NAMES = {"test_accuracy": "accuracy", "test_f1": "F1", "test_macro_f1": "macro-F1",
                 "test_exact_match": "exact match", "test_pearson": "Pearson r", "test_spearman": "Spearman rho",
                 "test_mean": "mean over tasks"}


def format_table(summary: dict[str, dict[str, Any]], labels: dict[str, str] | None = None) -> str:
    """A plain-text table: condition | main test metric mean ± sd | second metric | per-seed values.

    The main and second metrics are the task type's first two (``TaskType.metrics``: accuracy and
    F1 for classification, F1 and exact match for span QA, BLEU and chrF for seq2seq, ...)."""
    labels = labels or {}
    entries = list(summary.values())
    has = lambda key: all(key in e for e in entries)  # noqa: E731
    declared = [f"test_{m}" for m in entries[0].get("metrics", []) if has(f"test_{m}")] if entries else []
    if declared:
        main, second = declared[0], (declared[1] if len(declared) > 1 else declared[0])
    else:  # results written before they named their type's metrics
        main = next(k for k in ("test_accuracy", "test_f1", "test_pearson", "test_mean") if has(k))
        second = next((k for k in ("test_f1", "test_macro_f1", "test_exact_match", "test_spearman") if k != main and has(k)), main)

    def name(key: str) -> str:
        return _METRIC_NAMES.get(key, key.removeprefix("test_"))

    head = ["condition", f"test {name(main)} (mean ± sd)", name(second), f"per-seed {name(main)}"]
    rows = []
    for init, e in summary.items():
        a, b = e[main], e[second]
        per_seed = "  ".join(f"s{s}:{v:.3f}" for s, v in zip(e["seeds"], a["values"]))
        rows.append([labels.get(init, init), f"{a['mean']:.4f} ± {a['sd']:.4f}", f"{b['mean']:.4f} ± {b['sd']:.4f}", per_seed])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(head), "-+-".join("-" * w for w in widths)] + [line(r) for r in rows])


# -- figures --------------------------------------------------------------------------------------------
def figure(width: float, height: float) -> Figure:
    """A figure drawn off-screen (Matplotlib's object API: no pyplot state, no window)."""
    return Figure(figsize=(width, height))


def save(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    fig.tight_layout()
    return fileio.save_figure(fig, path, dpi=dpi)


def colours(n: int) -> tuple:
    """``n`` distinguishable colours (tab10, or tab20 beyond ten)."""
    return matplotlib.colormaps["tab20" if n > 10 else "tab10"].colors


def bars_per_task(table: list[dict[str, Any]], tasks: list[str], path: Path) -> None:
    """Grouped bars: one group per task, one bar per (model, mode), error bars = sd over seeds."""
    keys = list(dict.fromkeys((t["model"], t["mode"]) for t in table))
    width = 0.8 / max(len(keys), 1)
    fig = figure(max(6, 1.6 * len(tasks)), 4)
    ax = fig.subplots()
    for k, key in enumerate(keys):
        cells = {t["task"]: t for t in table if (t["model"], t["mode"]) == key}
        xs = [i + (k - (len(keys) - 1) / 2) * width for i in range(len(tasks))]
        ax.bar(xs, [cells[t]["mean"] if t in cells else 0 for t in tasks], width,
               yerr=[cells[t]["sd"] if t in cells else 0 for t in tasks], label=f"{key[0]} ({key[1]})")
    ax.set_xticks(range(len(tasks)), tasks, rotation=15)
    ax.set_ylabel("test score (task metric)")
    ax.legend(fontsize=7)
    save(fig, path)


def pretrain_curve(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A pre-training run's logged ``(train, eval)`` records that carry a loss."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return [], []
    train = [r for r in read_metrics(path, "train") if "loss" in r]
    evals = [r for r in read_metrics(path, "eval") if "loss" in r]
    return train, evals


INIT_COLOURS = {"random": "#9e9e9e", "word2vec": "#ff7f0e", "pretrained": "#1f77b4"}


def init_bars(ax: Any, summary: dict[str, dict[str, Any]], conditions: dict[str, str], key: str = "test_accuracy",
              chance: float | None = None) -> None:
    """Into ``ax``: the test score ``key`` per init of a :func:`summarize_inits` summary (bars:
    mean ± sd; dots: seeds; dashed: ``chance`` when given), labelled by ``conditions``."""
    names = [k for k in ("random", "word2vec", "pretrained") if k in summary]
    for x, name in enumerate(names):
        acc = summary[name][key]
        ax.bar(x, acc["mean"], yerr=acc["sd"], capsize=8, color=INIT_COLOURS[name], alpha=0.8, width=0.6)
        jitter = np.linspace(-0.12, 0.12, len(acc["values"])) if len(acc["values"]) > 1 else [0.0]
        ax.scatter(x + np.asarray(jitter), acc["values"], color="black", zorder=3, s=18, label="seeds" if x == 0 else None)
        ax.text(x, acc["mean"] + acc["sd"] + 0.005, f"{acc['mean']:.3f}", ha="center", va="bottom")
    if chance is not None:
        ax.axhline(chance, color="red", lw=0.8, ls="--", label="chance")
    ax.set_xticks(range(len(names)), [conditions.get(n, n).replace(" (", "\n(") for n in names])
    lo = min(min(summary[n][key]["values"]) for n in names)
    hi = max(max(summary[n][key]["values"]) for n in names)
    floor = min(0.45, lo - 0.05) if chance is not None else lo - 0.1 * max(hi - lo, abs(hi), 1e-3)
    ax.set_ylim(max(0.0, floor) if lo >= 0 else floor, min(1.0, hi + 0.06) if hi <= 1 else hi * 1.06)
    ax.legend(loc="lower right")


def init_figure(summary: dict[str, dict[str, Any]], out: Path, task: str) -> Path | None:
    """``ptm finetune --init both``: the test score with and without pre-training (the demo's
    right panel, :func:`init_bars`, in the task's main metric); ``None`` when ``summary`` does not
    hold both inits."""
    if not {"pretrained", "random"} <= set(summary):
        return None
    entry = summary["pretrained"]
    metric = next((m for m in entry.get("metrics", []) if f"test_{m}" in summary["random"]),
                  next(k for k in entry if k.startswith("test_")).removeprefix("test_"))
    fig = figure(6, 4.4)
    ax = fig.subplots()
    init_bars(ax, summary, {"random": "random init\n(no pre-training)", "pretrained": "pre-trained"}, f"test_{metric}")
    ax.set_ylabel(f"test {metric}")
    ax.set_title(f"{task}: with and without pre-training (mean ± sd over {entry['n']} seed(s))", fontsize=9)
    return save(fig, out)


def demo_figure(run_dir: Path, summary: dict[str, dict[str, Any]], conditions: dict[str, str], out: Path, title: str,
                text_label: str, task_label: str) -> Path:
    """A demo's figure: left, the pre-training loss curve; right, test accuracy per condition
    (bars: mean ± sd; dots: seeds; the dashed line: chance)."""
    train, evals = pretrain_curve(run_dir)
    fig = figure(12, 4.4)
    left, right = fig.subplots(1, 2)
    if train:
        left.plot([r["step"] for r in train], [r["loss"] for r in train], label="train (MLM)", lw=1.2)
    if evals:
        left.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="held-out", ms=4)
    left.set_xlabel("pre-training step")
    left.set_ylabel("masked-LM loss (nats)")
    left.set_title(f"pre-training on {text_label}")
    left.grid(alpha=0.3)
    left.legend()

    init_bars(right, summary, conditions, chance=0.5)
    right.set_ylabel(f"{task_label} test accuracy")
    right.set_title(title or f"fine-tuning on {task_label} (mean ± sd over seeds)")
    return save(fig, out, dpi=110)
