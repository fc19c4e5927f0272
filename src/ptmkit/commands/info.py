"""``ptm info``: print a run's card (what the run is, in one place)."""

from __future__ import annotations

import argparse

from ptmkit.runcard import card_json, card_text, describe

HELP = "print what a run is: model, parameters, tokenizer, data, budget, final metrics (its README.md card)"

DESCRIPTION = """\
Print the card of a run directory: the README.md ptm writes into every pre-training run,
fine-tuning run, static-vectors run, HF export, distillation (ptm distil OUT) and distilled
student, pruned and quantized task model (model, parameters, tokenizer, data with their SHA-256
checksums, budget, final metrics, the command that made it and the runs it derives from; a
compressed model's card names the method, the source run and the score, size and speed change).
For a directory without a card (an imported checkpoint, a checkpoint directory, an HF model
directory, a run written before cards) the card is made from its files and printed;
nothing is written.  A folder that is not a run is an error; `ptm runs DIR` lists the runs under it.
"""

EPILOG = """\
examples:
  ptm info runs/bert                        a pre-training run
  ptm info runs/mr/pretrained-seed1         one fine-tuning run
  ptm info runs/w2v                         static word vectors
  ptm info out/mr-int8                      a quantized (or pruned) task model
  ptm info hf-bert/                         an HF model directory (exported or downloaded)
  ptm info runs/bert --json                 the same facts as JSON
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "info", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("run", metavar="RUN", help="a run, checkpoint or model directory")
    p.add_argument("--json", action="store_true", help="print the facts as JSON instead of the Markdown card (NaN as null)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(card_json(describe(args.run)) if args.json else card_text(args.run), end="" if not args.json else "\n")
    return 0
