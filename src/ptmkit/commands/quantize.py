"""``ptm quantize``: an int8 copy of a fine-tuned model, scored and timed beside the float32 one."""

from __future__ import annotations

import argparse

from ptmkit.commands import HelpFromRegistry
from ptmkit.commands.task_args import add_task_arguments, add_timing_arguments, task_files, task_loader
from ptmkit.errors import PtmError

HELP = "quantize a fine-tuned model to int8 (dynamic) and measure its scores, size and speed"

DESCRIPTION = """\
Quantize a fine-tuned model for CPU inference and measure what it costs and gains.

--int8: dynamic int8 quantization.  Every linear layer (the attention's fused q/k/v and output
projections, both feed-forward layers, the pooler and the task head) gets int8 weights with one
scale per output channel; its input is quantized at run time from each batch's own range, so no
calibration data is needed.  --embeddings also stores the embedding tables in int8 (one scale per
row, dequantized on lookup): the file shrinks about four times instead of about 1.6 times; the
speed is the same.  LayerNorms and biases stay float32.

--backend ao (default) runs torch.ao.quantization's dynamic int8 kernels (fbgemm / oneDNN);
--backend torchao runs torchao's int8 dynamic activation + int8 weight tensors (pip install
'ptmkit[quantize]'), slower than float32 on CPU unless compiled: it is there to compare.

RUN is a fine-tuning run that saved its task model (OUT/pretrained-seed0 of ptm finetune).  It is
scored on the task it was fine-tuned on (a built-in task is read by name); a model fine-tuned on
your own files needs them again (--train/--dev/--test and the column options, as ptm finetune).
Transformer encoders (transformer, encoder_decoder, xlnet) are quantized; LSTM encoders are
refused (their weights sit in LSTM cells these kernels do not cover).

OUT receives a task model of its own (task_model.json recording the quantization and the source
run, tokenizer.json, best.safetensors holding the int8 tensors: ptm finetune OUT --eval-only and
load_task_model read it) and results.json: dev and test metrics of the float32 and the int8
model, both files' sizes and their ratio, the encoder's speed at batch 1 and 32 on sequences of
the task's median length (--threads threads, interleaved rounds, median), the quantized layer
counts and the CPU.  quantize.png draws the size, the speed and the scores of both models side by
side; README.md is its run card (ptm info OUT prints it, ptm runs lists it).  OUT must be new,
empty, or (with --overwrite) ptm's earlier quantization.
"""

EPILOG = """\
examples:
  ptm quantize out/mr/pretrained-seed0 --int8 -o out/mr-int8
  ptm quantize out/mr/pretrained-seed0 --int8 --embeddings -o out/mr-int8-emb
  ptm quantize out/mr/pretrained-seed0 --int8 --backend torchao -o out/mr-int8-torchao
  ptm quantize out/mine/pretrained-seed0 --int8 --train t.csv --dev d.csv --test e.csv -o out/mine-int8
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "quantize", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("run", metavar="RUN", help="a fine-tuning run directory holding task_model.json (OUT/pretrained-seed0)")
    p.add_argument("--int8", action="store_true", help="dynamic int8 quantization of every linear layer")
    p.add_argument("--embeddings", action="store_true",
                   help="also store the embedding tables in int8 (one scale per row)")
    p.add_argument("--backend", choices=("ao", "torchao"), default=None,
                   help="ao (default: torch.ao dynamic int8 kernels, the faster on CPU) or torchao")
    add_task_arguments(p)
    add_timing_arguments(p)
    p.add_argument("--out", "-o", required=True, metavar="OUT",
                   help="output directory: new, empty, or (with --overwrite) an earlier quantization")
    p.add_argument("--overwrite", action="store_true", help="replace the quantized model ptm wrote in OUT")
    p.__class__ = HelpFromRegistry
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.int8:  # the one scheme so far; the flag keeps the command open to others
        raise PtmError("choose how to quantize: --int8 (dynamic int8 linear layers; add --embeddings for the "
                       "embedding tables too)")
    from ptmkit.workflows import finetune, quantize  # the heavy imports, when the command runs

    files, load_data = task_files(args), task_loader(args, finetune.task_data)
    quantize.quantize_run(args.run, args.out, backend=args.backend, embeddings=args.embeddings,
                          load_data=load_data, inputs=files, overwrite=args.overwrite,
                          threads=args.threads, rounds=args.rounds)
    return 0
