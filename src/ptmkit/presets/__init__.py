"""Named presets: model size + objective + tokenizer + training defaults, as YAML files.

``load_preset("bert-base")`` returns the preset as a plain nested dict with the sections
``model`` (``encoder`` names a registered encoder), ``objective``, ``tokenizer`` and ``train``;
``ptm pretrain`` applies ``key=value`` overrides to it and :mod:`ptmkit.build` builds each
section's config.  A path to a ``.yaml`` file of the same layout is accepted too.

A preset may inherit: ``base: bert-tiny`` starts from that preset and the file states only what
differs.  Sections merge key by key, except that a section naming another component
(``objective.name``, ``model.encoder``) replaces the base's section, whose keys belong to the
other component.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ptmkit.errors import PtmError, suggest

SECTIONS = ("model", "objective", "tokenizer", "train")
# A vision–language preset adds these (the ``vision`` section marks it; see ptmkit.vision.build).
VISION_SECTIONS = ("vision", "augment", "text", "data")
# The key that names a section's component: when it changes, the base's section does not carry over.
_COMPONENT_KEY = {"model": "encoder", "objective": "name", "vision": "encoder"}


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


def _merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) for k, v in base.items()}
    for section, values in child.items():
        key = _COMPONENT_KEY.get(section)
        own = out.get(section, {})
        if key is not None and key in values and own.get(key, values[key]) != values[key]:
            own = {}
        out[section] = {**own, **values}
    return out


def _read(text: str, where: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PtmError(f"preset {where} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PtmError(f"preset {where} must be a mapping with the sections {', '.join(SECTIONS)}")
    base_name = data.pop("base", None)
    if base_name is not None:
        if base_name in seen:
            raise PtmError(f"preset {where}: 'base: {base_name}' makes a cycle ({' -> '.join(seen + (base_name,))})")
        base = _raw(str(base_name), seen + (str(base_name),))
        data = _merge(base, {k: dict(v or {}) if isinstance(v, dict) else v for k, v in data.items()})
    allowed = SECTIONS + VISION_SECTIONS if "vision" in data else SECTIONS
    for key in data:
        if key not in allowed:
            hint = " (the sections vision, augment, text and data belong to a vision–language preset, which has a vision section)" \
                if key in VISION_SECTIONS else ""
            raise PtmError(f"preset {where}: unknown section {key!r}{suggest(str(key), allowed)}; sections: "
                           f"{', '.join(allowed)}{hint}")
    for key in allowed:
        if not isinstance(data.get(key) or {}, dict):
            raise PtmError(f"preset {where}: section {key!r} must be a mapping")
        data[key] = dict(data.get(key) or {})
    if "name" not in data["objective"]:
        raise PtmError(f"preset {where}: the objective section needs a 'name' (e.g. mlm, clm)")
    return data


def load_preset(name: str) -> dict[str, Any]:
    """The preset ``name`` (or a YAML file path) as a nested dict, its ``base`` chain merged in;
    unknown names suggest the nearest."""
    return _raw(name, (name,))


def _raw(name: str, seen: tuple[str, ...]) -> dict[str, Any]:
    names = list_presets()
    bundled = resources.files(__name__).joinpath(f"{name}.yaml")
    if name not in names and bundled.is_file():
        raise PtmError(f"{name!r} is a static word-vector preset; train it with `ptm pretrain {name} --data FILE -o DIR`")
    if name in names:
        text = resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
        return _read(text, repr(name), seen)
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        if not path.is_file():
            raise PtmError(f"preset file {str(path)!r} does not exist")
        return _read(path.read_text(encoding="utf-8"), str(path), seen)
    raise PtmError(f"unknown preset {name!r}{suggest(name, names)}; presets: {', '.join(names)}")


__all__ = ["list_presets", "load_preset"]
