"""The run's ``metrics.jsonl`` (one JSON object per log or evaluation), its loss plot, and with
``train.report_to=tensorboard`` the same records as TensorBoard scalars (:mod:`ptmkit.train.tensorboard`).

Records carry ``step`` and ``split`` (``train`` or ``eval``, or any name a caller writes, such as
``dev`` for fine-tuning's per-epoch scores) and the averaged metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ptmkit.fileio import append_text, atomic_write_text, make_dirs, save_figure
from ptmkit.train.tensorboard import reporter

METRICS_FILE = "metrics.jsonl"
LOSS_PLOT = "loss.png"


def append_metrics(path: Path, record: dict[str, Any]) -> None:
    """Append one record (a line) to ``path``."""
    path = Path(path)
    make_dirs(path.parent)
    append_text(path, json.dumps(record) + "\n")


class MetricsLog:
    """Where a Trainer's records go: appended to ``run_dir/metrics.jsonl`` and handed to the
    reporter ``report_to`` names (TensorBoard, or none).  ``run_dir=None`` writes nothing."""

    def __init__(self, run_dir: Path | str | None, report_to: str = "none", is_main: bool = True) -> None:
        self.path = Path(run_dir) / METRICS_FILE if run_dir is not None else None
        self.report = reporter(report_to, run_dir, is_main)  # a missing package fails here, before training

    def write(self, record: dict[str, Any]) -> None:
        if self.path is not None:
            append_metrics(self.path, record)
            self.report.write(record)

    def close(self) -> None:
        self.report.close()


def read_metrics(path: Path, split: str | None = None) -> list[dict[str, Any]]:
    """Records of a ``metrics.jsonl`` file (optionally only those of ``split``)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            if split is None or rec.get("split") == split:
                out.append(rec)
    return out


def truncate_metrics(path: Path, step: int) -> None:
    """Drop log lines written after checkpoint ``step`` (by the run that was interrupted)."""
    if not Path(path).exists():
        return
    keep = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except json.JSONDecodeError:  # a line cut by the kill
            continue
    atomic_write_text(Path(path), "".join(line + "\n" for line in keep))


FEW_POINTS = 30  # a split logged at no more steps than this is drawn with a marker at each


def plot_losses(metrics: Path, out: Path) -> Path | None:
    """Plot train and eval loss (and any other split's ``loss``) against the step into ``out`` (PNG);
    a split of few records gets a marker at each (a single record would otherwise draw nothing)."""
    if not Path(metrics).exists():
        return None
    records = [r for r in read_metrics(metrics) if "loss" in r]
    splits = list(dict.fromkeys(r.get("split", "train") for r in records))
    fig = Figure(figsize=(6, 4))  # drawn off-screen: no pyplot state, no window
    ax = fig.subplots()
    for split in splits:
        rows = [r for r in records if r.get("split", "train") == split]
        style = "-" if split == "train" and len(rows) > FEW_POINTS else "o-"  # a lone point needs its marker
        ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], style, label=split, ms=4)
    if not records:
        ax.text(0.5, 0.5, "no loss logged yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if splits:
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out, dpi=100)
