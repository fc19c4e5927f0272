"""Registry of named components.

Components register themselves with a decorator in their own file::

    @register("objective", "mlm")
    class MaskedLM(Objective): ...

``get("objective", "mlm")`` imports every module of the package once (so adding a
component never means editing a dict elsewhere) and returns the registered object.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict
from typing import Any, Callable

from ptmkit.errors import PtmError, suggest

_REGISTRY: dict[str, dict[str, Any]] = defaultdict(dict)
_imported = False

# Sub-packages whose modules register components.
_PACKAGES = ("encoders", "objectives", "static", "tasks", "data.sources", "interop")


def register(kind: str, name: str) -> Callable[[Any], Any]:
    """Decorator: register ``obj`` under ``(kind, name)``."""

    def deco(obj: Any) -> Any:
        old = _REGISTRY[kind].get(name)
        if old is not None and old is not obj and getattr(old, "__qualname__", None) != getattr(obj, "__qualname__", None):
            raise RuntimeError(f"{kind} {name!r} registered twice ({old} and {obj})")
        _REGISTRY[kind][name] = obj
        return obj

    return deco


def _import_all() -> None:
    global _imported
    if _imported:
        return
    _imported = True
    for sub in _PACKAGES:
        try:
            pkg = importlib.import_module(f"ptmkit.{sub}")
        except ModuleNotFoundError:
            continue
        for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{pkg.__name__}."):
            importlib.import_module(info.name)


def get(kind: str, name: str) -> Any:
    """Return the component registered as ``(kind, name)``; unknown names get a suggestion."""
    _import_all()
    table = _REGISTRY.get(kind, {})
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise PtmError(f"unknown {kind} {name!r}{suggest(name, table)}; known: {known}")
    return table[name]


def names(kind: str) -> list[str]:
    """Sorted names registered under ``kind``."""
    _import_all()
    return sorted(_REGISTRY.get(kind, {}))
