"""The run card: ``README.md`` in a run directory, saying in one place what the run is (model,
parameters, tokenizer, data with checksums, budget, final metrics, the command that made it and
the runs it derives from).  :func:`write_run_card` writes it from the run's own files; ``ptm info``
prints it (:func:`card_text`, generating it when a directory has none); ``ptm runs`` lists runs
(:func:`find_runs`).  An HF export's card is its model card, the README.md the HF Hub shows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.outputs.lock import command_line
from ptmkit.runcard.facts import Card, classify, describe
from ptmkit.runcard.files import marker_kind, number

CARD_FILE = "README.md"
CARD_TAG = "<!-- ptmkit run card"  # the first line of a card ptm wrote (a user's README.md is not one)
SKIP_DIRS = ("checkpoints", "data", "eval_data", "text", "tensorboard")  # never runs of their own


def render(card: Card) -> str:
    """The card as Markdown."""
    lines = []
    if card.kind == "export":  # the HF Hub reads a model card's YAML front matter
        lines += ["---", "library_name: transformers", "tags:", "- ptmkit", "---"]
    lines += [f"{CARD_TAG}: written by ptm; `ptm info {card.name}` prints it -->", "",
              f"# {card.name}: {card.label}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in card.rows.items()]
    lines.append(f"| made by | `{card.command}` |" if card.command else "| made by | not recorded |")
    if card.derives_from:
        lines.append(f"| derives from | {', '.join(f'`{p}`' for p in card.derives_from)} |")
    if card.data:
        lines += ["", "## Data", "", "| data | what | bytes | SHA-256 |", "|---|---|---|---|"]
        for item in card.data:
            size = f"{item['bytes']:,}" if isinstance(item.get("bytes"), int) else ""
            lines.append(f"| {item.get('name', '')} | {item.get('what', '')} | {size} | `{item.get('sha256', '')}` |")
    if card.budget:
        lines += ["", "## Budget", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in card.budget.items())]
    if card.metrics:
        lines += ["", "## Final metrics", "", "| metric | value |", "|---|---|",
                  *(f"| {k} | {number(v)} |" for k, v in card.metrics.items())]
    return "\n".join(lines) + "\n"


def write_run_card(run_dir: Path | str, data: list[Path] | tuple = (), derives_from: list[Any] | tuple = (),
                   kind: str | None = None, name: str | None = None) -> Path:
    """Write ``run_dir/README.md`` from the files in ``run_dir`` (``config.json``, ``inputs.json``,
    ``metrics.jsonl``, ``results.json``, ``vectors.bin``, the weights' header, ...) with the command
    of this process as the one that made it.  ``data`` are text files to fingerprint (a static
    model records none itself); ``derives_from`` names runs it was made from.  Call it while the
    directory is open for writing (:func:`ptmkit.outputs.writing`), so the card is one of ptm's
    files (``README.md`` is declared in the run kinds' entries), or into the scratch directory of a
    staged output with its ``kind`` (``vectors``, ``export``) and the output's ``name``."""
    card = describe(run_dir, data, derives_from, kind, name)
    card.command = command_line()
    path = Path(run_dir) / CARD_FILE
    atomic_write_text(path, render(card))
    return path


def is_card(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(200)
    except (OSError, UnicodeDecodeError):
        return False
    return CARD_TAG in head


def card_text(path: Path | str) -> str:
    """What ``ptm info PATH`` prints: the run's card, or one generated from its files when it has
    none (a run written before cards, an imported checkpoint, an HF model directory)."""
    d = Path(path)
    card_file = d / CARD_FILE
    if d.is_dir() and is_card(card_file):
        classify(d)  # a card copied into a folder that is not a run does not make it one
        return card_file.read_text(encoding="utf-8")
    return render(describe(d))


def find_runs(root: Path | str) -> Iterator[Card]:
    """The runs under ``root`` (itself included), in path order; the inside of a run (its
    checkpoints, prepared data) is not searched."""
    root = Path(root)
    if not root.is_dir():
        raise PtmError(f"{root} is not a directory; ptm runs lists the runs under a folder")
    for d, dirs, _ in os.walk(root):
        here = Path(d)
        dirs[:] = sorted(n for n in dirs if n not in SKIP_DIRS and not n.startswith("."))
        try:
            card = describe(here)
        except PtmError:
            continue
        if marker_kind(here) == "run" or card.kind in ("vectors", "export", "checkpoint", "hf", "step"):
            dirs[:] = []  # a run's insides are not runs of their own
        yield card


def runs_table(root: Path | str) -> str:
    """``ptm runs ROOT``: one line per run with its kind and key metrics."""
    root = Path(root)
    rows = []
    for card in find_runs(root):
        rel = card.path.relative_to(root).as_posix() or "."
        metrics = "  ".join(f"{k}={number(v)}" for k, v in card.key_metrics.items() if v is not None)
        rows.append((rel, card.label, metrics))
    if not rows:
        return f"no runs under {root}\n"
    width = [max(len(r[i]) for r in rows + [("run", "kind", "")]) for i in range(2)]
    lines = [f"{'run':<{width[0]}}  {'kind':<{width[1]}}  key metrics"]
    lines += [f"{a:<{width[0]}}  {b:<{width[1]}}  {c}".rstrip() for a, b, c in rows]
    return "\n".join(lines) + "\n"
