"""``ptm budget``: when does pre-training on your own corpus pay?  A model at every compute budget
from one run per preset, each fine-tuned beside a randomly initialised baseline.

Warmup-stable-decay (WSD; Hu et al. 2024, MiniCPM) makes one pre-training run give a model at
every budget: the LR stays at its peak after warm-up, so the run's checkpoint at any step ``p`` is
where a standalone WSD run of ``S`` steps with ``p = S - round(decay_fraction * S)`` would start
its decay.  Per preset:

* the FLOPs per step come from :func:`ptmkit.workflows.compare.probe` (counted on the preset's own
  training batches); a budget ``b`` buys ``S_b = floor(b / FLOPs per step)`` steps;
* the main run trains ``S_max`` steps (the largest budget) with ``train.schedule=wsd``; its
  warm-up ends before the first branch point (at most a tenth of the smallest budget's steps,
  unless ``train.warmup_steps`` is set);
* at the branch point ``p_b`` of every smaller budget a callback saves a checkpoint and copies it
  into that budget's own run directory, whose stored config says ``train.max_steps=S_b``; the
  branch then resumes there and decays to ``min_lr_ratio`` at ``S_b``, exactly as a standalone
  WSD run to ``S_b`` (:func:`branch_point` is the rounding of :class:`ptmkit.train.optim.Schedule`);
* the largest budget's model is the main run's end.

Every stage resumes exactly after an interruption (the main run from its latest checkpoint, a
branch from its copy or its own later checkpoints, with ``ptm pretrain --resume`` too) and a
finished one is read back.  Each budget's model is then fine-tuned with the protocol of
``ptm compare`` (finetune mode, the LR chosen on dev, several seeds) beside the first preset's
architecture randomly initialised.  Output directory::

    OUT/data/                          the shared tokenizer and prepared corpus
    OUT/runs/<label>/budget-<b>/       one run directory per budget (the largest: the main run)
    OUT/finetune/<label>/budget-<b>/<task>/   fine-tuning runs (random-init/<task>/ for the baseline)
    OUT/results.json   OUT/table.md   OUT/budget.png   (:mod:`ptmkit.workflows.budget_report`)
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ptmkit import fileio, outputs
from ptmkit.data.corpus import Corpus
from ptmkit.data.tasks import load_task
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_dir, atomic_write_text
from ptmkit.flops import format_flops
from ptmkit.identity import fingerprint
from ptmkit.train import checkpoint as ckpt
from ptmkit.workflows import budget_report, report
from ptmkit.workflows.compare import (
    Contender,
    _eval_curve,
    _pinned,
    finetune_jobs,
    parse_budget,
    probe,
    score_row,
    shared_corpus,
    within_positions,
)
from ptmkit.workflows.evaluate import Protocol
from ptmkit.workflows.pretrain import pretrain
from ptmkit.workflows.rundir import INPUTS_FILE, RUN_CONFIG, SETTINGS, check_settings

log = logging.getLogger(__name__)

MIN_STEPS = 10  # fewer steps than this leave no stable phase to branch from
DECAY_FRACTION = 0.1  # MiniCPM's share of the steps spent decaying
MAX_WARMUP_FRACTION = 0.1  # of the smallest budget's steps: warm-up ends before its branch point
EVALS_PER_RUN = 10
# the settings ptm budget decides itself; the user sets the budgets and --decay-fraction instead
OWN_KEYS = ("train.schedule", "train.max_steps", "train.decay_fraction", "train.max_seconds")


def parse_budgets(text: str | Sequence[str]) -> tuple[float, ...]:
    """``1e13,3e13,1e14`` (or a list of such): FLOPs per budget, increasing.

    >>> parse_budgets("10T,3e13")
    (10000000000000.0, 30000000000000.0)
    """
    items = [s for part in ([text] if isinstance(text, str) else text) for s in str(part).split(",") if s.strip()]
    if not items:
        raise PtmError("no budgets given: pass FLOPs, increasing, as --budgets 1e13,3e13,1e14")
    budgets = []
    for s in items:
        b = parse_budget(s)
        if b.flops is None or not math.isfinite(b.flops):
            raise PtmError(f"the budget {s!r} is not a number of FLOPs; give FLOPs (3e13, 30T), increasing")
        budgets.append(b.flops)
    for a, b in zip(budgets, budgets[1:]):
        if b <= a:
            raise PtmError(f"the budgets must increase: {format_flops(b)} follows {format_flops(a)}; sort them, "
                           f"without repeats")
    return tuple(budgets)


def budget_name(flops: float) -> str:
    """The directory of a budget's run: ``3e13`` -> ``budget-3e13``, ``2.5e7`` -> ``budget-2.5e7``."""
    mantissa, _, exponent = f"{flops:.6g}".partition("e")
    return "budget-" + mantissa + (f"e{int(exponent)}" if exponent else "")


