"""Static-model presets: which first-generation model to train, with which config.

A static preset is a YAML file in ``ptmkit/presets/`` (next to the Transformer presets) or
anywhere on disk, with two sections::

    static: word2vec          # a model registered with @register("static", NAME)
    config:                   # keys of that model's config_class
      model: cbow
      loss: hs

:func:`resolve_static` turns what a user types after ``ptm pretrain`` into ``(model, config)``:
a registered model name (``word2vec``, ``fasttext``, ``glove``, ``svd-ppmi``, ``nnlm``) gives
that model with its defaults, a bundled static preset (``word2vec-sg-ns``, ``word2vec-cbow-hs``,
...) or a YAML file with a ``static`` section gives the preset's model and config; anything else
(a Transformer preset such as ``bert-tiny``) gives ``None``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ptmkit import registry
from ptmkit.errors import PtmError, suggest

SECTIONS = ("static", "config")
_PRESETS_PACKAGE = "ptmkit.presets"


def _parse(text: str, where: str) -> dict[str, Any] | None:
    """The YAML mapping of ``text`` if it is a static preset (has a ``static`` key), else None."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PtmError(f"preset {where} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or "static" not in data:
        return None
    return data


def _bundled() -> dict[str, dict[str, Any]]:
    """Bundled static presets: name -> parsed YAML (the Transformer presets are skipped)."""
    out = {}
    for entry in resources.files(_PRESETS_PACKAGE).iterdir():
        if entry.name.endswith(".yaml"):
            data = _parse(entry.read_text(encoding="utf-8"), repr(entry.name))
            if data is not None:
                out[entry.name[: -len(".yaml")]] = data
    return out


def list_static_presets() -> list[str]:
    """Sorted names of the bundled static presets (``word2vec-sg-ns``, ...)."""
    return sorted(_bundled())


def static_models() -> list[str]:
    """Sorted names of the registered static models (``fasttext``, ``glove``, ``word2vec``, ...)."""
    return registry.names("static")


def _check(data: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    for key in data:
        if key not in SECTIONS:
            raise PtmError(f"static preset {where}: unknown section {key!r}{suggest(str(key), SECTIONS)}; "
                           f"sections: {', '.join(SECTIONS)}")  # fmt: skip
    name = data["static"]
    models = static_models()
    if name not in models:
        raise PtmError(f"static preset {where}: unknown static model {name!r}{suggest(str(name), models)}; "
                       f"models: {', '.join(models)}")  # fmt: skip
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise PtmError(f"static preset {where}: section 'config' must be a mapping of {name}'s config keys")
    return name, dict(config)


def resolve_static(preset: str | Path | dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``(model name, base config dict)`` when ``preset`` names a static model, a static preset or a
    static preset file (or is such a dict); ``None`` when it is something else (a Transformer preset)."""
    if isinstance(preset, dict):
        return _check(preset, "(dict)") if "static" in preset else None
    text = str(preset)
    bundled = _bundled()
    if text in bundled:
        return _check(bundled[text], repr(text))
    path = Path(text)
    if path.suffix in {".yaml", ".yml"} and path.is_file():
        data = _parse(path.read_text(encoding="utf-8"), str(path))
        return None if data is None else _check(data, str(path))
    if text in static_models():
        return text, {}
    return None


__all__ = ["list_static_presets", "resolve_static", "static_models"]
