"""Sub-commands of the ``ptm`` CLI, one module each.

Each module defines ``register(subparsers)`` which adds its parser and sets
``func=callable(args) -> int | None`` as the default.  Modules are listed in
:data:`ptmkit.cli.COMMANDS` in the order ``ptm --help`` shows them.
"""

from __future__ import annotations

import argparse


class IntermixedParser(argparse.ArgumentParser):
    """Accepts ``KEY=VALUE`` positionals before and after the options (plain argparse stops
    filling positionals at the first option).  Sub-commands opt in with ``p.__class__ = IntermixedParser``."""

    _inside = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if self._inside:
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


class RegistryHelpParser(IntermixedParser):
    """Expands ``{names:KIND}`` in the help text to the names registered under ``KIND`` (task
    types, HF families, export formats, ...) when the help is printed: the texts stay true as
    components are added, and ``ptm`` starts without importing them for other commands."""

    def format_help(self) -> str:
        text = super().format_help()
        if "{names:" not in text:
            return text
        import re

        from ptmkit import registry

        return re.sub(r"\{names:([a-z_]+)\}", lambda m: ", ".join(registry.names(m.group(1))), text)
