"""``ptm runs``: list the runs under a folder with their key metrics."""

from __future__ import annotations

import argparse

from ptmkit.runcard import runs_table

HELP = "list the runs under a folder with their kind and key metrics"

DESCRIPTION = """\
List every run under DIR (DIR included, searched recursively; the inside of a run, its
checkpoints and prepared data, is not): pre-training runs (step, final loss and perplexity),
fine-tuning runs and distilled students (task, dev and test score), distillations (size ratio,
retention), pruned and quantized task models (task, scores, parameters or size ratio, speed-up),
static-vectors runs (words x dimensions), HF exports, imported checkpoints and HF model
directories (parameters).  `ptm info RUN` prints one
run's card.
"""

EPILOG = """\
examples:
  ptm runs runs/                            every run under runs/
  ptm runs runs/mr                          the seeds of one fine-tuning
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "runs", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("folder", metavar="DIR", nargs="?", default=".", help="the folder to search (default: .)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(runs_table(args.folder), end="")
    return 0
