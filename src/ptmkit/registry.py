"""Registry of named components.

Components register themselves with a decorator in their own file::

    @register("objective", "mlm")
    class MaskedLM(Objective): ...

``get("objective", "mlm")`` imports every module of the kind's package once
(:data:`KIND_PACKAGES`; adding a component never means editing a dict elsewhere) and returns
the registered object.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from ptmkit.errors import PtmError, suggest

_REGISTRY: dict[str, dict[str, Any]] = defaultdict(dict)

# The sub-package whose modules register each kind of component: looking a kind up imports that
# package only (a help text listing task names need not import torch).
KIND_PACKAGES = {"encoder": "encoders", "objective": "objectives", "static": "static", "task_type": "tasks",
                 "source": "data.sources", "hf_family": "interop", "image_encoder": "vision.encoders",
                 "vl_objective": "vision.objectives"}
_PACKAGES = tuple(dict.fromkeys(KIND_PACKAGES.values()))
_imported_packages: set[str] = set()


def register(kind: str, name: str) -> Callable[[Any], Any]:
    """Decorator: register ``obj`` under ``(kind, name)``."""

    def deco(obj: Any) -> Any:
        old = _REGISTRY[kind].get(name)
        if old is not None and old is not obj and getattr(old, "__qualname__", None) != getattr(obj, "__qualname__", None):
            raise RuntimeError(f"{kind} {name!r} registered twice ({old} and {obj})")
        _REGISTRY[kind][name] = obj
        return obj

    return deco


def _import_package(sub: str) -> None:
    if sub in _imported_packages:
        return
    _imported_packages.add(sub)
    try:
        pkg = importlib.import_module(f"ptmkit.{sub}")
    except ModuleNotFoundError:
        return
    for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{pkg.__name__}."):
        importlib.import_module(info.name)


def _import_all(kind: str | None = None) -> None:
    """Import the modules that register ``kind`` (every registering package for an unknown kind)."""
    for sub in [KIND_PACKAGES[kind]] if kind in KIND_PACKAGES else _PACKAGES:
        _import_package(sub)


def get(kind: str, name: str) -> Any:
    """Return the component registered as ``(kind, name)``; unknown names get a suggestion."""
    _import_all(kind)
    table = _REGISTRY.get(kind, {})
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise PtmError(f"unknown {kind} {name!r}{suggest(name, table)}; known: {known}")
    return table[name]


_DECLARED = re.compile(r'^@register\(\s*"([a-z_]+)"\s*,\s*"([^"]+)"\s*\)', re.MULTILINE)


def declared(kind: str) -> list[str]:
    """Sorted names under ``kind`` read from the ``@register("KIND", "NAME")`` lines of the
    package's source files, without importing them (plus those registered so far): what a help text lists, in milliseconds
    (importing every component takes seconds).  The test suite checks it against :func:`names`."""
    root = Path(__file__).parent
    found = set()
    for sub in [KIND_PACKAGES[kind]] if kind in KIND_PACKAGES else _PACKAGES:
        for path in (root / sub.replace(".", "/")).glob("*.py"):
            for k, name in _DECLARED.findall(path.read_text(encoding="utf-8")):
                if k == kind:
                    found.add(name)
    return sorted(found | set(_REGISTRY.get(kind, {})))  # and whatever registered at run time (plugins)


def declared_attribute(kind: str, attribute: str) -> list[str]:
    """The items of the literal class attribute ``attribute`` (a tuple of strings) of every class
    registered under ``kind``, in name order, read from the source files without importing them
    (the export formats of the HF families, for a help text)."""
    root = Path(__file__).parent
    found: dict[str, list[str]] = {}
    for sub in [KIND_PACKAGES[kind]] if kind in KIND_PACKAGES else _PACKAGES:
        for path in (root / sub.replace(".", "/")).glob("*.py"):
            text = path.read_text(encoding="utf-8")
            if f'@register("{kind}"' not in text:
                continue
            for node in ast.parse(text).body:
                name = _registered_name(node, kind)
                for item in getattr(node, "body", []) if name else []:
                    if (isinstance(item, ast.Assign) and len(item.targets) == 1
                            and getattr(item.targets[0], "id", None) == attribute):
                        found[name] = list(ast.literal_eval(item.value))
    return [v for name in sorted(found) for v in found[name]]


def _registered_name(node: ast.AST, kind: str) -> str | None:
    """The name of ``@register(kind, NAME)`` on a class definition, if it has one."""
    for deco in getattr(node, "decorator_list", []) if isinstance(node, ast.ClassDef) else []:
        if (isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "register" and len(deco.args) == 2
                and all(isinstance(a, ast.Constant) for a in deco.args) and deco.args[0].value == kind):
            return str(deco.args[1].value)
    return None


def names(kind: str) -> list[str]:
    """Sorted names registered under ``kind``."""
    _import_all(kind)
    return sorted(_REGISTRY.get(kind, {}))
