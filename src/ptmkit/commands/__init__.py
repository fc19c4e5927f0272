"""Sub-commands of the ``ptm`` CLI, one module each.

Each module defines ``register(subparsers)`` which adds its parser and sets
``func=callable(args) -> int | None`` as the default.  Modules are listed in
:data:`ptmkit.cli.COMMANDS` in the order ``ptm --help`` shows them.
"""

from __future__ import annotations

import argparse
import importlib
import re
import textwrap

from ptmkit import registry

HELP_WIDTH = 100  # help lines are wrapped at this width, whatever the terminal


def _prose(line: str) -> bool:
    """A line of running text: not blank, not a list item, and no column gap (an option or table row)."""
    body = line.strip()
    return bool(body) and not body.startswith(("-", "*", "$")) and "   " not in body


def _paragraphs(lines: list[str]) -> list[list[str]]:
    """Runs of prose lines with one indentation (each a paragraph); every other line alone."""
    runs: list[list[str]] = []
    for line in lines:
        indent = len(line) - len(line.lstrip())
        last = runs[-1] if runs else None
        if (last and _prose(line) and _prose(last[-1])
                and len(last[-1]) - len(last[-1].lstrip()) == indent):
            last.append(line)
        else:
            runs.append([line])
    return runs


def wrap_help(text: str, width: int = HELP_WIDTH) -> str:
    """``text`` with every line longer than ``width`` wrapped.  A paragraph of running text that
    holds such a line (a description's, once registered names are expanded into it) is filled again
    as a whole, so no short remnant line is left inside it; any other long line (an option's help,
    an expanded name list) is wrapped alone, its continuation lines indented as the line was."""
    out = []
    for run in _paragraphs(text.splitlines()):
        if all(len(line) <= width for line in run):
            out.extend(run)
            continue
        if len(run) > 1:
            indent = run[0][: len(run[0]) - len(run[0].lstrip())]
            out.extend(textwrap.wrap(" ".join(line.strip() for line in run), width, initial_indent=indent,
                                     subsequent_indent=indent, break_on_hyphens=False, break_long_words=False))
            continue
        line = run[0]
        indent = line[: len(line) - len(line.lstrip())]
        hang = indent + " " * (len(re.match(r"\s*(\S+\s+)?", line).group(0)) - len(indent)
                               if re.match(r"\s*-", line) else 0)
        out.extend(textwrap.wrap(line, width, initial_indent="", subsequent_indent=hang if len(hang) < width // 2 else indent,
                                 break_on_hyphens=False, break_long_words=False) or [line])
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


class WrappedHelpParser(argparse.ArgumentParser):
    """A parser whose help is wrapped at :data:`HELP_WIDTH` (argparse keeps a raw description's
    lines as written, and names expanded into a help text come after its wrapping)."""

    def format_help(self) -> str:
        return wrap_help(super().format_help())


class IntermixedParser(WrappedHelpParser):
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


# Lists a help text may name that are derived from the registered components rather than
# registered themselves, by the function that computes them (imported only when a help text asks).
DERIVED_NAMES = {
    # every export format some HF family writes / HF model_type some family imports, read from the
    # families' source files (instantiating them would import torch and transformers)
    "hf_format": ("ptmkit.commands", "hf_formats"),
    "hf_model_type": ("ptmkit.commands", "hf_model_types"),
    "task": ("ptmkit.data.tasks", "builtin_tasks"),  # the tasks the data recipes declare
    "static_preset": ("ptmkit.static.presets", "list_static_presets"),  # the bundled static presets
}


def hf_formats() -> list[str]:
    return registry.declared_attribute("hf_family", "formats")


def hf_model_types() -> list[str]:
    return registry.declared_attribute("hf_family", "model_types")


def help_names(kind: str) -> list[str]:
    """The names ``{names:KIND}`` expands to: those registered under ``KIND`` (:mod:`ptmkit.registry`)
    or, for the kinds of :data:`DERIVED_NAMES`, the list their function gives."""
    if kind in DERIVED_NAMES:
        module, function = DERIVED_NAMES[kind]
        return list(dict.fromkeys(getattr(importlib.import_module(module), function)()))
    return registry.declared(kind)  # read from the source files: no component is imported


class HelpFromRegistry(WrappedHelpParser):
    """Expands ``{names:KIND}`` in the help text to the names registered under ``KIND`` (task
    types, HF families, encoders, objectives, ...; :func:`help_names`) when the help is printed:
    the texts stay true as components are added, and ``ptm`` starts without importing them for
    other commands.  Sub-commands opt in with ``p.__class__ = HelpFromRegistry``."""

    def format_help(self) -> str:
        text = argparse.ArgumentParser.format_help(self)
        if "{names:" in text:
            text = re.sub(r"\{names:([a-z_]+)\}", lambda m: ", ".join(help_names(m.group(1))), text)
        return wrap_help(text)


class RegistryHelpParser(HelpFromRegistry, IntermixedParser):
    """:class:`HelpFromRegistry` for a parser that also takes ``KEY=VALUE`` positionals anywhere."""


VERBOSITY = (
    (("-q", "--quiet"), "quiet", "warnings and errors only: no progress displays, no info logging"),
    (("-v", "--verbose"), "verbose", "debug logging"),
    (("--private",), "private", "make what this command writes readable by you alone (files 600, directories 700; "
                                "PTMKIT_PRIVATE=1 does the same); by default your umask decides, as for any tool"),
)


def verbosity_options(subparsers: argparse._SubParsersAction) -> None:
    """``--quiet``, ``--verbose`` and ``--private`` after any sub-command as before it (``ptm CMD
    --quiet`` is ``ptm --quiet CMD``): added to every sub-command's parser, nested ones included, without a
    default of their own, so that a sub-command never resets what was given before it.  A
    sub-command's own option of the same name (``ptm finetune --quiet``) becomes the shared one."""
    for parser in _parsers(subparsers):
        for flags, dest, text in VERBOSITY:
            actions = parser._option_string_actions
            own = [actions[f] for f in flags if f in actions and actions[f].dest == dest]
            for action in own:
                action.default, action.help = argparse.SUPPRESS, text
            free = [f for f in flags if f not in actions]
            if not own and any(f.startswith("--") for f in free):
                parser.add_argument(*free, dest=dest, action="store_true", default=argparse.SUPPRESS, help=text)


def _parsers(subparsers: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    found = []
    for parser in dict.fromkeys(subparsers.choices.values()):  # aliases share a parser
        found.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.extend(_parsers(action))
    return found
