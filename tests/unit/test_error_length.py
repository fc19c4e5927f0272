"""Every ``PtmError`` message of src/ptmkit fits in 200 characters.

The CLI prints a :class:`ptmkit.errors.PtmError` as one line, ``error: <message>``, which a user
reads in a terminal or a log; no log line runs past 200 characters (tests/cli/test_log_line_width.py),
and an error should not either.  A message says what went wrong, the offending value and the fix
(the option or command to use); explanations belong in the docs.

The source is read with ``ast``: the first argument of each ``PtmError(...)`` call (a string
constant, an f-string, a ``+`` of those, or a conditional between two) counts its literal text and
12 characters for each value formatted in (``{path}``, or a ``'; '.join(...)`` added on).  A call
whose message is not a string expression (a variable built beforehand) is skipped: its length
cannot be read from the source."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "ptmkit"
WIDTH = 200
PLACEHOLDER = 12  # the characters counted for each value formatted into a message


def estimate(node: ast.expr) -> int | None:
    """The length of a message: its literal text, :data:`PLACEHOLDER` for each value put in;
    None when ``node`` is no string expression."""
    if isinstance(node, ast.Constant):
        return len(node.value) if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):  # an f-string: its text parts and its {values}
        return sum(len(v.value) if isinstance(v, ast.Constant) else PLACEHOLDER for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # "..." + value + "..."
        left, right = estimate(node.left), estimate(node.right)
        if left is None and right is None:
            return None
        return (PLACEHOLDER if left is None else left) + (PLACEHOLDER if right is None else right)
    if isinstance(node, ast.IfExp):  # "..." if x else "...": the longer
        lengths = [n for n in (estimate(node.body), estimate(node.orelse)) if n is not None]
        return max(lengths, default=None)
    return None


def messages(root: Path) -> list[tuple[str, int]]:
    """``("file:line", estimated length)`` of each ``PtmError(...)`` under ``root`` whose message
    is a string expression."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "PtmError" and node.args:
                length = estimate(node.args[0])
                if length is not None:
                    found.append((f"{path.relative_to(root)}:{node.lineno}", length))
    return found


def test_every_error_message_fits_in_200_characters():
    found = messages(SRC)
    assert len(found) > 1000, "the walk found too few PtmError messages: it would prove nothing"
    long = [f"{where} ({length})" for where, length in found if length > WIDTH]
    assert not long, f"PtmError messages over {WIDTH} characters: {', '.join(long)}"


def test_the_estimate_counts_text_and_placeholders():
    def est(source: str) -> int | None:
        return estimate(ast.parse(source, mode="eval").body)

    assert est('"abc"') == 3
    assert est('f"a{x}b{y!r:>4}"') == 2 + 2 * PLACEHOLDER
    assert est('"ab" + "; ".join(xs)') == 2 + PLACEHOLDER
    assert est('f"a{x}" + ("c" if y else "")') == 1 + PLACEHOLDER + 1
    assert est("msg") is None and est("str(exc)") is None
