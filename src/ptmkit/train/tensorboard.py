"""TensorBoard events beside ``metrics.jsonl`` (``train.report_to=tensorboard``).

Every record the Trainer appends to ``metrics.jsonl`` (the training log every ``log_every`` steps,
each evaluation, fine-tuning's per-epoch dev scores) is also written as scalars to an event file
under ``RUN_DIR/tensorboard/``, tagged ``SPLIT/KEY`` (``train/loss``, ``train/lr``,
``train/grad_norm``, ``train/tokens_per_s``, ``eval/loss``, ``dev/accuracy``, ...) at the record's
step, so ``tensorboard --logdir RUN_DIR`` shows what ``loss.png`` shows and more.  The writer is
``torch.utils.tensorboard.SummaryWriter``; the ``tensorboard`` package is an optional extra.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ptmkit import fileio
from ptmkit.errors import PtmError

TENSORBOARD_DIR = "tensorboard"
NOT_SCALARS = ("step", "split")  # the record's coordinates, not values to plot


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """``{"SPLIT/KEY": value}`` for the numeric values of one metrics record (booleans and text skipped)."""
    split = str(record.get("split", "train"))
    out = {}
    for key, value in record.items():
        if key in NOT_SCALARS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[f"{split}/{key}"] = float(value)
    return out


class TensorBoardLog:
    """Writes metrics records as TensorBoard scalars into ``run_dir/tensorboard``.

    The event file is opened at the first record, with ``purge_step`` at that record's step: a
    resumed run drops the events the interrupted one wrote from there on, as ``metrics.jsonl`` is
    cut back to the checkpoint's step.  Each record is flushed, so an interrupted run keeps its events.
    """

    def __init__(self, run_dir: Path | str) -> None:
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self.summary_writer = summary_writer_class()  # fails before training when the package is missing
        self.writer = None
        self.opened = False  # reopened after close() (a record written after fit): nothing to purge

    def write(self, record: dict[str, Any]) -> None:
        step = int(record.get("step", 0))
        values = {k: v for k, v in scalars(record).items() if math.isfinite(v)}
        if not values:
            return
        if self.writer is None:
            self.before = set(self.log_dir.glob("*")) if self.log_dir.is_dir() else set()
            purge = None if self.opened else step
            self.writer = self.summary_writer(log_dir=str(self.log_dir), purge_step=purge)
            self.opened = True
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()
        self._record()

    def _record(self) -> None:
        """Report the event file the writer made (one that was not there when it opened) as
        written by ptm: a third-party writer does not go through :mod:`ptmkit.fileio`."""
        for f in self.log_dir.glob("events.out.tfevents.*"):
            if f.is_file() and f not in self.before:
                fileio.record(f)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self._record()


class NoReport:
    """``report_to=none``: nothing besides ``metrics.jsonl``."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def summary_writer_class() -> Any:
    """``torch.utils.tensorboard.SummaryWriter``, or a :class:`PtmError` naming the extra to install."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # torch.utils.tensorboard raises ImportError naming tensorboard
        raise PtmError(
            "train.report_to=tensorboard needs the tensorboard package: pip install 'ptmkit[tensorboard]' "
            f"(or pip install tensorboard), or set report_to=none ({exc})"
        ) from None
    return SummaryWriter


def reporter(report_to: str, run_dir: Path | str | None, is_main: bool = True) -> TensorBoardLog | NoReport:
    """Where a Trainer's records go besides ``metrics.jsonl``: :class:`TensorBoardLog` for
    ``report_to=tensorboard`` on the main rank of a run with a directory, else :class:`NoReport`."""
    if report_to == "tensorboard" and run_dir is not None and is_main:
        return TensorBoardLog(run_dir)
    return NoReport()
