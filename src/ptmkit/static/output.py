"""What every static model writes: the output directory check and the run files.

A model's ``train(data, cfg, out, progress)`` calls :func:`check_out_dir` before any slow work
and :func:`save_run` at the end (or both through :func:`train_and_save`).  ``save_run`` writes
``vectors.bin`` (word2vec binary), ``vocab.txt`` (word and count per line) and ``config.json``
(the model's config, with its training statistics under ``"stats"``); vectors holding a NaN or an
infinity (a diverged run) are refused by :func:`require_finite` and nothing is written.  ``ptm pretrain``
(:mod:`ptmkit.static.run`) trains into a staging directory and moves it into place afterwards.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.static.vectors import WordVectors


def check_out_dir(out: str | os.PathLike | None) -> Path | None:
    """``out`` as a Path (None stays None); refuses a file or a directory that already holds vectors."""
    if out is None:
        return None
    out = Path(out)
    if (out / "vectors.bin").exists():
        raise PtmError(f"{out} already holds trained vectors (vectors.bin); choose another output directory")
    if out.exists() and not out.is_dir():
        raise PtmError(f"output {out} exists and is not a directory")
    return out


def require_finite(vectors: np.ndarray, name_of: Callable[[int], str], config: dict, what: str = "vectors") -> None:
    """Raise :class:`PtmError` when a row of ``vectors`` (float [N, D]; ``name_of(i)`` names row i,
    e.g. ``'cat'``) holds a NaN or an infinity: training diverged, and such rows are never saved."""
    bad = ~np.isfinite(vectors).all(axis=1)  # bool [N]
    if bad.any():
        # GloVe's alpha is its weighting exponent, word2vec's and fastText's the learning rate
        rate = next((f" ({key}={config[key]:g})" for key in ("lr", "alpha") if isinstance(config.get(key), (int, float))), "")
        raise PtmError(
            f"training diverged: {int(bad.sum())} of {len(bad)} {what} hold NaN or inf (the first: "
            f"{name_of(int(np.argmax(bad)))}); nothing was saved; lower the learning rate{rate}"
        )


def save_run(out_dir: Path, wv: WordVectors, config: dict, stats: dict) -> None:
    """Write vectors.bin, vocab.txt, config.json into ``out_dir`` (each file atomically); refuse
    non-finite vectors before writing anything."""
    require_finite(wv.vectors, lambda i: repr(wv.words[i]), config)
    out_dir.mkdir(parents=True, exist_ok=True)
    wv.save(out_dir / "vectors.bin", format="word2vec-binary")
    atomic_write_text(out_dir / "config.json", json.dumps({**config, "stats": stats}, indent=2) + "\n")
    counts = wv.counts if wv.counts is not None else np.zeros(len(wv), dtype=np.int64)
    atomic_write_text(out_dir / "vocab.txt", "".join(f"{w} {int(c)}\n" for w, c in zip(wv.words, counts)))


def train_and_save(out, model: str, cfg: Any, fit: Callable[[], tuple[WordVectors, dict]]) -> WordVectors:
    """The body of a ``train`` entry whose trainer returns ``(WordVectors, stats)``: check ``out``,
    run ``fit()``, and with ``out`` save the run (config.json: ``{"model": model, **cfg}``; a
    ``"config"`` entry of the stats is left out, the config being there already)."""
    out_dir = check_out_dir(out)
    wv, stats = fit()
    if out_dir is not None:
        save_run(out_dir, wv, {"model": model, **asdict(cfg)}, {k: v for k, v in stats.items() if k != "config"})
    return wv
