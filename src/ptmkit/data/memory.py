"""How much memory ``ptm prepare`` may use, and the block sizes that keep it there.

``--memory-budget SIZE`` bounds the memory the text in flight takes in all of prepare's processes
together (the parent that reads and writes, and the workers that encode): the blocks read and
not yet encoded, the text and token ids a worker holds while it encodes a block, the encoded
blocks waiting to be written, and the writer's buffers.  Nothing else grows with the corpus: ids
and offsets go to files as they come (:mod:`ptmkit.data.writer`).  The processes' own footprint,
the interpreter with numpy, numba and the tokenizer library loaded (about 120 MB resident in the
parent; forked workers share those pages and add a few MB each), comes on top and does not
depend on the corpus or the budget.

The plan is a linear model of that memory, measured on this code (``tests/unit/test_prepare_memory.py``
checks it against the kernel's high-water mark) with a margin: per byte of the block a worker
encodes, per byte of the slice it hands to the Rust encoder at once, per block in flight in the
parent, and a fixed allowance for the buffers of one process.  Given a budget it picks the
largest block (up to the default 1 MiB) and the number of blocks in flight that fit; a line
longer than a block is refused (one line is one sentence: a line of megabytes is not text for a
language model, and reading it whole would break the bound).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ptmkit.errors import PtmError

# ---------------------------------------------------------------------------- sizes
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_COUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)\s*$", re.IGNORECASE)
_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def _scaled(text: str | int, pattern: re.Pattern, base: int, what: str, expected: str, noun: str,
            whole=int) -> int:
    """A positive whole number from ``text``: an int as is, or digits with an optional unit
    (k, M, G, T as powers of ``base``) matched by ``pattern``, made whole by ``whole``."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = pattern.match(str(text))
        if not m:
            raise PtmError(f"{what}: expected {expected}, got {text!r}")
        value = int(whole(float(m.group(1)) * base ** _POWER[m.group(2).lower()]))
    if value <= 0:
        raise PtmError(f"{what} must be a positive {noun}, got {text!r}")
    return value


def parse_size(text: str | int, what: str = "--memory-budget") -> int:
    """Bytes from ``512M``, ``2G``, ``1.5GiB``, ``64k``, ``4096`` (binary units: 1K = 1024 bytes)."""
    return _scaled(text, _SIZE, 1024, what, "a size such as 512M, 2G or 1.5GiB (K, M, G, T = 1024-based)", "size")


def parse_count(text: str | int, what: str = "--shard-size") -> int:
    """A whole count from ``50M``, ``200k``, ``1.5G``, ``100000`` (decimal units: 1M = 1,000,000)."""
    return _scaled(text, _COUNT, 1000, what,
                   "a number of tokens such as 100000, 50M or 1.5G (k, M, G = 1000-based)", "number of tokens", round)


def format_size(n: float) -> str:
    """``1.5M``-style text of a byte count (1024-based, three significant digits), as
    :func:`parse_size` reads it back; a minimum shown this way is rounded up, never down."""
    n = float(n)
    for unit in ("", "K", "M", "G", "T"):
        if n < 1000 or unit == "T":
            if unit == "":
                return f"{math.ceil(n)}"
            digits = 0 if n >= 100 else 1 if n >= 10 else 2
            scale = 10 ** digits
            return f"{math.ceil(n * scale) / scale:.{digits}f}".rstrip("0").rstrip(".") + unit
        n /= 1024
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------- the model
# The model's constants, fitted to what ``Meter`` measured for word-piece, character (one token a
# byte: the most ids per byte of text) and Chinese text at blocks of 8 KiB to 700 KiB, then rounded
# up; per byte of ``held`` (twice the block: the block read plus a carried line start) or of the
# slice encoded at once:
WORKER_PER_BLOCK = 20.0   # the block, its pickled copy, the decoded text, the lines, the ids and their pickled copy
ENCODER_PER_BYTE = 128.0  # the Rust encodings and the Python id lists of the slice encoded at once
PARENT_PER_BLOCK = 4.0    # per block in flight: the block waiting for a worker, then its encoded result
FIXED = 1 << 20           # per process: allocator slack that the largest blocks leave behind, pipes, buffers
FIXED_IN_PROCESS = 2 << 20  # one process doing all (the Rust encoder's threads keep arenas of their own)
MIN_BLOCK = 4 << 10       # below this every few lines would be a task of their own
MAX_BLOCK = 1 << 20       # the default block: larger ones are no faster
MIN_ENCODE = 1 << 10
MAX_ENCODE = 64 << 10     # enough lines per call for the Rust encoder's own batching


@dataclass(frozen=True)
class MemoryPlan:
    """What prepare does within a budget: ``workers`` processes, blocks of ``block_bytes`` read at a
    time (lines up to ``max_line`` bytes), ``encode_bytes`` of text handed to the encoder per call,
    at most ``in_flight`` blocks between the reader and the writer; ``estimate`` bytes at most."""

    workers: int
    block_bytes: int
    encode_bytes: int
    in_flight: int
    max_line: int
    estimate: int
    budget: int


