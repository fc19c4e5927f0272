"""Train a static word-embedding model (word2vec, fastText, GloVe, SVD-PPMI, NNLM or one of their
presets) through ``ptm pretrain`` / :func:`ptmkit.pretrain`: one pass over text files into
``OUT/vectors.bin`` (:func:`ptmkit.static.run.run_static`), then a one-line summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ptmkit.errors import PtmError
from ptmkit.fileio import read_record
from ptmkit.static.presets import resolve_static
from ptmkit.static.run import run_static, vectors_header
from ptmkit.workflows.rundir import RUN_CONFIG


def static_model(preset_or_config: str | Path | dict[str, Any]) -> str | None:
    """The static model's name when ``preset_or_config`` names a static model or static preset."""
    resolved = resolve_static(preset_or_config)
    return None if resolved is None else resolved[0]


def train_static(preset_or_config: str | Path | dict[str, Any], data: Sequence[Path], out_dir: str | Path,
                 overrides: Sequence[str] = (), overwrite: bool = False, verbose: bool = True, resume: bool = False,
                 eval_data: Any = None, init_from: Any = None) -> Path:
    """Train the static model or preset ``preset_or_config`` on the text files ``data`` into
    ``out_dir``; ``overrides`` are that model's config keys.  ``resume``, ``eval_data`` and
    ``init_from`` are pre-training options a one-pass model does not have: given, they are refused."""
    model = static_model(preset_or_config)
    if model is None:
        raise PtmError(f"{preset_or_config!r} is not a static model or static preset")
    if resume or eval_data is not None or init_from is not None:
        raise PtmError(
            f"{preset_or_config!r} is a static word-embedding model: it trains in one pass over the text "
            f"(no --resume, no --eval-data, no --init-from); evaluate its vectors with `ptm vectors evaluate`"
        )
    run_dir = Path(out_dir)
    run_static(preset_or_config, [str(p) for p in data], run_dir, list(overrides), progress=verbose, overwrite=overwrite)
    if verbose:
        _print_summary(model, run_dir)
    return run_dir


def _print_summary(model: str, run_dir: Path) -> None:
    n, dim = vectors_header(run_dir)
    config = run_dir / RUN_CONFIG
    stats = (read_record(config, "write the vectors again", missing_ok=True) or {}).get("stats", {})
    speed = stats.get("words_per_second") or stats.get("train_words_per_s")
    timing = f" in {stats['seconds']:.1f} s" if "seconds" in stats else ""
    timing += f" ({speed:,.0f} words/s)" if speed else ""
    print(f"{model}: {n:,} words x {dim} dimensions{timing}\nvectors: {run_dir / 'vectors.bin'}", flush=True)
