"""Progress reporting: a redrawn bar with ETA on a terminal, sparse lines when output goes to a file.

``make demo > log`` must not fill the log with thousands of carriage-return bar frames, so when
stderr is not a terminal :class:`LineProgress` prints one line every ``every_percent`` per cent
(and at the end) with the count, the share done, the elapsed time, the ETA and the latest values,
each line at most :data:`MAX_LINE` characters.  Every progress display of ptmkit (training,
static models, corpus preparation, data fetching) comes from :func:`progress` or
:func:`progress_iter`; ``ptm --quiet`` (:mod:`ptmkit.verbosity`) silences them all.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator, TypeVar

from tqdm.auto import tqdm

from ptmkit.verbosity import quiet

MAX_LINE = 200  # a log line, whatever the label and values
T = TypeVar("T")


class LineProgress:
    """The subset of tqdm's interface ptmkit uses (``update``, ``set_postfix``, ``refresh``,
    ``close``, ``n``, a context manager), printing a line each time another ``every_percent`` of
    ``total`` is done: at most ``100 / every_percent`` lines, and one more at ``close`` if the
    count stopped short of the last one printed."""

    def __init__(self, total: int, initial: int = 0, desc: str = "train", every_percent: float = 5.0, stream=None,
                 unit: str = "step", unit_scale: bool = False) -> None:
        self.total = max(1, int(total))
        self.n = int(initial)
        self.start_n = self.n
        self.desc = desc
        self.unit, self.unit_scale = unit, unit_scale
        self.stream = stream if stream is not None else sys.stderr
        self.step = self.total * every_percent / 100  # a fraction of the total, never less than one unit
        self.postfix: dict[str, Any] = {}
        self.t0 = time.perf_counter()
        self._last = self.n

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        self.postfix = values

    def update(self, n: int = 1) -> None:
        self.n += n
        self.refresh()

    def refresh(self) -> None:
        """Print when another step of the total is done since the last line (``n`` may be set directly)."""
        if self.n - self._last >= max(1.0, self.step) or (self.n >= self.total > self._last):
            self._print()

    def _count(self, n: int) -> str:
        return tqdm.format_sizeof(n) if self.unit_scale else str(n)

    def _print(self) -> None:
        self._last = self.n
        elapsed = time.perf_counter() - self.t0
        done = self.n - self.start_n
        eta = elapsed / done * (self.total - self.n) if done > 0 else float("nan")
        extra = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        unit = "" if self.unit == "step" else f" {self.unit}"
        line = (f"{self.desc}: {self._count(self.n)}/{self._count(self.total)}{unit} ({100 * self.n / self.total:.0f}%) "
                f"elapsed {_clock(elapsed)} eta {_clock(eta)} {extra}").rstrip()
        print(line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "...", file=self.stream, flush=True)

    def close(self) -> None:
        if self.n != self._last:
            self._print()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _clock(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class _Silent:
    n = 0

    def update(self, n: int = 1) -> None: ...
    def set_postfix(self, refresh: bool = False, **values: Any) -> None: ...
    def refresh(self) -> None: ...
    def close(self) -> None: ...

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: Any) -> None: ...


def progress(total: int, initial: int = 0, desc: str = "train", disable: bool = False, leave: bool = True,
             unit: str = "step", unit_scale: bool = False):
    """A tqdm bar on a terminal, :class:`LineProgress` otherwise, nothing when ``disable`` or
    under ``ptm --quiet``."""
    if disable or quiet():
        return _Silent()
    if sys.stderr.isatty():
        return tqdm(total=total, initial=initial, unit=unit, unit_scale=unit_scale, dynamic_ncols=True, desc=desc,
                    leave=leave)
    return LineProgress(total, initial, desc, unit=unit, unit_scale=unit_scale)


def progress_iter(items: Iterable[T], total: int, desc: str, unit: str = "item", disable: bool = False,
                  postfix: Any = None) -> Iterator[T]:
    """``items`` with a :func:`progress` display advanced after each; ``postfix(item)`` gives the
    values shown beside it (a dict)."""
    bar = progress(total, desc=desc, unit=unit, disable=disable)
    with bar:
        for item in items:
            if postfix is not None:
                bar.set_postfix(refresh=False, **postfix(item))
            yield item
            bar.update(1)
