"""``ptm prune``: a pruned copy of a fine-tuned model (attention heads, layers or weights), scored and
timed beside the unpruned one."""

from __future__ import annotations

import argparse

from ptmkit.commands import HelpFromRegistry
from ptmkit.commands.task_args import add_task_arguments, add_timing_arguments, task_files, task_loader

HELP = "prune a fine-tuned model (attention heads, whole layers, or weights by magnitude) and measure it"

DESCRIPTION = """\
Prune a fine-tuned model and measure what it costs and gains.

--method heads (default): attention heads are masked in steps of 10 % of all heads.  --order
importance (default) masks the least important heads first, importance being the sensitivity of
the dev loss to each head's gate, |dL/d xi_h| summed over batches and normalised per layer
(Michel et al. 2019), re-estimated after every step; --order random masks them in an order drawn
from --seed.  --fraction F prunes that share of the heads; without it, the largest 10 % step whose
dev score stays within --tolerance (default 0.01: one point) of the unpruned model is pruned.
The chosen heads are then removed from the weights (smaller matrices, a real speed-up; the same
outputs as the mask).  A layer always keeps one head: pruning every head of a layer is refused
(the layer would still run its feed-forward part); remove whole layers with --method layers.

--method layers --keep-layers 0,2,4: a shallower model of those encoder layers (renumbered;
transformer encoders only).

--method magnitude: global unstructured L1 pruning (torch.nn.utils.prune) of all linear weights
of the encoder; --fraction is the sparsity (the default, again, the largest 10 % step within the
tolerance).  Zeros in dense matrices do not make the model faster; the results say so.

OUT/curve.png is always drawn: the score against the amount pruned at every step the command
scored anyway (heads: the steps masked on the way to the fraction, on dev; magnitude with
--fraction and layers: the model before and after).  --curve scores every step on dev and test
(heads: importance and random order, up to 90 % as far as one head per layer allows; magnitude:
sparsity 0 to 90 %), which costs an evaluation per step, draws them all and writes OUT/curve.json.

RUN is a fine-tuning run that saved its task model (OUT/pretrained-seed0 of ptm finetune).  It is
scored on the task it was fine-tuned on (a built-in task is read by name); a model fine-tuned on
your own files needs them again (--train/--dev/--test and the column options, as ptm finetune).

OUT receives a task model of its own (task_model.json recording compression = method, fraction,
heads pruned or layers kept, and the source run; tokenizer.json; best.safetensors): ptm finetune
OUT --eval-only and load_task_model read it.  results.json holds the dev and test metrics before
and after, the curve, the parameter counts and the encoder's speed before and after at batch 1 and
32 on sequences of the task's median length (--threads threads, interleaved rounds, median);
README.md is its run card (ptm info OUT prints it, ptm runs lists it).
OUT must be new, empty, or (with --overwrite) ptm's earlier pruning output.
"""

EPILOG = """\
examples:
  ptm prune out/mr/pretrained-seed0 --curve -o out/mr-heads
  ptm prune out/mr/pretrained-seed0 --fraction 0.4 -o out/mr-heads40
  ptm prune out/mr/pretrained-seed0 --fraction 0.4 --order random --seed 1 -o out/mr-heads40-random
  ptm prune out/mr/pretrained-seed0 --method layers --keep-layers 0,2,4 -o out/mr-3layers
  ptm prune out/mr/pretrained-seed0 --method magnitude --fraction 0.5 --curve -o out/mr-sparse50
  ptm prune out/mine/pretrained-seed0 --train t.csv --dev d.csv --test e.csv -o out/mine-heads
"""


def _layer_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer numbers separated by commas, e.g. 0,2,4; got {text!r}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prune", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("run", metavar="RUN", help="a fine-tuning run directory holding task_model.json (OUT/pretrained-seed0)")
    p.add_argument("--method", choices=("heads", "layers", "magnitude"), default="heads",
                   help="what to prune: attention heads (default), whole layers, or weights by magnitude")
    p.add_argument("--fraction", type=float, default=None, metavar="F",
                   help="share of the heads (heads) or of the encoder's linear weights (magnitude) to prune, in "
                        "[0, 1); default: the largest 10%% step within --tolerance of the unpruned dev score")
    p.add_argument("--order", choices=("importance", "random"), default="importance",
                   help="heads: least important first (Michel et al. 2019, default) or a random order (--seed)")
    p.add_argument("--keep-layers", type=_layer_list, default=None, metavar="I,J,...",
                   help="layers: the encoder layers to keep, e.g. 0,2,4")
    p.add_argument("--curve", action="store_true",
                   help="score every step on dev and test (both orders for heads) and write curve.json; "
                        "curve.png is drawn either way, from the steps scored")
    p.add_argument("--tolerance", type=float, default=0.01, metavar="T",
                   help="the dev score drop the default fraction may cost (default: 0.01, one point)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random order (default: 0)")
    p.add_argument("--importance-split", choices=("train", "dev", "test"), default="dev",
                   help="the split whose loss head importance is measured on (default: dev)")
    add_task_arguments(p)
    add_timing_arguments(p)
    p.add_argument("--out", "-o", required=True, metavar="OUT",
                   help="output directory: new, empty, or (with --overwrite) an earlier pruning output")
    p.add_argument("--overwrite", action="store_true", help="replace the pruned model ptm wrote in OUT")
    p.__class__ = HelpFromRegistry
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import finetune, prune  # the heavy imports, when the command runs

    files, load_data = task_files(args), task_loader(args, finetune.task_data)
    prune.prune_run(args.run, args.out, method=args.method, fraction=args.fraction, order=args.order,
                    layers=args.keep_layers, curve=args.curve, load_data=load_data, seed=args.seed,
                    tolerance=args.tolerance, importance_split=args.importance_split, inputs=files,
                    overwrite=args.overwrite, threads=args.threads, rounds=args.rounds)
    return 0