# -- the plan ------------------------------------------------------------------------------------------
def decay_steps(steps: int, fraction: float) -> int:
    """The steps a WSD run of ``steps`` spends decaying (as :class:`ptmkit.train.optim.Schedule` rounds)."""
    return max(1, round(fraction * steps))


def branch_point(steps: int, fraction: float) -> int:
    """The step where a WSD run of ``steps`` leaves its peak LR (warm-up done by then)."""
    return steps - decay_steps(steps, fraction)


@dataclass(frozen=True)
class Plan:
    """One preset's budgets (FLOPs), the steps each buys, and the main run's shared settings."""

    budgets: tuple[float, ...]
    steps: tuple[int, ...]
    decay_fraction: float
    warmup_steps: int

    @property
    def points(self) -> tuple[int, ...]:
        return tuple(branch_point(s, self.decay_fraction) for s in self.steps)


def plan(label: str, budgets: Sequence[float], flops_per_step: float, decay_fraction: float,
         warmup_steps: int) -> Plan:
    """The steps of every budget; refuses a budget buying fewer than :data:`MIN_STEPS` steps and a
    warm-up that outlasts the smallest budget's branch point."""
    if not 0.0 < decay_fraction < 1.0:
        raise PtmError(f"--decay-fraction must be in (0, 1), got {decay_fraction}; MiniCPM decays over 0.1")
    steps = []
    for b in budgets:
        s = int(b // flops_per_step)
        if s < MIN_STEPS:
            raise PtmError(f"{label}: the budget {format_flops(b)} buys {s} steps ({flops_per_step:.3g} FLOPs each), "
                           f"fewer than {MIN_STEPS}; raise it or drop it")
        if steps and s == steps[-1]:
            raise PtmError(f"{label}: the budgets {format_flops(budgets[len(steps) - 1])} and {format_flops(b)} buy the "
                           f"same {s} steps; drop one or spread them further")
        steps.append(s)
    first = branch_point(steps[0], decay_fraction)
    if warmup_steps > first:
        raise PtmError(f"{label}: train.warmup_steps={warmup_steps} outlasts the branch point of the smallest "
                       f"budget (step {first}); lower it or raise that budget")
    return Plan(tuple(budgets), tuple(steps), decay_fraction, warmup_steps)


def main_overrides(c: Contender, common: Sequence[str], cost: dict[str, Any], budgets: Sequence[float],
                   decay_fraction: float) -> tuple[list[str], Plan]:
    """The main run's ``ptm pretrain`` overrides (WSD to the largest budget) and the preset's plan."""
    given = [*common, *c.overrides]
    for key in OWN_KEYS:
        if _pinned(given, key):
            raise PtmError(f"{c.label}: ptm budget sets {key} itself (WSD to each budget); drop that override "
                           f"(--decay-fraction sets the decay)")
    first = int(budgets[0] // cost["flops_per_step"])
    if _pinned(given, "train.warmup_steps"):
        text = next(o for o in reversed(given) if o.partition("=")[0].strip() == "train.warmup_steps").partition("=")[2]
        try:
            warmup = int(text)
        except ValueError:
            raise PtmError(f"{c.label}: train.warmup_steps={text} is not a whole number of steps") from None
    else:
        warmup = min(int(cost["warmup_steps"]), max(1, int(MAX_WARMUP_FRACTION * first)))
    p = plan(c.label, budgets, cost["flops_per_step"], decay_fraction, warmup)
    steps = p.steps[-1]
    extra = ["train.schedule=wsd", f"train.max_steps={steps}", f"train.decay_fraction={decay_fraction}",
             f"train.save_every={max(1, steps // 4)}"]
    if not _pinned(given, "train.keep_checkpoints"):
        extra.append("train.keep_checkpoints=2")  # each branch point is copied out as soon as it is saved
    if not _pinned(given, "train.warmup_steps"):
        extra.append(f"train.warmup_steps={warmup}")
    if not _pinned(given, "train.eval_every"):
        extra.append(f"train.eval_every={max(1, steps // EVALS_PER_RUN)}")
    return [*given, *extra], p


# -- branches ------------------------------------------------------------------------------------------
def branch_config(config: dict[str, Any], steps: int, decay_fraction: float) -> dict[str, Any]:
    """The main run's stored config as the branch's: WSD to ``steps``, its decay starting at its
    branch point, a checkpoint midway through the decay (a resumed branch need not redo it all)."""
    train = {**config["train"], "max_steps": steps, "decay_fraction": decay_fraction,
             "save_every": max(1, decay_steps(steps, decay_fraction) // 2)}
    return {**config, "train": train}


def make_branch(main_dir: Path, source: Path, branch_dir: Path, steps: int, decay_fraction: float,
                inputs: Sequence[Path]) -> Path:
    """Copy the main run's checkpoint ``source`` into ``branch_dir``, a run directory of its own
    whose stored config trains to ``steps``; its metrics start as the main run's up to there."""
    point = int(source.name.split("-")[1])
    config = branch_config(json.loads((main_dir / RUN_CONFIG).read_text(encoding="utf-8")), steps, decay_fraction)
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    names = [*outputs.KINDS["run"].names, INPUTS_FILE]
    with outputs.writing(branch_dir, "run", inputs, reuse=True, names=names,
                         keep=lambda: bool(ckpt.checkpoint_steps(branch_dir))):
        atomic_write_text(branch_dir / RUN_CONFIG, text)
        atomic_write_text(branch_dir / INPUTS_FILE, (main_dir / INPUTS_FILE).read_text(encoding="utf-8"))
        metrics = main_dir / "metrics.jsonl"
        lines = metrics.read_text(encoding="utf-8").splitlines() if metrics.is_file() else []
        kept = [line for line in lines if line.strip() and int(json.loads(line).get("step", 0)) <= point]
        atomic_write_text(branch_dir / "metrics.jsonl", "".join(line + "\n" for line in kept))
        fileio.make_dirs(branch_dir / ckpt.CHECKPOINTS)
        target = branch_dir / ckpt.CHECKPOINTS / source.name
        with atomic_dir(target) as tmp:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
            atomic_write_text(tmp / ckpt.CONFIG_FILE, text)
        atomic_write_text(branch_dir / ckpt.CHECKPOINTS / ckpt.LATEST, target.name + "\n")
    return target


class BranchSaver:
    """A plain callback of the main run: at each branch point, a checkpoint of that step, copied
    into the branch's run directory at once (before a later save can prune it)."""

    def __init__(self, branches: dict[int, list[tuple[Path, int]]], decay_fraction: float,
                 inputs: Sequence[Path]) -> None:
        self.branches, self.decay_fraction, self.inputs = branches, decay_fraction, list(inputs)

    def __call__(self, trainer: Any, step: int) -> None:
        if step not in self.branches:
            return
        latest = ckpt.latest_checkpoint(trainer.run_dir)
        source = latest if latest is not None and latest.name == ckpt.step_name(step) else trainer.save()
        for branch_dir, steps in self.branches[step]:
            make_branch(trainer.run_dir, source, branch_dir, steps, self.decay_fraction, self.inputs)
            log.info("step %d: branch for %d steps copied to %s", step, steps, branch_dir)


def _last_step(run_dir: Path) -> int:
    done = ckpt.checkpoint_steps(run_dir)
    return done[-1][0] if done else 0


def train_preset(c: Contender, p: Plan, overrides: list[str], corpus_dir: Path, runs: Path,
                 progress: bool) -> dict[float, Path]:
    """Pre-train (or resume, or read back) the main run and every branch of ``c``: the run
    directory of each budget."""
    dirs = {b: runs / budget_name(b) for b in p.budgets}
    main_dir, total = dirs[p.budgets[-1]], p.steps[-1]
    branches: dict[int, list[tuple[Path, int]]] = {}  # two budgets may branch at one step
    for b, s, point in zip(p.budgets[:-1], p.steps[:-1], p.points[:-1]):
        branches.setdefault(point, []).append((dirs[b], s))
    done = _last_step(main_dir)
    for point, branch_dir, steps in _each(branches):  # a copy the main run was stopped before making
        if point <= done and not ckpt.checkpoint_steps(branch_dir):
            source = main_dir / ckpt.CHECKPOINTS / ckpt.step_name(point)
            if not source.is_dir():
                raise PtmError(f"cannot resume {c.label}: the main run is past step {point} but its checkpoint there, "
                               f"the branch of {branch_dir.name}, is gone; start a new output directory")
            make_branch(main_dir, source, branch_dir, steps, p.decay_fraction, [corpus_dir])
    if done < total:
        log.info("pre-training %s (%s) for %d steps, branching at %s", c.label, c.preset, total,
                 ", ".join(map(str, branches)) or "no step")
        saver = BranchSaver({k: v for k, v in branches.items() if k > done}, p.decay_fraction, [corpus_dir])
        pretrain(c.preset, corpus_dir, main_dir, overrides, resume=bool(done), overwrite=not done and main_dir.exists(),
                 verbose=progress, callbacks=[saver])
    for point, branch_dir, steps in _each(branches):
        if _last_step(branch_dir) < steps:
            log.info("%s: decaying from step %d to %d in %s", c.label, point, steps, branch_dir)
            pretrain(None, corpus_dir, branch_dir, [], resume=True, verbose=progress)
    return dirs


def _each(branches: dict[int, list[tuple[Path, int]]]) -> list[tuple[int, Path, int]]:
    return [(point, d, s) for point, items in branches.items() for d, s in items]


def _end_loss(run_dir: Path, steps: int) -> float | None:
    curve = dict(_eval_curve(run_dir))
    return curve.get(steps)


# -- the study -----------------------------------------------------------------------------------------
def budget(presets: Sequence[Contender], data: Sequence[str | Path], out_dir: str | Path, budgets: Sequence[float],
           tasks: Sequence[str] = ("mr",), protocol: Protocol = Protocol(modes=("finetune",)),
           common: Sequence[str] = (), decay_fraction: float = DECAY_FRACTION, resume: bool = False,
           progress: bool = True) -> dict[str, Any]:
    """Pre-train every preset once to the largest of ``budgets`` with WSD branches to the others,
    fine-tune every budget's model on ``tasks`` with ``protocol`` beside a random-init baseline;
    write the table, JSON and plot (see the module docstring)."""
    if not presets:
        raise PtmError("nothing to train: give at least one preset")
    labels = [c.label for c in presets]
    if len(set(labels)) != len(labels):
        raise PtmError(f"preset labels must differ, got {labels}; name them LABEL=PRESET")
    fileio.distinct_parts(labels, "preset label")
    budgets = parse_budgets([str(b) for b in budgets]) if budgets else parse_budgets("")
    out = Path(out_dir)
    settings = {"presets": [[c.label, c.preset, list(c.overrides)] for c in presets],
                "data": [fingerprint(p) for p in data], "budgets": list(budgets), "decay_fraction": decay_fraction,
                "tasks": list(tasks), "protocol": json.loads(json.dumps(protocol.__dict__, default=list)),
                "common_overrides": list(common)}
    with outputs.writing(out, "budget", inputs=list(data), reuse=resume,
                         names=[*outputs.KINDS["budget"].names, SETTINGS], keep=lambda: (out / "runs").exists()):
        check_settings(out, settings, resume)
        corpus_dir = shared_corpus(presets, data, out, common)
        corpus = Corpus.open(corpus_dir)
        costs = {c.label: probe(c, corpus, common) for c in presets}  # every plan checked before any training
        plans = {c.label: main_overrides(c, common, costs[c.label], budgets, decay_fraction) for c in presets}
        models: dict[str, dict[str, Any]] = {}
        for c in presets:
            overrides, p = plans[c.label]
            dirs = train_preset(c, p, overrides, corpus_dir, out / "runs" / c.label, progress)
            cost = costs[c.label]
            models[c.label] = {**cost, "preset": c.preset, "overrides": list(c.overrides),
                               "warmup_steps": p.warmup_steps, "main_run": str(dirs[budgets[-1]]),
                               "main_curve": [(s, s * cost["flops_per_step"], v) for s, v in _eval_curve(dirs[budgets[-1]])],
                               "budgets": [{"budget": b, "steps": s, "branch_point": point if b != budgets[-1] else None,
                                            "flops": s * cost["flops_per_step"], "loss": _end_loss(dirs[b], s),
                                            "run": str(dirs[b]), "checkpoint": str(ckpt.latest_checkpoint(dirs[b]))}
                                           for b, s, point in zip(p.budgets, p.steps, p.points)]}
            models[c.label]["fit"] = budget_report.fit_power_law(
                [(e["flops"], e["loss"]) for e in models[c.label]["budgets"] if e["loss"] is not None])
        rows = finetune_all(models, labels[0], tasks, protocol, out, resume, progress)
        scores = report.summarize(rows, keys=("model", "budget", "task"))
        result = {"budgets": list(budgets), "decay_fraction": decay_fraction, "tasks": list(tasks),
                  "protocol": protocol.__dict__, "common_overrides": list(common), "presets": models, "runs": rows,
                  "scores": scores, "kaplan_alpha": budget_report.KAPLAN_ALPHA,
                  "crossover": budget_report.crossovers(scores, labels, tasks)}
        atomic_write_text(out / "results.json", json.dumps(result, indent=2, default=list) + "\n")
        atomic_write_text(out / "table.md", budget_report.markdown(result) + "\n")
        budget_report.plot(result, out / "budget.png")
        return result


def finetune_all(models: dict[str, dict[str, Any]], first: str, tasks: Sequence[str], protocol: Protocol, out: Path,
                 resume: bool, progress: bool) -> list[dict[str, Any]]:
    """Every budget's model fine-tuned on every task (and the random-init baseline): one row per seed."""
    protocol = within_positions(protocol, models.values())
    rows: list[dict[str, Any]] = []
    for task in tasks:
        task_dir = fileio.path_part(task, "task name")
        jobs = [(e, Path(e["checkpoint"]), "pretrained", out / "finetune" / label / budget_name(e["budget"]) / task_dir)
                for label, m in models.items() for e in m["budgets"]]
        labels = [label for label, m in models.items() for _ in m["budgets"]]
        if protocol.baseline:
            largest = models[first]["budgets"][-1]
            jobs.insert(0, (None, Path(largest["checkpoint"]), "random", out / "finetune" / "random-init" / task_dir))
            labels.insert(0, budget_report.BASELINE)
        keyed = [((label, e), ck, init, where) for label, (e, ck, init, where) in zip(labels, jobs)]
        for (label, e), r in finetune_jobs(load_task(task), protocol, keyed, resume, progress):
            rows.append({"model": label, "budget": e["budget"] if e else 0.0, "steps": e["steps"] if e else 0,
                         "flops": e["flops"] if e else 0.0, "task": task, **score_row(r)})
    return rows
