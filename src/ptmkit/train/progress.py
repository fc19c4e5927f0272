"""Progress reporting: a redrawn bar with ETA on a terminal, sparse lines when output goes to a file.

``make demo > log`` must not fill the log with thousands of carriage-return bar frames, so when
stderr is not a terminal :class:`LineProgress` prints one line every ``every_percent`` per cent
(and at the end) with the step, the share done, the elapsed time, the ETA and the latest values.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm.auto import tqdm


class LineProgress:
    """The subset of tqdm's interface the trainer uses (``update``, ``set_postfix``, ``close``)."""

    def __init__(self, total: int, initial: int = 0, desc: str = "train", every_percent: float = 5.0, stream=None) -> None:
        self.total = max(1, int(total))
        self.n = int(initial)
        self.start_n = self.n
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.step = max(1, int(self.total * every_percent / 100))
        self.postfix: dict[str, Any] = {}
        self.t0 = time.perf_counter()
        self._last = self.n

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        self.postfix = values

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.n - self._last >= self.step or self.n >= self.total:
            self._print()

    def _print(self) -> None:
        self._last = self.n
        elapsed = time.perf_counter() - self.t0
        done = self.n - self.start_n
        eta = elapsed / done * (self.total - self.n) if done > 0 else float("nan")
        extra = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        print(
            f"{self.desc}: {self.n}/{self.total} ({100 * self.n / self.total:.0f}%) "
            f"elapsed {_clock(elapsed)} eta {_clock(eta)} {extra}".rstrip(),
            file=self.stream, flush=True,
        )

    def close(self) -> None:
        if self.n != self._last:
            self._print()


def _clock(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class _Silent:
    def update(self, n: int = 1) -> None: ...
    def set_postfix(self, refresh: bool = False, **values: Any) -> None: ...
    def close(self) -> None: ...


def progress(total: int, initial: int = 0, desc: str = "train", disable: bool = False, leave: bool = True):
    """A tqdm bar on a terminal, :class:`LineProgress` otherwise, nothing when ``disable``."""
    if disable:
        return _Silent()
    if sys.stderr.isatty():
        return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, desc=desc, leave=leave)
    return LineProgress(total, initial, desc)
