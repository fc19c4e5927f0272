"""Word-word co-occurrence counting in bounded memory (for GloVe and SVD-PPMI).

For every token at position ``p`` of a sentence and every context position ``p - d``
(``1 <= d <= window``, same sentence) the pair ``(w_p, w_{p-d})`` and, when symmetric, the
pair ``(w_{p-d}, w_p)`` receive the weight ``weight(d)``:

* ``"harmonic"``: ``1/d`` (GloVe, Pennington et al. 2014);
* ``"uniform"``: ``1`` (plain window counts);
* ``"linear"``: ``(window - d + 1) / window``, the expectation of word2vec's dynamic window
  (a window size drawn uniformly from ``1..window``), as used for SVD-PPMI by Levy et al. (2015).

Windows never cross sentence boundaries (GloVe's ``cooccur`` resets its history at each line).

Exactness: weights are accumulated as integers ``weight(d) * L`` with ``L = lcm(1..window)``
(harmonic) or ``L = window`` (linear) and divided by ``L`` once at the end, so the counts do
not depend on summation order: spilled and in-memory counting give bit-identical results
(exact while a scaled count stays below 2**53, i.e. below 3.5e12 for window 10).

Memory: pairs are summed in an open-addressing hash table (numba) sized from ``memory_mb``.
When the table is 70 % full its entries are sorted by ``(i, j)`` and spilled to disk as one
*run* (``run-NNNN.npy``, records ``(i int32, j int32, x float64)``), and the table is cleared.
At the end the runs are merged k-way, block by block, summing duplicate pairs; the result is
written to ``cooccurrence.bin`` (same records) and memory-mapped.  The peak memory of counting
is about ``memory_mb`` plus the corpus array and interpreter overhead, whatever the corpus size.
If nothing was spilled, the sorted table is returned in memory and no file is written.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp

from ptmkit.errors import PtmError
from ptmkit.train.progress import progress as progress_display

RECORD = np.dtype([("i", "<i4"), ("j", "<i4"), ("x", "<f8")])
WEIGHTINGS = {"harmonic": 0, "uniform": 1, "linear": 2}
_LOAD = 0.7  # spill when the hash table is this full
# Bytes per hash-table slot at spill time: key+value (16) + argsort index (8) + run record (16)
# for the 70 % occupied slots.
_BYTES_PER_SLOT = 16 + _LOAD * (8 + 16)


@dataclass
class Cooccurrence:
    """A sparse co-occurrence matrix in coordinate form, sorted by ``(i, j)`` with unique pairs.

    records: structured array [nnz] of ``RECORD`` (``i``, ``j``: int32 word ids; ``x``: float64
    weighted count); memory-mapped when the counting spilled to disk.
    """

    records: np.ndarray
    vocab_size: int
    stats: dict = field(default_factory=dict)

    @property
    def nnz(self) -> int:
        return int(self.records.shape[0])

    def to_scipy(self):
        """The matrix as ``scipy.sparse.csr_matrix`` [V, V] (float64)."""
        r = self.records
        return sp.csr_matrix(
            (np.asarray(r["x"]), (np.asarray(r["i"]), np.asarray(r["j"]))), shape=(self.vocab_size,) * 2
        )

    def to_dense(self) -> np.ndarray:
        """Dense float64 [V, V] (small vocabularies only)."""
        m = np.zeros((self.vocab_size, self.vocab_size))
        np.add.at(m, (self.records["i"], self.records["j"]), self.records["x"])
        return m


# --------------------------------------------------------------------------- numba kernels


@numba.njit(cache=True, inline="always")
def _slot(key: np.int64, cap: np.int64) -> np.int64:
    # Fibonacci-style mixing so that consecutive keys spread over the table.
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64((h >> np.uint64(17)) % np.uint64(cap))


@numba.njit(cache=True)
def _fill(ids, offsets, sent, pos, keys, vals, used, max_used, window, weighting, symmetric, vocab, scale):
    """Add the pairs of sentences ``sent..`` (starting at token ``pos``) to the hash table.

    Returns ``(sent, pos, used)`` where counting stopped: at the end of the corpus or when the
    next token could overflow ``max_used`` occupied slots.
    """
    cap = keys.shape[0]
    n_sent = offsets.shape[0] - 1
    per_token = 2 * window if symmetric else window
    while sent < n_sent:
        start = offsets[sent]
        end = offsets[sent + 1]
        if pos < start:
            pos = start
        while pos < end:
            if used + per_token > max_used:
                return sent, pos, used
            w = np.int64(ids[pos])
            lo = max(start, pos - window)
            for q in range(pos - 1, lo - 1, -1):
                d = pos - q
                # integer-valued increments (see the module docstring): scale / d or
                # (window - d + 1); divided by the scale once at the end.
                if weighting == 0:
                    inc = float(scale // d)
                elif weighting == 1:
                    inc = 1.0
                else:
                    inc = float(window - d + 1)
                c = np.int64(ids[q])
                for side in range(2 if symmetric else 1):
                    key = w * vocab + c if side == 0 else c * vocab + w
                    s = _slot(key, cap)
                    while True:
                        k = keys[s]
                        if k == key:
                            vals[s] += inc
                            break
                        if k == -1:
                            keys[s] = key
                            vals[s] = inc
                            used += 1
                            break
                        s += 1
                        if s == cap:
                            s = 0
            pos += 1
        sent += 1
    return sent, pos, used


@numba.njit(cache=True)
def _rehash(keys, vals, new_keys, new_vals):
    """Insert every occupied slot of (keys, vals) into the empty, larger table (new_keys, new_vals)."""
    cap = new_keys.shape[0]
    for s in range(keys.shape[0]):
        key = keys[s]
        if key != -1:
            t = _slot(key, cap)
            while new_keys[t] != -1:
                t += 1
                if t == cap:
                    t = 0
            new_keys[t] = key
            new_vals[t] = vals[s]


@numba.njit(cache=True)
def _compact(keys, vals):
    """Move the occupied slots to the front (in place); return their number."""
    n = 0
    for s in range(keys.shape[0]):
        if keys[s] != -1:
            keys[n] = keys[s]
            vals[n] = vals[s]
            n += 1
    return n


@numba.njit(cache=True)
def _to_records(keys, vals, order, vocab, out_i, out_j, out_x, inv_scale):
    for t in range(order.shape[0]):
        k = keys[order[t]]
        out_i[t] = k // vocab
        out_j[t] = k % vocab
        out_x[t] = vals[order[t]] * inv_scale


def _sorted_records(keys: np.ndarray, vals: np.ndarray, n: int, vocab: int, inv_scale: float = 1.0) -> np.ndarray:
    """The first ``n`` (key, value) pairs as RECORDs sorted by key, values times ``inv_scale``."""
    order = np.argsort(keys[:n], kind="quicksort")
    rec = np.empty(n, dtype=RECORD)
    _to_records(keys, vals, order, vocab, rec["i"], rec["j"], rec["x"], inv_scale)
    return rec


# --------------------------------------------------------------------------- merging runs


class _RunReader:
    """Reads one sorted run (an ``.npy`` of RECORD) block by block with plain file reads.

    Plain reads, not a memory map: mapped pages would count against the process's memory.
    """

    def __init__(self, path: Path, block: int):
        self.f = open(path, "rb")
        version = np.lib.format.read_magic(self.f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(self.f)
        if dtype != RECORD:
            raise PtmError(f"{path} is not a co-occurrence run")
        self.left = int(shape[0])
        self.block = block
        self.buf = np.empty(0, dtype=RECORD)

    def refill(self) -> None:
        if self.buf.shape[0] == 0 and self.left > 0:
            n = min(self.block, self.left)
            self.buf = np.fromfile(self.f, dtype=RECORD, count=n)
            self.left -= n

    @property
    def exhausted(self) -> bool:
        return self.left == 0 and self.buf.shape[0] == 0

    def close(self) -> None:
        self.f.close()


def _reduce_sorted(keys: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``x`` over equal consecutive ``keys`` (sorted)."""
    if keys.shape[0] == 0:
        return keys, x
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return keys[starts], np.add.reduceat(x, starts)


