"""``ptm predict``: run a fine-tuned task model on new, unlabelled text."""

from __future__ import annotations

import argparse

from ptmkit.commands import HelpFromRegistry
from ptmkit.commands.task_args import column_pair, columns_of

HELP = "run a fine-tuned task model on new text: labels, tags, values (JSONL, or CoNLL for tagging)"

DESCRIPTION = """\
Run a fine-tuned task model on new, unlabelled text and write one prediction per input row.

RUN is a directory holding task_model.json: a fine-tuning run (OUT/pretrained-seed0 of ptm
finetune) or the output of ptm distil, ptm prune or ptm quantize.  No training file is needed:
the labels, tokenizer and settings come from RUN.  Every task type but multi_task runs
(multi-task models: score them with ptm finetune RUN --eval-only).

--input FILE ('-': stdin) is a text file with one example per line (a text to classify; for
tagging, a sentence whose words are split at white space), or a JSONL / CSV / TSV table (by
extension, or --input-format) with the task's columns: text (and text_pair for pairs) for
classification, multi-label and regression; tokens (a list in JSONL, words at white space in
CSV / TSV) for tagging; text and choices (a list; in CSV / TSV a JSON list) for multiple choice; question and
context for span QA; source for seq2seq (a text file works for all but multiple choice and span
QA).  Your own column names map with --text-column, --pair-column or --column NAME=COLUMN.

-o OUT ('-': stdout) gets one JSON object per input row, in input order: classification
{"text", "prediction", "probabilities": {label: p}}; multi-label {"text", "prediction" (the
labels at the model's thresholds, chosen on dev), "probabilities"}; regression {"text", "prediction"};
tagging {"tokens", "tags"}, or CoNLL (word<TAB>tag lines, a blank line after each sentence)
when OUT ends in .conll or with --format conll; multiple choice {"text", "choices",
"prediction" (the index), "answer", "probabilities"}; span QA {"question", "context", "answer",
"score" (start + end score; null: no span)}; seq2seq {"source", "prediction"} (decoded as
fine-tuning decoded: greedy unless the model was fine-tuned with num_beams).  The predictions are those of ptm finetune
--eval-only on the same rows.  Rows are read, predicted and written --chunk-size at a time
(bounded memory), batched by length inside a chunk.  OUT must be a new file, or an existing one
with --force; it is written to a temporary file that replaces OUT only when every row is done.
"""

EPILOG = """\
examples:
  ptm predict out/mr/pretrained-seed0 --input reviews.txt -o predictions.jsonl
  cat reviews.txt | ptm predict out/mr/pretrained-seed0 --input - -o -
  ptm predict out/nli/pretrained-seed0 --input pairs.tsv --text-column premise --pair-column hypothesis -o p.jsonl
  ptm predict out/pos/pretrained-seed0 --input sentences.txt -o tags.conll
  ptm predict out/mr-int8 --input reviews.csv -o predictions.jsonl --batch-size 64
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("run", metavar="RUN", help="a fine-tuned task model: a directory holding task_model.json "
                                             "(task types: {names:task_type})")
    p.add_argument("--input", "-i", required=True, metavar="FILE",
                   help="text (one example per line), JSONL, CSV or TSV; '-': stdin")
    p.add_argument("--out", "-o", required=True, metavar="OUT", help="output file (JSONL or CoNLL); '-': stdout")
    p.add_argument("--format", choices=("jsonl", "conll"), default=None,
                   help="output format (default: conll for an OUT ending in .conll, else jsonl)")
    p.add_argument("--input-format", choices=("text", "jsonl", "csv", "tsv"), default=None,
                   help="how to read --input (default: by extension; stdin and other files: text)")
    p.add_argument("--text-column", default=None, help="column of the (first) text (default: text)")
    p.add_argument("--pair-column", default=None, help="column of the second text of a pair (default: text_pair)")
    p.add_argument("--column", dest="columns", action="append", type=column_pair, metavar="NAME=COLUMN",
                   help="any column of the task, e.g. --column tokens=words")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="rows per forward pass (default: the model's eval_batch_size)")
    p.add_argument("--chunk-size", type=int, default=1024, metavar="N",
                   help="rows read, predicted and written at a time (default: 1024)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists (never an input)")
    p.__class__ = HelpFromRegistry
    p.set_defaults(func=run, label_column=None)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import predict as workflow  # the one heavy import, when the command runs

    workflow.predict_file(args.run, args.input, args.out, fmt=args.format, in_format=args.input_format,
                          columns=columns_of(args), chunk_size=args.chunk_size, batch_size=args.batch_size,
                          force=args.force, device=workflow.resolve_device(args.device))
    return 0
