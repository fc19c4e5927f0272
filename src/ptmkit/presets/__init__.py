"""Named presets: model size + objective + tokenizer + training defaults, as YAML files.

``load_preset("bert-base")`` returns the preset as a plain nested dict with the sections
``model``, ``objective``, ``tokenizer`` and ``train``; ``ptm pretrain`` applies ``key=value``
overrides to it and builds each section's config with ``ptmkit.config.from_dict``.
A path to a ``.yaml`` file of the same layout is accepted too.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ptmkit.errors import PtmError, suggest

SECTIONS = ("model", "objective", "tokenizer", "train")


def _is_static(text: str) -> bool:
    """Static-vector presets (word2vec, ...) have a top-level ``static:`` key; see ptmkit.static.presets."""
    return any(line.startswith("static:") for line in text.splitlines())


def list_presets() -> list[str]:
    """Sorted names of the bundled Transformer presets (static-vector presets are listed by
    :func:`ptmkit.static.presets.list_static_presets`)."""
    root = resources.files(__name__)
    return sorted(
        p.name[: -len(".yaml")]
        for p in root.iterdir()
        if p.name.endswith(".yaml") and not _is_static(p.read_text(encoding="utf-8"))
    )


def _read(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PtmError(f"preset {where} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PtmError(f"preset {where} must be a mapping with the sections {', '.join(SECTIONS)}")
    for key in data:
        if key not in SECTIONS:
            raise PtmError(f"preset {where}: unknown section {key!r}{suggest(str(key), SECTIONS)}; sections: {', '.join(SECTIONS)}")
    for key in SECTIONS:
        if not isinstance(data.get(key) or {}, dict):
            raise PtmError(f"preset {where}: section {key!r} must be a mapping")
        data[key] = dict(data.get(key) or {})
    if "name" not in data["objective"]:
        raise PtmError(f"preset {where}: the objective section needs a 'name' (e.g. mlm, clm)")
    return data


def load_preset(name: str) -> dict[str, Any]:
    """The preset ``name`` (or a YAML file path) as a nested dict; unknown names suggest the nearest."""
    names = list_presets()
    bundled = resources.files(__name__).joinpath(f"{name}.yaml")
    if name not in names and bundled.is_file():
        raise PtmError(f"{name!r} is a static word-vector preset; train it with `ptm pretrain {name} --data FILE -o DIR`")
    if name in names:
        text = resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
        return _read(text, repr(name))
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        if not path.is_file():
            raise PtmError(f"preset file {str(path)!r} does not exist")
        return _read(path.read_text(encoding="utf-8"), str(path))
    raise PtmError(f"unknown preset {name!r}{suggest(name, names)}; presets: {', '.join(names)}")


__all__ = ["list_presets", "load_preset"]
