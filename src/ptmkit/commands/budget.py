"""``ptm budget``: when does pre-training on your own corpus pay?  A model at every compute
budget from one WSD run per preset, each fine-tuned beside random weights."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ptmkit.commands import IntermixedParser
from ptmkit.commands.compare import MAX_BUDGET_FLOPS, add_protocol_args, workflows
from ptmkit.errors import PtmError
from ptmkit.presets import list_presets

HELP = "pre-train once per preset to several FLOPs budgets (WSD branches), fine-tune each, fit a power law"
DESCRIPTION = """\
When does pre-training on your own corpus pay?  Pre-train every PRESET once on --data with a
warmup-stable-decay schedule (WSD; Hu et al. 2024, MiniCPM) to the largest of --budgets; at the
point where each smaller budget would start its decay, a copy of the run branches off and decays
to that budget, so one run yields a model at every budget.  Each budget's model is fine-tuned on
--tasks with the protocol of `ptm compare` (a fixed training subset, the first --eval-size
dev/test examples, the LR chosen on dev from --lrs, --seeds seeds), beside the first preset's
architecture randomly initialised.

PRESET is a preset, LABEL=PRESET, or LABEL=PRESET:key=value,key=value (its own overrides);
trailing KEY=VALUE arguments apply to every preset first.  A budget b buys floor(b / FLOPs per
step) steps (at least 10; FLOPs counted on the preset's own training batches); the decay takes
the last --decay-fraction of each budget's steps; warm-up is capped at a tenth of the smallest
budget's steps unless train.warmup_steps is set.

Writes OUT/table.md (preset x budget: FLOPs, steps, held-out loss at the end of the decay, test
score mean ± sd; the random-init row; the fitted L = a * C^(-alpha) beside Kaplan et al.'s
alpha = 0.050; the crossover budget where pre-training beats random init's mean + sd),
OUT/budget.png and OUT/results.json.  --resume continues an interrupted study exactly.
"""
EPILOG = """\
examples:
  ptm data get ptb mr
  ptm budget bert-tiny --data ptb.train.txt --budgets 1e13,3e13,1e14 --tasks mr -o runs/budget
  ptm budget mlm=bert-tiny:objective.nsp=false gpt2-tiny --data corpus.txt --budgets 3T,10T,30T \\
      train.seq_len=64 train.batch_size=32 -o runs/when
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("budget", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.__class__ = IntermixedParser  # KEY=VALUE overrides after the options too
    p.add_argument("presets", nargs="+", metavar="PRESET",
                   help="PRESET, LABEL=PRESET or LABEL=PRESET:key=value,...; then KEY=VALUE overrides for all")
    p.add_argument("--data", nargs="+", required=True, help="text file(s) or one prepared corpus directory")
    p.add_argument("--budgets", required=True, help="FLOPs per model, increasing and comma-separated (1e13,3e13,1e14)")
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("--tasks", default="mr", help="comma-separated built-in tasks (default mr)")
    p.add_argument("--decay-fraction", type=float, default=0.1,
                   help="share of each budget's steps spent decaying the LR (default 0.1, MiniCPM's)")
    p.add_argument("--train-size", type=int, default=500, help="training examples per task (default 500)")
    add_protocol_args(p)
    p.set_defaults(func=run)


def split_specs(items: list[str]) -> tuple[list[str], list[str]]:
    """Positional arguments as (preset specs, KEY=VALUE overrides for every preset): an override
    is ``section.key=value``; ``LABEL=PRESET`` names a preset (or a YAML file) after its ``=``,
    so a label may hold dots (``v1.2=bert-tiny``).

    >>> split_specs(["v1.2=bert-tiny", "gpt2-tiny", "train.lr=1e-3"])
    (['v1.2=bert-tiny', 'gpt2-tiny'], ['train.lr=1e-3'])
    """
    presets = set(list_presets())
    specs, common = [], []
    for item in items:
        key, eq, value = item.partition(":")[0].partition("=")
        named = value.strip() in presets or (value.strip().endswith((".yaml", ".yml")) and Path(value.strip()).is_file())
        (common if eq and "." in key and not named else specs).append(item)
    if not specs:
        raise PtmError("no preset given: name at least one (e.g. ptm budget bert-tiny --data ... --budgets ...)")
    return specs, common


def run(args: argparse.Namespace) -> int:
    compare, workflow = workflows()
    specs, common = split_specs(args.presets)
    presets = [compare.parse_contender(s) for s in specs]
    budgets = workflow.parse_budgets(args.budgets)
    if not math.isfinite(budgets[-1]) or budgets[-1] > MAX_BUDGET_FLOPS:
        raise PtmError(f"--budgets {args.budgets}: {budgets[-1]:.3g} FLOPs is beyond the sanity limit of "
                       f"{MAX_BUDGET_FLOPS:.0e} per preset; give smaller budgets (e.g. 1e13,3e13,1e14)")
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    protocol = compare.Protocol(train_size=args.train_size, eval_size=args.eval_size, seeds=tuple(args.seeds),
                                lrs=tuple(args.lrs), epochs=args.epochs, modes=("finetune",),
                                baseline=not args.no_baseline)
    result = workflow.budget(presets, args.data, args.out, budgets, tasks, protocol, common=common,
                             decay_fraction=args.decay_fraction, resume=args.resume)
    print((Path(args.out) / "table.md").read_text())
    return 0 if result["runs"] else 1
