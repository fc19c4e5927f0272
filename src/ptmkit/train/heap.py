"""Keep freed tensor memory in the process between training steps (glibc's malloc).

PyTorch's CPU tensors come from ``malloc``.  With glibc's defaults much of a training step's
freed activation memory goes back to the system (the top of the heap is trimmed once more than
twice the mapping threshold is free), and the next step takes it again page by page: a causal LM
step of ``benchmarks/bench_transformer.py`` (batch 32 x 128, vocabulary 8,000, bf16) touched
20,000-29,000 fresh pages, 80-115 MB, each a page fault and a zeroed page, and a single-threaded
kernel writing a fresh 16 MB output spent more time faulting than computing.  Raising the
mapping threshold to glibc's maximum (32 MiB on 64-bit) and switching the trimming off keeps
those pages for the next step, as a caching allocator would: about 200 faults a step;
8 % shorter bf16 steps and 4 % shorter float32 ones there (four alternating process pairs).  The
cost: the process holds on to its peak heap, which a training run reaches every step anyway.

:func:`keep_freed_memory` applies it once per process, and only where it can: Linux with glibc,
and no ``MALLOC_*`` tuning or preloaded allocator (jemalloc, tcmalloc) of the user's own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit): bigger blocks stay mappings
TRIM_THRESHOLD = 2**31 - 1  # 2 GiB of free heap top before a trim: in effect never (mallopt takes an int)

_applied: bool | None = None


def _user_tuned() -> str | None:
    """Why the user's own settings win, or None."""
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"):
        if name in os.environ:
            return f"{name} is set"
    if any(lib in os.environ.get("LD_PRELOAD", "") for lib in ("jemalloc", "tcmalloc", "mimalloc")):
        return "an allocator is preloaded"
    return None


def keep_freed_memory() -> bool:
    """Set glibc's thresholds so that freed tensors stay in the heap; True if they are set (by
    this call or an earlier one).  A no-op (False) off Linux/glibc or where the user tuned malloc."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux"):
        return False
    reason = _user_tuned()
    if reason:
        log.debug("malloc left as it is: %s", reason)
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # a C library without mallopt (musl)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mapped = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    trimmed = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    _applied = mapped and trimmed
    return _applied


__all__ = ["keep_freed_memory"]