def merge_runs(runs: list[Path], out_path: Path, vocab: int, memory_bytes: int, inv_scale: float = 1.0) -> int:
    """k-way merge of sorted runs into ``out_path`` (raw RECORD array), summing duplicates.

    Each round takes, from every run's buffered block, the entries whose key is at most the
    smallest "last buffered key" among runs that still have unread data: every entry with that
    key or less is then in memory, so the round's output is final.  Memory: about 80 bytes per
    buffered entry, ``len(runs) * block`` entries.  Returns the number of merged pairs.
    """
    block = max(1024, memory_bytes // (80 * max(1, len(runs))))
    readers = [_RunReader(p, block) for p in runs]
    n_out = 0
    try:
        with open(out_path, "wb") as out:
            while True:
                for r in readers:
                    r.refill()
                live = [r for r in readers if not r.exhausted]
                if not live:
                    break
                bounds = [
                    int(r.buf["i"][-1]) * vocab + int(r.buf["j"][-1]) for r in live if r.left > 0
                ]
                bound = min(bounds) if bounds else None
                parts_k, parts_x = [], []
                for r in live:
                    k = r.buf["i"].astype(np.int64) * vocab + r.buf["j"]
                    cut = k.shape[0] if bound is None else int(np.searchsorted(k, bound, side="right"))
                    parts_k.append(k[:cut])
                    parts_x.append(r.buf["x"][:cut])
                    r.buf = r.buf[cut:].copy() if cut < k.shape[0] else np.empty(0, dtype=RECORD)
                keys = np.concatenate(parts_k)
                xs = np.concatenate(parts_x)
                del parts_k, parts_x
                order = np.argsort(keys, kind="stable")
                keys, xs = _reduce_sorted(keys[order], xs[order])
                rec = np.empty(keys.shape[0], dtype=RECORD)
                rec["i"] = keys // vocab
                rec["j"] = keys % vocab
                rec["x"] = xs * inv_scale
                rec.tofile(out)
                n_out += rec.shape[0]
    finally:
        for r in readers:
            r.close()
    return n_out


# --------------------------------------------------------------------------- public API


def count_cooccurrence(
    ids: np.ndarray,
    offsets: np.ndarray,
    vocab_size: int,
    window: int = 10,
    weighting: str = "harmonic",
    symmetric: bool = True,
    memory_mb: float = 1024.0,
    out_dir: str | Path | None = None,
    progress: bool = False,
) -> Cooccurrence:
    """Count weighted co-occurrences of a corpus of word ids.

    ids: int [N] word ids in ``[0, vocab_size)`` (out-of-vocabulary words already removed).
    offsets: int64 [S+1] sentence boundaries into ``ids`` (``ids[offsets[s]:offsets[s+1]]``).
    memory_mb: budget for the hash table and the merge buffers (not counting ``ids``).
    out_dir: where runs and the merged table go when the budget is exceeded (a temporary
    directory by default; the merged ``cooccurrence.bin`` then stays there, memory-mapped).
    Returns a :class:`Cooccurrence` with ``stats`` = tokens, pairs, runs, seconds, words_per_s.
    """
    if weighting not in WEIGHTINGS:
        raise PtmError(f"unknown co-occurrence weighting {weighting!r}; choose one of {sorted(WEIGHTINGS)}")
    if window < 1:
        raise PtmError(f"window must be >= 1, got {window}")
    ids = np.ascontiguousarray(ids)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if ids.ndim != 1 or offsets.ndim != 1 or offsets.shape[0] < 1 or offsets[0] != 0 or offsets[-1] != ids.shape[0]:
        raise PtmError("offsets must be a 1-D array from 0 to len(ids) (one entry per sentence boundary)")
    if ids.shape[0] and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise PtmError(f"word ids must lie in [0, {vocab_size}); map unknown words away before counting")
    budget = int(memory_mb * 2**20)
    per_token = 2 * window if symmetric else window
    # The table starts small (cache-friendly for small corpora) and doubles while the doubled
    # table plus the old one fit the budget; past that size it spills instead.
    max_cap = max(1024, int(budget / _BYTES_PER_SLOT))
    cap = min(max_cap, 1 << 20)
    scale = math.lcm(*range(1, window + 1)) if weighting == "harmonic" else (window if weighting == "linear" else 1)
    inv_scale = 1.0 / scale
    max_used = int(cap * _LOAD)
    if int(max_cap * _LOAD) < 4 * per_token:
        raise PtmError(f"memory_mb={memory_mb} is too small for window {window}; use at least 1 MB")

    t0 = time.perf_counter()
    keys = np.full(cap, -1, dtype=np.int64)
    vals = np.zeros(cap, dtype=np.float64)
    tmp_owned = None
    if out_dir is None:
        tmp_owned = Path(tempfile.mkdtemp(prefix="ptmkit-cooc-"))
    work = Path(out_dir) if out_dir is not None else tmp_owned
    runs: list[Path] = []
    sent, pos, used = 0, 0, 0
    n_sent = offsets.shape[0] - 1
    bar = None
    if progress:
        bar = progress_display(int(ids.shape[0]), desc="co-occurrence", unit="tok", unit_scale=True)
    while True:
        sent, pos, used = _fill(ids, offsets, sent, pos, keys, vals, used, max_used, window,
                                WEIGHTINGS[weighting], symmetric, vocab_size, scale)
        if bar is not None:
            bar.n = int(ids.shape[0]) if sent >= n_sent else int(pos)
            bar.refresh()
        if sent >= n_sent and not runs:
            break  # everything fitted: no disk
        if sent < n_sent and 2 * cap <= max_cap and 3 * cap * 16 <= budget:
            new_keys = np.full(2 * cap, -1, dtype=np.int64)
            new_vals = np.zeros(2 * cap, dtype=np.float64)
            _rehash(keys, vals, new_keys, new_vals)
            keys, vals = new_keys, new_vals
            del new_keys, new_vals
            cap = 2 * cap
            max_used = int(cap * _LOAD)
            continue
        n = _compact(keys, vals)
        work.mkdir(parents=True, exist_ok=True)
        run_path = work / f"run-{len(runs):04d}.npy"
        np.save(run_path, _sorted_records(keys, vals, n, vocab_size))  # runs keep scaled counts
        runs.append(run_path)
        keys.fill(-1)
        used = 0
        if sent >= n_sent:
            break
    if bar is not None:
        bar.close()

    if not runs:
        n = _compact(keys, vals)
        records = _sorted_records(keys, vals, n, vocab_size, inv_scale)
        del keys, vals
    else:
        del keys, vals  # free the table before merging
        out_path = work / "cooccurrence.bin"
        nnz = merge_runs(runs, out_path, vocab_size, budget, inv_scale)
        for r in runs:
            r.unlink()
        (work / "cooccurrence.json").write_text(json.dumps({"nnz": nnz, "vocab_size": vocab_size}))
        records = np.memmap(out_path, dtype=RECORD, mode="r", shape=(nnz,)) if nnz else np.empty(0, RECORD)
    seconds = time.perf_counter() - t0
    if tmp_owned is not None and not runs:
        shutil.rmtree(tmp_owned, ignore_errors=True)
    stats = {
        "tokens": int(ids.shape[0]),
        "pairs": int(records.shape[0]),
        "runs": len(runs),
        "count_seconds": seconds,
        "count_words_per_s": ids.shape[0] / max(seconds, 1e-9),
        "table_slots": cap,
    }
    return Cooccurrence(records=records, vocab_size=vocab_size, stats=stats)
