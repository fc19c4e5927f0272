"""Every ``{names:KIND}`` a sub-command's help text asks for (families, formats, tasks, task types,
encoders, objectives, static models) expands to every name the registries hold, for every
sub-command, nested ones and commands added later included: the help is read through the same
parsers ``ptm`` builds, before and after expansion."""

from __future__ import annotations

import argparse
import re

from ptmkit.cli import build_parser
from ptmkit.commands import help_names


def _parsers(parser: argparse.ArgumentParser, name: str = "ptm"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_placeholder_lists_every_registered_name():
    seen = set()
    for name, parser in _parsers(build_parser()):
        template = argparse.ArgumentParser.format_help(parser)  # before expansion
        kinds = set(re.findall(r"\{names:([a-z_]+)\}", template))
        text = parser.format_help()
        assert "{names:" not in text, name
        for kind in kinds:
            names = help_names(kind)
            assert names, f"{name}: nothing registered as {kind}"
            missing = [n for n in names if n not in text]
            assert not missing, f"`{name} --help` does not name the {kind}s {missing}"
            seen.add(kind)
    # the kinds the help texts are expected to list
    assert {"task", "task_type", "hf_format", "hf_family", "hf_model_type", "encoder", "objective", "static"} <= seen