def estimate(workers: int, block: int, encode: int, in_flight: int) -> int:
    """Upper bound of the memory in flight (bytes) for these settings (see the module docstring).

    A block holds up to ``2 * block`` bytes (a block read plus the start of a line carried over,
    at most ``block`` long).  With one worker everything runs in the parent process."""
    held = 2 * block
    work = WORKER_PER_BLOCK * held + ENCODER_PER_BYTE * encode
    if workers <= 1:
        return int(work + PARENT_PER_BLOCK * held + FIXED_IN_PROCESS)
    return int(workers * (work + FIXED) + in_flight * PARENT_PER_BLOCK * held + FIXED)


def plan(budget: int, workers: int, workers_given: bool, max_block: int = MAX_BLOCK) -> MemoryPlan:
    """The largest blocks that fit ``budget`` bytes with ``workers`` processes.

    ``workers_given`` False (the default, all cores): fewer workers are used when the budget cannot
    feed them all.  A budget too small for the smallest block is an error naming the minimum."""
    max_block = max(MIN_BLOCK, min(max_block, MAX_BLOCK))
    candidates = [workers] if workers_given else list(range(workers, 0, -1))
    for w in candidates:
        for in_flight in ((2 * w, w + 1) if w > 1 else (1,)):
            block = _largest_block(budget, w, in_flight, max_block)
            if block is not None:
                enc = _encode_size(block)
                return MemoryPlan(w, block, enc, in_flight, block, estimate(w, block, enc, in_flight), budget)
    need = minimum(workers if workers_given else 1)
    fewer = f" ({format_size(minimum(1))} with --workers 1)" if workers_given and workers > 1 else ""
    raise PtmError(
        f"--memory-budget {format_size(budget)} is too small: with {workers if workers_given else 1} worker"
        f"{'s' if workers_given and workers > 1 else ''} prepare needs at least {format_size(need)}{fewer} for the "
        f"text in flight; give --memory-budget {format_size(need)} or more"
    )


def minimum(workers: int) -> int:
    """The smallest budget that works with ``workers`` processes."""
    in_flight = workers + 1 if workers > 1 else 1
    return estimate(workers, MIN_BLOCK, _encode_size(MIN_BLOCK), in_flight)


def _encode_size(block: int) -> int:
    return max(MIN_ENCODE, min(MAX_ENCODE, block // 4))


def _largest_block(budget: int, workers: int, in_flight: int, max_block: int) -> int | None:
    """The largest block (a multiple of 4 KiB, at most ``max_block``) whose estimate fits, or None."""
    if estimate(workers, MIN_BLOCK, _encode_size(MIN_BLOCK), in_flight) > budget:
        return None
    lo, hi = MIN_BLOCK >> 12, max_block >> 12
    while lo < hi:  # the estimate grows with the block
        mid = (lo + hi + 1) // 2
        if estimate(workers, mid << 12, _encode_size(mid << 12), in_flight) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo << 12


# ---------------------------------------------------------------------------- measuring
def _status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak() -> int | None:
    """Start this process's resident high-water mark afresh (Linux: ``/proc/self/clear_refs``) and
    return its resident size now (None where it cannot be read).  Only for processes prepare
    owns (its workers): it changes what ``getrusage`` reports as the peak."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass
    return _status_bytes("VmRSS")


class Meter:
    """The peak memory prepare's processes took beyond what they held when they started: the
    parent's resident high-water mark above its size at the start (an earlier peak of the calling
    process counts too, so this may overstate, never understate), plus each worker's."""

    def __init__(self) -> None:
        self.base = _status_bytes("VmRSS")
        self.workers: dict[int, int] = {}

    def start(self) -> None:
        """Measure from here (once the processes are up and warm)."""
        self.base = _status_bytes("VmRSS")

    def worker(self, pid: int, peak: int | None) -> None:
        if peak is not None:
            self.workers[pid] = max(self.workers.get(pid, 0), peak)

    def parent(self) -> int | None:
        peak = _status_bytes("VmHWM")
        return None if peak is None or self.base is None else max(0, peak - self.base)

    def total(self) -> int | None:
        parent = self.parent()
        return None if parent is None else parent + sum(self.workers.values())

    def describe(self) -> str:
        parent = self.parent()
        if parent is None:
            return "not measured (no /proc/self/status)"
        workers = "".join(f", worker {format_size(v)}" for v in self.workers.values())
        return f"{format_size(self.total() or 0)} (parent {format_size(parent)}{workers})"


def worker_peak(base: int | None) -> int | None:
    """A worker's resident high-water mark above ``base`` (from :func:`reset_peak`)."""
    peak = _status_bytes("VmHWM")
    return None if peak is None or base is None else max(0, peak - base)


__all__ = ["Meter", "MemoryPlan", "reset_peak", "worker_peak", "estimate", "format_size", "minimum", "parse_count", "parse_size", "plan"]
