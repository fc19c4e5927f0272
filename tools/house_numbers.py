#!/usr/bin/env python3
"""The house numbers of a package, read from its source with ``ast`` (nothing is imported):

* import cycles: strongly connected components of the module import graph (every ``import`` in a
  file counts, at the top or inside a function; a package's ``__init__`` importing its own
  sub-modules is not a cycle);
* function-local imports: ``import`` statements inside a ``def``, listed with the module they load;
* long files: source files over ``--max-lines`` lines, the numba kernels excepted (a file under a
  ``kernels/`` folder, or one that imports numba).

Usage: ``python tools/house_numbers.py [src/ptmkit] [--max-lines 500] [--list]``; prints one JSON
object (``--list`` adds every function-local import).  ``tests/unit/test_house.py`` holds the
package to its budget.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str] = field(default_factory=set)  # modules of the package it imports
    local_imports: list[str] = field(default_factory=list)  # "line: module" of imports inside a def
    lines: int = 0
    kernel: bool = False


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Every dotted name an import statement may load: ``from a.b import c`` gives ``a.b`` and
    ``a.b.c`` (``c`` may be a sub-module); relative imports are resolved against ``module``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def read_package(root: Path) -> dict[str, Module]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        text = path.read_text(encoding="utf-8")
        modules[name] = Module(name, path, lines=text.count("\n"),
                               kernel="kernels" in path.relative_to(root).parts[:-1] or "numba" in text)
        modules[name].tree = ast.parse(text, str(path))  # type: ignore[attr-defined]
    for mod in modules.values():
        tree = mod.tree  # type: ignore[attr-defined]
        is_package = mod.path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mod.imports |= {n for n in imported_names(node, mod.name, is_package) if n in modules and n != mod.name}
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        mod.local_imports.append(f"{node.lineno}: {ast.unparse(node)}")
        # an import in a nested def is met once per enclosing def: keep one entry per statement
        mod.local_imports = sorted(set(mod.local_imports), key=lambda s: int(s.split(":")[0]))
    return modules


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative), leaving out
    those made only of a package and its own sub-modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(modules[start].imports)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(modules[child].imports))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                component.sort()
                head = component[0]
                if len(component) > 1 and not all(m == head or m.startswith(head + ".") for m in component):
                    found.append(component)
    return found


def house_numbers(root: Path, max_lines: int = 500) -> dict:
    modules = read_package(root)
    local = {str(m.path.relative_to(root.parent)): m.local_imports for m in modules.values() if m.local_imports}
    return {
        "modules": len(modules),
        "cycles": cycles(modules),
        "local_imports": sum(len(v) for v in local.values()),
        "local_imports_by_file": local,
        "long_files": {str(m.path.relative_to(root.parent)): m.lines for m in modules.values()
                       if m.lines > max_lines and not m.kernel},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent / "src" / "ptmkit"))
    parser.add_argument("--max-lines", type=int, default=500)
    parser.add_argument("--list", action="store_true", help="list every function-local import")
    args = parser.parse_args(argv)
    numbers = house_numbers(Path(args.root), args.max_lines)
    if not args.list:
        numbers.pop("local_imports_by_file")
    print(json.dumps(numbers, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
