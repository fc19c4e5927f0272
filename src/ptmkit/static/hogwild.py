"""The thread pool of the Hogwild trainers (word2vec's and fastText's numba kernels).

The corpus is cut at sentence boundaries into chunks of about ``chunk_words`` words
(:func:`chunk_starts`); ``workers`` Python threads pull (epoch, chunk) jobs in order from one
shared queue and run a compiled kernel on each, which releases the GIL and updates the shared
matrices without locks (:func:`run_epochs`).  A chunk's random stream depends only on
(seed, epoch, chunk), so which thread trains it does not matter.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time

import numpy as np

from ptmkit.static.vocab import IdCorpus
from ptmkit.train.progress import progress as progress_display

log = logging.getLogger(__name__)


def chunk_starts(sentences: np.ndarray, chunk_words: int) -> np.ndarray:
    """int64 [C+1] sentence indices cutting the corpus into chunks of about ``chunk_words`` words."""
    n_words = int(sentences[-1])
    n_sent = sentences.shape[0] - 1
    targets = np.arange(0, n_words, chunk_words, dtype=np.int64)
    starts = np.unique(np.searchsorted(sentences[:-1], targets, side="left"))
    starts = starts[starts < n_sent]
    if starts.size == 0 or starts[0] != 0:
        starts = np.concatenate([[0], starts])
    return np.concatenate([starts, [n_sent]]).astype(np.int64)


def n_threads(workers: int) -> int:
    """Training threads: ``workers``, or (0) one per core."""
    return max(1, workers if workers > 0 else (os.cpu_count() or 1))


def run_epochs(step, corpus: IdCorpus, cfg, progress: bool, desc: str) -> dict:
    """Train every chunk of every epoch with ``cfg.workers`` threads; returns timing stats.

    ``step(epoch, chunk, first_sentence, end_sentence, alpha0, min_alpha, words_before, words_all)``
    trains one chunk (a compiled kernel that releases the GIL) and returns the words it kept.
    The threads pull (epoch, chunk) jobs in order from one shared queue, as gensim's workers do:
    a thread delayed by other load on the machine just takes fewer chunks, nobody waits for it.
    """
    threads = n_threads(cfg.workers)
    starts = chunk_starts(corpus.sentences, cfg.chunk_words)
    n_chunks = starts.shape[0] - 1
    chunk_words = np.diff(corpus.sentences[starts])
    words_all = float(corpus.n_words) * cfg.epochs
    jobs = itertools.product(range(cfg.epochs), range(n_chunks))  # (epoch, chunk), epoch-major
    lock = threading.Lock()
    done = {"words": 0, "kept": 0}
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.is_set():
                with lock:
                    job = next(jobs, None)
                if job is None:
                    return
                epoch, c = job
                kept = step(epoch, c, starts[c], starts[c + 1], cfg.start_alpha, cfg.end_alpha,
                            float(epoch * corpus.n_words), words_all)  # fmt: skip
                with lock:
                    done["words"] += int(chunk_words[c])
                    done["kept"] += int(kept)
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)
            stop.set()

    t0 = time.perf_counter()
    bar = progress_display(int(words_all), desc=desc, unit="w", unit_scale=True, disable=not progress)
    pool = [threading.Thread(target=worker, name=f"{desc} {i}", daemon=True) for i in range(threads)]
    shown = 0
    try:
        for t in pool:
            t.start()
        for t in pool:
            while t.is_alive():
                t.join(timeout=0.25)
                if progress:  # the bar is drawn from this thread only
                    now = done["words"]
                    bar.update(now - shown)
                    shown = now
                    frac = now / words_all
                    bar.set_postfix(alpha=f"{cfg.start_alpha - (cfg.start_alpha - cfg.end_alpha) * frac:.5f}", refresh=False)
    finally:  # on an error or Ctrl-C the workers stop after their current chunk
        stop.set()
        for t in pool:
            t.join()
        bar.close()
    if errors:
        raise errors[0]
    seconds = time.perf_counter() - t0
    stats = {
        "words": int(words_all),
        "effective_words": done["kept"],
        "seconds": seconds,
        "words_per_second": words_all / max(seconds, 1e-9),
        "threads": threads,
    }
    log.info("%s: %d words in %.1f s (%.0f words/s)", desc, stats["words"], seconds, stats["words_per_second"])
    return stats


__all__ = ["chunk_starts", "n_threads", "run_epochs"]
