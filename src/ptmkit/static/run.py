"""Entry point used by ``ptm pretrain`` for the static-embedding models (word2vec, fastText, ...).

``run_static("word2vec-cbow-hs", ["corpus.txt"], "vec/cbow", {"dim": 50})`` resolves the model
and its preset config (:mod:`ptmkit.static.presets`), applies the overrides (the model config's
keys; unknown keys and values of the wrong type raise :class:`PtmError`), trains into a scratch
directory (:func:`ptmkit.outputs.staged`) published into ``out_dir`` only when training succeeded,
so an interrupted or failed run never leaves a half-written ``out_dir`` and never touches an old one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ptmkit import outputs, registry
from ptmkit.config import from_dict, parse_value
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text, read_record
from ptmkit.runcard import write_run_card
from ptmkit.static.presets import list_static_presets, resolve_static, static_models

Overrides = Mapping[str, Any] | Sequence[str] | None


def parse_overrides(overrides: Overrides) -> dict[str, Any]:
    """``{"dim": 50}`` or ``["dim=50", "config.model=cbow"]`` -> ``{"dim": 50, "model": "cbow"}``.

    String values are parsed as YAML scalars (``5`` -> int, ``1e-3`` -> float, ``true`` -> bool);
    a ``config.`` prefix is accepted (the section name of static presets).
    """
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        items = [(str(k), v) for k, v in overrides.items()]
    else:
        items = []
        for item in overrides:
            if "=" not in item:
                raise PtmError(f"override {item!r} is not of the form key=value (e.g. dim=100 or config.window=5)")
            key, _, raw = item.partition("=")
            items.append((key.strip(), parse_value(raw)))
    out: dict[str, Any] = {}
    for key, value in items:
        if key.startswith("config."):
            key = key[len("config.") :]
        if not key or "." in key:
            raise PtmError(f"static models take plain config keys (e.g. dim=100 or config.dim=100), got {key!r}")
        out[key] = value
    return out


def _allowed_types(hint: Any) -> tuple[type, ...]:
    """The plain types a field annotated ``hint`` accepts (``int | None`` -> (int, NoneType))."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _allowed_types(arg))
    return (hint,) if isinstance(hint, type) else ()


def check_types(cls: type, values: dict[str, Any], where: str = "") -> dict[str, Any]:
    """Coerce ints given for float fields; raise PtmError for a value of the wrong type
    (``dim=abc``, ``epochs=2.5``).  Unknown keys are left to :func:`ptmkit.config.from_dict`."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    out = dict(values)
    for key, value in values.items():
        if key not in names:
            continue
        allowed = _allowed_types(hints.get(key))
        if not allowed or object in allowed:
            continue
        if float in allowed and isinstance(value, int) and not isinstance(value, bool):
            out[key] = float(value)
            continue
        ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        if not ok:
            kinds = " or ".join("none" if t is type(None) else t.__name__ for t in allowed)
            raise PtmError(f"{where + '.' if where else ''}{key}={value!r}: {cls.__name__}.{key} must be {kinds}")
    return out


def resolve_config(name: str | Path | dict, overrides: Overrides = None) -> tuple[str, Any]:
    """``(model name, built config)`` of a static model or preset with ``overrides`` applied."""
    resolved = resolve_static(name)
    if resolved is None:
        models = static_models()
        raise PtmError(f"{name!r} is not a static model or static preset; models: {', '.join(models)}; "
                       f"presets: {', '.join(_static_preset_names())}")  # fmt: skip
    model, base = resolved
    entry = registry.get("static", model)
    values = check_types(entry.config_class, {**base, **parse_overrides(overrides)})
    return model, from_dict(entry.config_class, values)


def _static_preset_names() -> list[str]:
    return list_static_presets()


def _check_data(data_files: Sequence[str | os.PathLike]) -> list[Path]:
    files = [Path(f) for f in data_files]
    if not files:
        raise PtmError("no training data given: pass text file(s), one sentence per line")
    for f in files:
        if f.is_dir():
            raise PtmError(f"{f} is a directory; static models read text files (one sentence per line)")
        if not f.is_file():
            raise PtmError(f"training data not found: {f}")
        if f.stat().st_size == 0:
            raise PtmError(f"training data {f} is empty")
    return files


def run_static(
    name: str | Path | dict,
    data_files: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    overrides: Overrides = None,
    progress: bool = True,
    overwrite: bool = False,
) -> Any:
    """Train static model or preset ``name`` (``"word2vec"``, ``"word2vec-cbow-hs"``, a preset YAML
    path ...) on ``data_files`` (text, one sentence per line) into ``out_dir``.

    ``overrides``: config keys of the model's ``config_class`` as a dict or ``key=value`` strings.
    ``out_dir`` receives ``vectors.bin`` (word2vec binary), ``config.json`` (the model's config and
    training statistics, with ``"static": MODEL`` and ``"preset"`` added) and ``vocab.txt`` (plus the
    model's own files, e.g. fastText's subword matrix).  ``out_dir`` must be new, empty or hold
    static vectors from ptm (replaced only with ``overwrite``, and only after the new training
    succeeded; other files there are kept); data files inside ``out_dir`` are refused.
    Returns what the model's ``train`` returns (``WordVectors``, ``FastTextModel``, ...).
    """
    model, cfg = resolve_config(name, overrides)  # bad keys fail before any slow work
    entry = registry.get("static", model)
    files = _check_data(data_files)
    preset = [name] if isinstance(name, (str, os.PathLike)) and Path(name).is_file() else []
    # The vectors are trained into a scratch directory and published only when complete; with
    # overwrite, ptm's previous files in out_dir are replaced then, the user's other files stay.
    with outputs.staged(out_dir, "vectors", inputs=[*files, *preset], overwrite=overwrite) as staging:
        result = entry.train([str(f) for f in files], cfg, out=staging, progress=progress)
        if not (staging / "vectors.bin").is_file():
            raise RuntimeError(f"static model {model!r} wrote no vectors.bin")
        _record_origin(staging / "config.json", model, name)
        write_run_card(staging, data=files, kind="vectors", name=Path(out_dir).name)
    return result


def _record_origin(config_file: Path, model: str, name: Any) -> None:
    """Add ``"static": MODEL`` (and ``"preset"``) to the model's config.json: word2vec's and fastText's
    own ``model`` key names the architecture (skipgram/cbow), not the model family."""
    config = read_record(config_file, "the model was just written: write it again", missing_ok=True) or {}
    origin = {"static": model}
    if not isinstance(name, dict) and str(name) != model:
        origin["preset"] = str(name)
    atomic_write_text(config_file, json.dumps({**origin, **config}, indent=2) + "\n")


def vectors_header(out_dir: str | os.PathLike) -> tuple[int, int]:
    """``(n_words, dim)`` read from the header line of ``out_dir/vectors.bin``."""
    with open(Path(out_dir) / "vectors.bin", "rb") as f:
        n, dim = f.readline().split()[:2]
    return int(n), int(dim)


__all__ = ["check_types", "parse_overrides", "resolve_config", "run_static", "vectors_header"]
