"""Frozen dataclass configs, built from dicts and ``key=value`` overrides.

Each component defines its own ``@dataclass(frozen=True)`` config in its own file.
:func:`from_dict` builds one from a plain dict (a preset section or ``config.json``)
and rejects unknown keys by naming the nearest valid one.  :func:`apply_overrides`
merges CLI overrides such as ``model.hidden_size=256 train.lr=3e-4`` into a nested
dict, parsing values as YAML scalars.  No config holds a NaN or an infinity: :func:`from_dict`
refuses one in any float field, naming the key (:func:`check_finite` checks a config built
directly).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import typing
from typing import Any, TypeVar

import yaml

from ptmkit.errors import PtmError, suggest

T = TypeVar("T")


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def from_dict(cls: type[T], data: dict[str, Any] | None, where: str = "") -> T:
    """Build ``cls`` from ``data``; unknown keys raise :class:`PtmError` with a suggestion.

    Nested dataclass fields are built recursively; tuples given as lists are converted.
    """
    data = dict(data or {})
    names = field_names(cls)
    prefix = f"{where}." if where else ""
    for key in data:
        if key not in names:
            raise PtmError(
                f"unknown config key {prefix}{key!r}{suggest(key, names)}; "
                f"valid keys of {cls.__name__}: {', '.join(names)}"
            )
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        hint = hints.get(key)
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            value = from_dict(hint, value, where=f"{prefix}{key}")
        elif isinstance(value, list) and typing.get_origin(hint) is tuple:
            value = tuple(value)
        _refuse_nonfinite(f"{prefix}{key}", value)  # before the class's own checks, which NaN slips through
        kwargs[key] = value
    try:
        cfg = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise PtmError(f"invalid {cls.__name__} config{(' ' + where) if where else ''}: {exc}") from exc
    check_finite(cfg, where)  # a value the class converted itself ("1.5" -> 1.5, "nan" -> nan)
    return cfg


def _is_nonfinite(value: Any) -> bool:
    """A float (or a tuple / list holding one) that is NaN or infinite; ints and bools never are."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (tuple, list)):
        return any(_is_nonfinite(v) for v in value)
    return False


def _refuse_nonfinite(key: str, value: Any) -> None:
    if _is_nonfinite(value):
        what = "is not a finite number" if isinstance(value, float) else "holds a number that is not finite"
        raise PtmError(
            f"{key}={value!r} {what}; every hyper-parameter must be finite (a NaN or an infinity would "
            f"train a model of NaNs or fail mid-run)"
        )


def check_finite(cfg: Any, where: str = "") -> None:
    """Raise :class:`PtmError` naming the first field of the config dataclass ``cfg`` (nested
    configs included) that holds a NaN or an infinity, alone or inside a tuple."""
    prefix = f"{where}." if where else ""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_finite(value, f"{prefix}{f.name}")
        else:
            _refuse_nonfinite(f"{prefix}{f.name}", value)


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain-dict (JSON-ready) form of a config dataclass."""
    return dataclasses.asdict(cfg)


def parse_value(text: str) -> Any:
    """Parse an override value the way YAML would (``3e-4`` -> float, ``true`` -> bool)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and text.strip().lower() in {"none", "null"}:
        return None
    # YAML 1.1 reads "3e-4" as a string; accept the usual float spellings.
    if isinstance(value, str):
        try:
            return float(text)
        except ValueError:
            return value
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of nested ``data`` with ``a.b=value`` overrides applied.

    The first path component must already exist (``model``, ``train``, ...); deeper keys
    are checked later by :func:`from_dict` against the component's dataclass.  A bare key that
    exactly one section holds is that section's (``max_steps=5`` is ``train.max_steps=5``); one
    that several hold is refused, naming them.
    """
    out = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise PtmError(f"override {item!r} is not of the form key=value (e.g. train.lr=3e-4)")
        key, _, raw = item.partition("=")
        parts = key.strip().split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            if part not in node or not isinstance(node[part], dict):
                if i == 0:
                    raise PtmError(f"unknown config section {part!r}{suggest(part, node)}; sections: {', '.join(node)}")
                node[part] = {}
            node = node[part]
        if len(parts) == 1 and parts[0] not in node:
            holders = [name for name, section in node.items() if isinstance(section, dict) and parts[0] in section]
            if len(holders) != 1:  # a bare key that one section holds means that section's (max_steps=5)
                where = f"; it is {' and '.join(f'{h}.{parts[0]}' for h in holders)}: say which" if holders else ""
                known = [f"{n}.{k}" for n, section in node.items() if isinstance(section, dict) for k in section]
                close = difflib.get_close_matches(parts[0], [k.split(".", 1)[1] for k in known], n=1, cutoff=0.5)
                full = next((k for k in known if close and k.endswith("." + close[0])), None)
                hint = suggest(parts[0], node) or (f" (did you mean {full!r}?)" if full else "")
                raise PtmError(f"unknown config key {parts[0]!r}{hint}{where}; use SECTION.KEY=VALUE, "
                               f"sections: {', '.join(node)}")
            node = node[holders[0]]
        node[parts[-1]] = parse_value(raw)
    return out
