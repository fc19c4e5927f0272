"""``ptm compare``: pre-training objectives on one corpus at equal compute, then one fine-tuning protocol."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ptmkit.errors import PtmError

HELP = "pre-train several objectives at equal compute, fine-tune each the same way, tabulate and plot"
DESCRIPTION = """\
Pre-train every OBJ on the same corpus (--data: text files, prepared once with one tokenizer, or
a prepared corpus) for the same --budget, then fine-tune each on the same tasks with the
protocol of `ptm evaluate` (a fixed training subset, the first --eval-size dev/test examples,
the LR chosen on dev from --lrs, --seeds seeds), beside a from-scratch baseline.

OBJ is a preset, LABEL=PRESET, or LABEL=PRESET:key=value,key=value (its own overrides), e.g.
  mlm=bert-tiny:objective.nsp=false   static=roberta-tiny:objective.mask_schedule=static
--set key=value ... applies to every OBJ first (sizes, batch, sequence length, LR).

--budget is FLOPs per contender (3e13, 30T; forward + backward, counted on the contender's own
training batches, so ELECTRA's generator counts and ALBERT's shared layers cost full compute),
or minutes (15min: steps from a timed probe, train.max_seconds as the hard stop).  The steps
follow from the budget; warm-up is capped at 10% of them and the held-out loss is evaluated ten
times per run, unless set.  --points K fine-tunes K checkpoints spread over each budget (a score
vs FLOPs curve); 1 = the final weights only.

Writes OUT/table.md (one row per objective: parameters, FLOPs per step, steps, held-out loss,
test score mean ± sd per task), OUT/compare.png (held-out loss vs FLOPs; score vs FLOPs) and
OUT/results.json.  --resume continues an interrupted comparison.
"""
EPILOG = """\
examples:
  ptm data get ptb mr
  ptm compare bert-tiny electra-tiny albert-tiny --data ptb.train.txt --budget 20T -o runs/cmp
  ptm compare nsp=bert-tiny mlm=bert-tiny:objective.nsp=false --data corpus.txt --budget 10min \\
      --tasks mr,brown-pos --set train.seq_len=64 train.batch_size=64 -o runs/nsp
"""


# Sanity limits of --budget per objective: 1e21 FLOPs is about twelve times BERT-base's pre-training
# (6 x 110M parameters x 128k tokens per step x 1M steps ~ 8e19) and four months at the assumed
# rate below; in minutes, a week each.  Beyond them a typo (1e30 for 1e13) set ~1e22 steps of a
# tiny model and ran for ever.  The time estimate assumes a fast GPU's sustained rate.
MAX_BUDGET_FLOPS = 1e21
MAX_BUDGET_MINUTES = 7 * 24 * 60
ASSUMED_FLOPS_PER_SECOND = 1e14


def duration(seconds: float) -> str:
    """``90`` -> ``'1.5 minutes'``, ``3e9`` -> ``'95 years'`` (rough, for messages)."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} seconds"


def check_budget(budget, text: str, runs: int) -> None:
    """Refuse a non-finite ``budget`` or one beyond the sanity limits, with the training time it
    would take for each objective and for all ``runs`` pre-trainings together."""
    value = budget.flops if budget.flops is not None else budget.minutes
    if not math.isfinite(value):
        raise PtmError(f"--budget {text} is not a finite number; give FLOPs (3e13, 30T) or minutes (15min)")
    if budget.flops is not None and budget.flops > MAX_BUDGET_FLOPS:
        each = budget.flops / ASSUMED_FLOPS_PER_SECOND
        raise PtmError(
            f"--budget {text} ({budget.flops:.3g} FLOPs) is beyond the sanity limit of {MAX_BUDGET_FLOPS:.0e} FLOPs "
            f"per objective (about {duration(each)} each on a fast GPU, {duration(each * runs)} in all); give a "
            f"smaller budget (e.g. 30T)"
        )
    if budget.minutes is not None and budget.minutes > MAX_BUDGET_MINUTES:
        each = 60 * budget.minutes
        raise PtmError(
            f"--budget {text} is beyond the sanity limit of {MAX_BUDGET_MINUTES} minutes (a week) per objective "
            f"({duration(each)} each, {duration(each * runs)} in all); give a smaller budget (e.g. 15min)"
        )


def add_protocol_args(p: argparse.ArgumentParser, epochs: int = 10) -> None:
    """The fine-tuning protocol's options, shared by ``ptm evaluate`` and ``ptm compare``."""
    p.add_argument("--eval-size", type=int, default=1000, help="dev and test examples per task (default 1000)")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--lrs", nargs="+", type=float, default=[3e-4, 1e-3], help="LR grid, chosen on dev")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run in OUT: finished runs are read back, not trained again; "
                        "--tasks may add tasks after the recorded ones (only those are fine-tuned)")
    p.add_argument("--no-baseline", action="store_true", help="skip the from-scratch row")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("objectives", nargs="+", metavar="OBJ", help="PRESET, LABEL=PRESET or LABEL=PRESET:key=value,...")
    p.add_argument("--data", nargs="+", required=True, help="text file(s) or one prepared corpus directory")
    p.add_argument("--budget", required=True, help="FLOPs per objective (3e13, 30T) or minutes (15min)")
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.add_argument("--tasks", default="mr", help="comma-separated built-in tasks (default mr)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", dest="common",
                   help="overrides for every objective (before its own)")
    p.add_argument("--points", type=int, default=1, help="checkpoints fine-tuned per objective (default 1: the last)")
    p.add_argument("--train-size", type=int, default=500, help="training examples per task (default 500)")
    p.add_argument("--init-from", metavar="RUN", default=None,
                   help="every objective continues RUN (a run, checkpoint or imported model of the same encoder) "
                        "instead of starting from scratch; the baseline row is RUN itself")
    add_protocol_args(p)
    p.set_defaults(func=run)


def workflows():
    """The workflows of ``ptm compare`` and ``ptm budget``: the one heavy import, when a command runs."""
    from ptmkit.workflows import budget, compare

    return compare, budget


def run(args: argparse.Namespace) -> int:
    workflow, _ = workflows()
    contenders = [workflow.parse_contender(s) for s in args.objectives]
    budget = workflow.parse_budget(args.budget)
    check_budget(budget, args.budget, len(contenders))
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    protocol = workflow.Protocol(train_size=args.train_size, eval_size=args.eval_size, seeds=tuple(args.seeds), lrs=tuple(args.lrs),
                        epochs=args.epochs, modes=("finetune",), baseline=not args.no_baseline)
    result = workflow.compare(contenders, args.data, args.out, budget, tasks, protocol, common=args.common, points=args.points,
                     resume=args.resume, init_from=args.init_from)
    print((Path(args.out) / "table.md").read_text())
    return 0 if result["runs"] else 1
