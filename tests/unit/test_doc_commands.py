"""Every ``ptm ...`` command the README and the documentation show is a command ptm accepts: its
sub-command exists and so does each flag (the argparse parsers of ``ptm``, nothing is run); a
complete command in a code block parses as a whole.  The same check refuses a made-up flag."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from ptmkit.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_STOPS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "<"}
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE = re.compile(r"`(ptm [^`]+)`")
PLACEHOLDER = re.compile(r"\.\.\.|[A-Z][A-Z_]*")  # COMMAND, ... in prose


def _command(text: str) -> list[str] | None:
    """``ptm ...`` (or ``... -m ptmkit.cli ...``, as under torchrun) as argv after ``ptm``, cut at the
    first shell operator; ``None`` when the text is no ptm command."""
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose: not a command
        return None
    if tokens[:1] == ["$"]:
        tokens = tokens[1:]
    if "ptmkit.cli" in tokens:
        tokens = ["ptm", *tokens[tokens.index("ptmkit.cli") + 1:]]
    if tokens[:1] != ["ptm"] or len(tokens) < 2:
        return None
    for i, tok in enumerate(tokens):
        if tok in SHELL_STOPS or tok.startswith((">", "2>")):
            return tokens[1:i]
    return tokens[1:]


def shown_commands() -> list[tuple[str, list[str], bool]]:
    """``(where, argv, complete)`` for every ptm command in README.md and docs/: the lines of code
    blocks (backslash continuations joined; complete unless they hold ``...``) and inline code."""
    found = []
    for page in PAGES:
        rel = page.relative_to(ROOT).as_posix()
        in_code, pending = False, ""
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if FENCE.match(line):
                in_code, pending = not in_code, ""
                continue
            if in_code:
                text = pending + line.strip()
                if text.endswith("\\"):
                    pending = text[:-1] + " "
                    continue
                pending = ""
                argv = _command(text)
                if argv:
                    found.append((f"{rel}:{n}", argv, "..." not in text))
            else:
                for m in INLINE.finditer(line):
                    argv = _command(m.group(1))
                    if argv:
                        found.append((f"{rel}:{n}", argv, False))
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def check(argv: list[str], complete: bool) -> None:
    """Raise AssertionError unless ``ptm ARGV`` names a sub-command whose parser knows every flag
    given (and, for a ``complete`` command, accepts the whole command line)."""
    parser = build_parser()
    top = parser
    rest = list(argv)
    while rest and rest[0].startswith("-"):  # ptm's own options (--quiet, --verbose) before the command
        assert rest[0] in top._option_string_actions, f"ptm has no option {rest[0]}"
        rest = rest[1:]
    chain = ["ptm"]
    while True:
        subs = _subparsers(parser)
        if not subs or not rest or rest[0].startswith("-"):
            break
        if PLACEHOLDER.fullmatch(rest[0]):  # prose: `ptm COMMAND --help`, `ptm --quiet ...`
            complete, rest = False, rest[1:]
            break
        assert rest[0] in subs, f"{' '.join(chain)} has no sub-command {rest[0]!r} (it has {', '.join(subs)})"
        chain.append(rest[0])
        parser, rest = subs[rest[0]], rest[1:]
    # a command with sub-commands named alone in prose (`ptm vectors --skip-nonfinite`): any of theirs
    known = set(parser._option_string_actions)
    for sub in _subparsers(parser).values():
        known |= set(sub._option_string_actions)
    for tok in rest:
        if tok.startswith("-") and not re.fullmatch(r"-\d[\d.e-]*", tok) and tok != "-":
            flag = tok.split("=", 1)[0]
            assert flag in known, f"{' '.join(chain)} has no option {flag}"
    if complete:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                top.parse_args(argv)
            except SystemExit as exc:
                raise AssertionError(f"ptm {' '.join(argv)} does not parse: {err.getvalue().strip()}") from exc


COMMANDS = shown_commands()


def test_the_pages_show_commands():
    where = {w.split(":")[0] for w, _, _ in COMMANDS}
    assert "README.md" in where and "docs/cli.md" in where and len(COMMANDS) > 50


@pytest.mark.parametrize("where,argv,complete", COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_shown_command_parses(where, argv, complete):
    check(argv, complete)


@pytest.mark.parametrize("where,argv,complete", COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_a_made_up_flag_fails(where, argv, complete):
    with pytest.raises(AssertionError, match="has no option --made-up-flag"):
        check([*argv, "--made-up-flag"], complete)


def test_a_made_up_sub_command_fails():
    with pytest.raises(AssertionError, match="no sub-command 'pretrian'"):
        check(["pretrian", "bert-tiny"], False)
    with pytest.raises(AssertionError, match="does not parse"):
        check(["pretrain"], True)  # PRESET is required
    with pytest.raises(AssertionError, match="ptm data has no option --made-up-flag"):
        check(["data", "--made-up-flag"], False)
