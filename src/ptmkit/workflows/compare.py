"""``ptm compare``: pre-training objectives at equal compute, then the same downstream protocol.

Every contender (a preset, with its own overrides) is pre-trained on **the same corpus with the
same tokenizer** for **the same budget**: a number of FLOPs (forward + backward, counted on the
contender's own training batches by :func:`ptmkit.flops.step_flops`, so ELECTRA pays for its
generator and ALBERT's shared layers cost their full compute), or of minutes (steps from a timed
probe, and ``train.max_seconds`` as the hard stop).  The number of steps follows from the budget;
the LR schedule, warm-up (at most 10 % of the steps unless set) and evaluation points (ten per
run unless set) follow the steps.  Then each contender is fine-tuned on the same tasks with the
protocol of ``ptm evaluate`` (:class:`ptmkit.workflows.evaluate.Protocol`: a fixed training subset, the
first ``eval_size`` dev/test examples, the LR chosen on dev, several seeds), at ``points``
checkpoints spread over its budget, beside a from-scratch baseline (the first contender's
architecture, randomly initialised).

With ``init_from`` (``--init-from RUN``) every contender *continues* RUN instead of starting from
scratch (:func:`ptmkit.workflows.pretrain.continued_start`: RUN's encoder and tokenizer, each
contender's objective): text is prepared with RUN's tokenizer, the FLOPs are counted on RUN's
architecture with each objective's heads, and the baseline row is RUN itself, fine-tuned without
further pre-training ("start").

Output directory::

    OUT/data/                      the shared tokenizer and prepared corpus
    OUT/runs/<label>/              one pre-training run per contender
    OUT/finetune/<label>/step-N/<task>/   fine-tuning runs (from-scratch/<task>/ for the baseline)
    OUT/results.json               every figure, per seed
    OUT/table.md                   one row per contender
    OUT/compare.png                held-out loss vs FLOPs; downstream score vs FLOPs (mean ± sd)

The held-out loss is each objective's own loss (MLM's cross-entropy over masked tokens,
ELECTRA's generator + weighted discriminator loss, ...): it shows each run's progress, it does
not rank objectives; the downstream scores do.  An interrupted comparison continues with
``resume=True``: finished runs are read back, an interrupted pre-training resumes from its last
checkpoint.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from ptmkit import fileio, outputs
from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides, from_dict
from ptmkit.data.batches import PretrainBatches
from ptmkit.data.corpus import Corpus
from ptmkit.data.prepare import prepare
from ptmkit.data.tasks import load_task
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.flops import format_flops, step_flops
from ptmkit.identity import fingerprint
from ptmkit.tokenization import Tokenizer
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.config import TrainConfig
from ptmkit.workflows import report
from ptmkit.workflows.evaluate import Protocol, protocol_config, protocol_data
from ptmkit.workflows.finetune import run_seeds
from ptmkit.workflows.pretrain import continued_start, load_config, pretrain
from ptmkit.workflows.rundir import SETTINGS, check_settings

log = logging.getLogger(__name__)

# A contender with ten evaluations of its held-out loss draws a curve; warm-up past a tenth of a
# short budget would leave no steps at the peak LR.
EVALS_PER_RUN = 10
MAX_WARMUP_FRACTION = 0.1
_SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


@dataclass(frozen=True)
class Contender:
    """One pre-training recipe: ``preset`` with ``overrides`` (``key=value``), shown as ``label``."""

    label: str
    preset: str
    overrides: tuple[str, ...] = ()


def parse_contender(spec: str) -> Contender:
    """``PRESET``, ``LABEL=PRESET`` or ``[LABEL=]PRESET:key=value,key=value``.

    >>> parse_contender("static=roberta-tiny:objective.mask_schedule=static")
    Contender(label='static', preset='roberta-tiny', overrides=('objective.mask_schedule=static',))
    """
    head, sep, tail = spec.partition(":")
    label, eq, preset = head.partition("=")
    if not eq:
        label, preset = head, head
    label, preset = label.strip(), preset.strip()
    if not preset or not label:
        raise PtmError(f"cannot read the contender {spec!r}: use PRESET, LABEL=PRESET or LABEL=PRESET:key=value,key=value")
    if not re.fullmatch(r"[\w.+-]+", label) or label.strip(".") == "":
        raise PtmError(f"contender label {label!r} must be letters, digits and . + - _, not only dots (it names a "
                       f"directory)")
    fileio.path_part(label, "contender label")
    # split on the commas that start a new key=value, so list values like [0.9,0.98] survive
    overrides = tuple(o.strip() for o in re.split(r",(?=\s*[\w.]+=)", tail) if o.strip()) if sep else ()
    for o in overrides:
        if "=" not in o:
            raise PtmError(f"override {o!r} of the contender {spec!r} is not of the form key=value")
    return Contender(label, preset, overrides)


@dataclass(frozen=True)
class Budget:
    """Either ``flops`` (forward + backward FLOPs per contender) or ``minutes`` of training."""

    flops: float | None = None
    minutes: float | None = None

    def __str__(self) -> str:
        return format_flops(self.flops) if self.flops is not None else f"{self.minutes:g} min"


def parse_budget(text: str) -> Budget:
    """``3e13``, ``30T`` or ``30TFLOPs`` (FLOPs; suffixes k M G T P), or ``15min`` (minutes)."""
    s = str(text).strip()
    m = re.fullmatch(r"([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(min|minutes?)", s)
    if m:
        value = float(m.group(1))
        if value > 0:
            return Budget(minutes=value)
    m = re.fullmatch(r"([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([kMGTP]?)(?:FLOPs?|flops?)?", s)
    if m:
        value = float(m.group(1)) * _SUFFIX[m.group(2)]
        if value > 0:
            return Budget(flops=value)
    raise PtmError(f"cannot read the budget {text!r}: give FLOPs (3e13, 30T) or minutes (15min), greater than 0")


# -- the shared corpus ---------------------------------------------------------------------------------
def _raw_config(c: Contender, common: Sequence[str]) -> dict[str, Any]:
    return apply_overrides(load_config(c.preset), [*common, *c.overrides])


def shared_corpus(contenders: Sequence[Contender], data: Sequence[str | Path], out: Path,
                  common: Sequence[str] = (), init_from: str | Path | None = None) -> Path:
    """The prepared corpus every contender trains on: ``data`` itself when it is one, else the text
    prepared into ``out/data`` with one tokenizer, trained on it with the first contender's
    tokenizer section (after ``common``), and T5's sentinels if any contender asks for them, or
    the tokenizer of ``init_from`` when the contenders continue that run.
    An existing ``out/data`` is reused (a resumed comparison sees the same token ids)."""
    paths = [Path(p) for p in data]
    if not paths:
        raise PtmError("no training data given: pass a prepared corpus directory or text file(s) with --data")
    if len(paths) == 1 and (paths[0] / "meta.json").is_file():
        return paths[0]
    for p in paths:
        if not p.is_file():
            raise PtmError(f"training data not found: {p} (give text files or one prepared corpus directory)")
    target = out / "data"
    if (target / "meta.json").is_file():
        return target
    if init_from is not None:
        prepare(paths, Tokenizer.load(ckpt.resolve_checkpoint(init_from) / ckpt.TOKENIZER_FILE), target, overwrite=True)
        return target
    sections = [dict(_raw_config(c, common).get("tokenizer") or {}) for c in contenders]
    section = sections[0]
    extra = max(int(s.get("extra_ids", 0) or 0) for s in sections)
    if extra:
        section["extra_ids"] = extra
    kind, vocab_size = section.pop("kind", "wordpiece"), section.pop("vocab_size", 30522)
    try:
        tokenizer = Tokenizer.train(paths, kind=kind, vocab_size=vocab_size, **section)
    except TypeError as exc:
        raise PtmError(f"invalid tokenizer section {section}: {exc}") from exc
    prepare(paths, tokenizer, target, overwrite=True)
    return target


# -- budgets -> steps ---------------------------------------------------------------------------------
def probe(c: Contender, corpus: Any, common: Sequence[str], timed_steps: int = 0,
          init_from: str | Path | None = None) -> dict[str, Any]:
    """Size and cost of ``c`` on ``corpus``: parameters, FLOPs per step (mean over three training
    batches) and, with ``timed_steps``, seconds per forward + backward step.  With ``init_from``,
    of ``c`` continuing that run (its architecture)."""
    overrides = [*common, *c.overrides]
    tokenizer = corpus.load_tokenizer()
    if init_from is not None:
        raw = continued_start(c.preset, init_from, overrides).raw
        config = resolve_config(raw, tokenizer, [*overrides, f"model.vocab_size={raw['model']['vocab_size']}"])
    else:
        config = resolve_config(_raw_config(c, common), tokenizer, overrides)
    train = from_dict(TrainConfig, config["train"], "train")
    model = build_model(config, tokenizer)
    spans = model.objective.example_spans(corpus, train.seq_len)
    if len(spans) < train.batch_size:
        raise PtmError(f"{c.label}: the corpus gives {len(spans)} examples of <= {train.seq_len} tokens, fewer than "
                       f"train.batch_size={train.batch_size}; use more text or a smaller batch")
    batches = PretrainBatches(corpus, model.objective, spans, seq_len=train.seq_len, batch_size=train.batch_size,
                              seed=train.seed)
    table = model.backbone.input_embeddings()
    n_params = sum(p.numel() for p in model.parameters())
    result = {"parameters": n_params, "non_embedding_parameters": n_params - (table.weight.numel() if table is not None else 0),
              "flops_per_step": step_flops(model, batches), "warmup_steps": train.warmup_steps,
              "objective": config["objective"]["name"], "max_position": config["model"].get("max_position")}
    if timed_steps:
        model.train()
        t0 = time.perf_counter()
        for step in range(timed_steps):
            model(batches(0, step % batches.steps_per_epoch)).loss.backward()
        model.zero_grad(set_to_none=True)
        # the optimizer's update and the logging add about a tenth to forward + backward
        result["seconds_per_step"] = 1.1 * (time.perf_counter() - t0) / timed_steps
    return result


def _pinned(overrides: Sequence[str], key: str) -> bool:
    return any(o.partition("=")[0].strip() == key for o in overrides)


def run_overrides(c: Contender, common: Sequence[str], cost: dict[str, Any], budget: Budget, points: int) -> tuple[list[str], int]:
    """The contender's ``ptm pretrain`` overrides under ``budget``, and its number of steps."""
    given = [*common, *c.overrides]
    if budget.flops is not None:
        steps = int(budget.flops // cost["flops_per_step"])
    else:
        steps = int(60 * budget.minutes // cost["seconds_per_step"])
    if steps < 1:
        raise PtmError(f"the budget {budget} buys {c.label} less than one training step "
                       f"({cost['flops_per_step']:.3g} FLOPs per step); raise --budget")
    # ceil: points - 1 checkpoints before the end plus the final one (floor would put one at
    # points * (steps // points), a step or two before the end, in place of the first point)
    extra = [f"train.max_steps={steps}", f"train.save_every={max(1, -(-steps // points))}",
             f"train.keep_checkpoints={points + 1}"]
    if budget.minutes is not None:
        extra.append(f"train.max_seconds={60 * budget.minutes}")
    if not _pinned(given, "train.eval_every"):
        extra.append(f"train.eval_every={max(1, steps // EVALS_PER_RUN)}")
    if not _pinned(given, "train.warmup_steps"):
        extra.append(f"train.warmup_steps={min(cost['warmup_steps'], int(MAX_WARMUP_FRACTION * steps))}")
    return [*given, *extra], steps


# -- pre-training and fine-tuning ----------------------------------------------------------------------
def _pretrain(c: Contender, corpus_dir: Path, run_dir: Path, overrides: list[str], steps: int, progress: bool,
              init_from: str | Path | None = None) -> list[tuple[int, Path]]:
    """Pre-train (or resume, or read back) ``c``; its checkpoints, oldest first.  A finished run
    leaves ``run_dir.done``: a run stopped by its time budget before ``steps`` is finished too."""
    marker = run_dir.with_name(run_dir.name + ".done")
    done = ckpt.checkpoint_steps(run_dir)
    if not marker.is_file():
        log.info("pre-training %s (%s) for %d steps", c.label, c.preset, steps)
        pretrain(c.preset, corpus_dir, run_dir, overrides, resume=bool(done), overwrite=not done and run_dir.exists(),
                 verbose=progress, init_from=init_from if not done else None)
        done = ckpt.checkpoint_steps(run_dir)
        atomic_write_text(marker, json.dumps({"steps": done[-1][0] if done else 0}) + "\n")
    return done


def _eval_curve(run_dir: Path) -> list[tuple[int, float]]:
    """``(step, held-out loss)`` of every evaluation in the run's metrics log."""
    curve = []
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        rec = json.loads(line)
        if rec.get("split") == "eval" and "loss" in rec:
            curve.append((int(rec["step"]), float(rec["loss"])))
    return sorted(dict(curve).items())


def _training_seconds(run_dir: Path) -> float:
    elapsed = 0.0
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        rec = json.loads(line)
        if rec.get("split") == "train" and "elapsed" in rec:
            elapsed = max(elapsed, float(rec["elapsed"]))
    return elapsed


def within_positions(protocol: Protocol, models: Any) -> Protocol:
    """``protocol`` at a length every model's position table covers (``max_position`` of each)."""
    positions = [m["max_position"] for m in models if m.get("max_position")]
    return replace(protocol, max_seq_len=min([protocol.max_seq_len, *positions]))


def finetune_jobs(task_data: Any, protocol: Protocol, jobs: Sequence[tuple[Any, Path, str, Path]], resume: bool,
                  progress: bool) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Fine-tune each job ``(key, checkpoint, init, directory)`` on ``task_data`` (a loaded task)
    under ``protocol`` (finetune mode, the LR chosen on dev, every seed); ``(key, result)`` per
    seed, job by job."""
    data_t = protocol_data(task_data, protocol)
    cfg = protocol_config(data_t, "finetune", protocol)
    for key, ck, init, where in jobs:
        for r in run_seeds(str(ck), data_t, where, cfg, [init], list(protocol.seeds), overwrite=not resume,
                           progress=progress, lrs=list(protocol.lrs), resume=resume):
            yield key, r
        log.info("%s done", "/".join(Path(where).parts[-3:]))  # LABEL/step-N/TASK: short under any OUT


def score_row(result: dict[str, Any]) -> dict[str, Any]:
    """The per-seed fields of a report row: seed, metric, test and dev scores in it, the LR chosen."""
    metric = result["select"]
    return {"seed": result["seed"], "metric": metric, "test": result["test"][metric], "dev": result["dev"][metric],
            "lr": result["config"]["lr"]}


def compare(contenders: Sequence[Contender], data: Sequence[str | Path], out_dir: str | Path, budget: Budget,
            tasks: Sequence[str] = ("mr",), protocol: Protocol = Protocol(modes=("finetune",)), common: Sequence[str] = (),
            points: int = 1, resume: bool = False, progress: bool = True,
            init_from: str | Path | None = None) -> dict[str, Any]:
    """Pre-train every contender on the same corpus at ``budget``, fine-tune each on ``tasks`` with
    ``protocol`` (finetune mode) at ``points`` checkpoints; write the table, JSON and plot (see the
    module docstring).  ``common``: overrides given to every contender before its own;
    ``init_from``: a run or checkpoint every contender continues (its row "start" is the baseline)."""
    if not contenders:
        raise PtmError("nothing to compare: give at least one preset")
    labels = [c.label for c in contenders]
    if len(set(labels)) != len(labels):
        raise PtmError(f"contender labels must differ, got {labels}; name them LABEL=PRESET")
    fileio.distinct_parts(labels, "contender label")
    if points < 1:
        raise PtmError(f"points must be >= 1, got {points}")
    out = Path(out_dir)
    settings = {"contenders": [[c.label, c.preset, list(c.overrides)] for c in contenders],
                "data": [fingerprint(p) for p in data], "budget": {"flops": budget.flops, "minutes": budget.minutes},
                "tasks": list(tasks), "protocol": json.loads(json.dumps(protocol.__dict__, default=list)),
                "common_overrides": list(common), "points": points,
                **({"init_from": fingerprint(init_from)} if init_from is not None else {})}
    start = ckpt.resolve_checkpoint(init_from) if init_from is not None else None
    inputs = [*data, *([start] if start is not None else [])]
    with outputs.writing(out, "compare", inputs=inputs, reuse=resume, names=[*outputs.KINDS["compare"].names, SETTINGS],
                         keep=lambda: (out / "runs").exists()):
        check_settings(out, settings, resume)
        corpus_dir = shared_corpus(contenders, data, out, common, start)
        corpus = Corpus.open(corpus_dir)

        runs: dict[str, dict[str, Any]] = {}
        for c in contenders:
            cost = probe(c, corpus, common, timed_steps=3 if budget.minutes is not None else 0, init_from=start)
            overrides, steps = run_overrides(c, common, cost, budget, points)
            run_dir = out / "runs" / c.label
            t0 = time.perf_counter()
            checkpoints = _pretrain(c, corpus_dir, run_dir, overrides, steps, progress, start)
            curve = _eval_curve(run_dir)
            runs[c.label] = {**cost, "preset": c.preset, "overrides": list(c.overrides), "steps": steps,
                             "steps_done": checkpoints[-1][0] if checkpoints else 0,
                             "flops": (checkpoints[-1][0] if checkpoints else 0) * cost["flops_per_step"],
                             "seconds": _training_seconds(run_dir) or round(time.perf_counter() - t0, 1),
                             "eval_curve": [(s, s * cost["flops_per_step"], v) for s, v in curve],
                             "checkpoints": [(s, str(p)) for s, p in checkpoints[-points:]]}
            log.info("%s: %d steps, %.3g FLOPs", c.label, runs[c.label]["steps_done"], runs[c.label]["flops"])

        protocol = within_positions(protocol, runs.values())
        rows: list[dict[str, Any]] = []
        for task in tasks:
            task_dir = fileio.path_part(task, "task name")
            jobs = [(label, step, Path(path), "pretrained", out / "finetune" / label / f"step-{step}" / task_dir)
                    for label, r in runs.items() for step, path in r["checkpoints"]]
            if protocol.baseline and start is not None:  # the run every contender continued, as it is
                jobs.insert(0, ("start", 0, start, "pretrained", out / "finetune" / "start" / task_dir))
            elif protocol.baseline:
                first = runs[labels[0]]
                jobs.insert(0, ("from scratch", 0, Path(first["checkpoints"][-1][1]), "random",
                                out / "finetune" / "from-scratch" / task_dir))
            for (label, step), r in finetune_jobs(load_task(task), protocol, [((label, step), ck, init, where)
                                                                  for label, step, ck, init, where in jobs], resume, progress):
                fps = runs[label]["flops_per_step"] if label in runs else 0.0
                rows.append({"model": label, "step": step, "flops": step * fps, "task": task, **score_row(r)})

        scores = report.summarize(rows, keys=("model", "step", "task"))
        result = {"budget": {"flops": budget.flops, "minutes": budget.minutes}, "tasks": list(tasks),
                  "init_from": str(Path(init_from).resolve()) if init_from is not None else None,
                  "protocol": protocol.__dict__, "common_overrides": list(common), "contenders": runs, "runs": rows,
                  "scores": scores}
        atomic_write_text(out / "results.json", json.dumps(result, indent=2, default=list) + "\n")
        atomic_write_text(out / "table.md", markdown(result) + "\n")
        plot(result, out / "compare.png")
        return result


# -- reporting -----------------------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> str:
    """One row per contender at its full budget (and the from-scratch baseline)."""
    tasks = result["tasks"]
    metric = {s["task"]: s["metric"] for s in result["scores"]}
    final = {}
    for s in result["scores"]:
        key = (s["model"], s["task"])
        if key not in final or s["step"] > final[key]["step"]:
            final[key] = s
    cells = lambda m: [report.mean_sd(final[m, t]) if (m, t) in final else "–" for t in tasks]  # noqa: E731
    head = ["objective", "preset", "params (non-emb.)", "FLOPs/step", "steps", "FLOPs", "minutes", "held-out loss",
            *(f"{t} ({metric.get(t, '')})" for t in tasks)]
    rows = []
    for base in ("from scratch", "start"):  # the baseline: random weights, or the run every contender continued
        if any(m == base for m, _ in final):
            what = Path(result["init_from"]).name if base == "start" and result.get("init_from") else "–"
            rows.append([base, what, "–", "–", "0", "0", "–", "–", *cells(base)])
    for label, r in result["contenders"].items():
        loss = f"{r['eval_curve'][-1][2]:.3f}" if r["eval_curve"] else "–"
        params = f"{r['parameters'] / 1e6:.2f}M ({r['non_embedding_parameters'] / 1e6:.2f}M)"
        preset = r["preset"] + (" " + " ".join(r["overrides"]) if r["overrides"] else "")
        rows.append([label, preset, params, format_flops(r["flops_per_step"]), str(r["steps_done"]),
                     format_flops(r["flops"]), f"{r['seconds'] / 60:.1f}", loss, *cells(label)])
    return "\n".join(report.markdown_table(head, rows))


def plot(result: dict[str, Any], path: Path) -> None:
    """Left: each contender's held-out loss against FLOPs.  Then one panel per task: test score
    against FLOPs (mean ± sd over seeds), the baseline's score (from scratch, or the run all
    continued) as a dashed line."""
    tasks = result["tasks"]
    labels = list(result["contenders"])
    # one colour and marker per contender in every panel (tab10 repeats after ten)
    colours = report.colours(len(labels))
    style = {label: dict(color=colours[i % len(colours)], marker="os^vDP*Xph<>"[i % 12]) for i, label in enumerate(labels)}
    fig = report.figure(5.5 * (1 + len(tasks)), 4.5)
    axes = fig.subplots(1, 1 + len(tasks), squeeze=False)
    ax = axes[0][0]
    for label, r in result["contenders"].items():
        if r["eval_curve"]:
            ax.plot([f for _, f, _ in r["eval_curve"]], [v for _, _, v in r["eval_curve"]], markersize=4, label=label,
                    **style[label])
    ax.set_xlabel("training FLOPs (forward + backward)")
    ax.set_yscale("log")  # objectives' losses differ by an order of magnitude (ELECTRA's weighted sum)
    ax.set_ylabel("held-out loss (each objective's own)")
    ax.set_title(f"pre-training, budget {Budget(**result['budget'])}")
    ax.legend(fontsize=7)
    for k, task in enumerate(tasks):
        ax = axes[0][k + 1]
        points = {label: sorted((s["flops"], s["mean"], s["sd"]) for s in result["scores"]
                                if s["model"] == label and s["task"] == task) for label in labels}
        if all(len(p) <= 1 for p in points.values()):  # one budget each: bars read better than dots
            finals = [p[-1] if p else (0.0, 0.0, 0.0) for p in points.values()]
            ax.bar(range(len(labels)), [f[1] for f in finals], yerr=[f[2] for f in finals], capsize=3,
                   color=[style[label]["color"] for label in labels])
            ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=8)
            low = min([f[1] - f[2] for f in finals if f[1]] or [0.0])
            ax.set_ylim(bottom=max(0.0, low - 0.05))
        else:
            for label, pts in points.items():
                if pts:
                    ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], capsize=3,
                                label=label, **style[label])
            ax.set_xlabel("pre-training FLOPs")
            ax.set_xlim(left=0)
        for name in ("from scratch", "start"):
            base = [s for s in result["scores"] if s["model"] == name and s["task"] == task]
            if base:
                ax.axhline(base[0]["mean"], color="grey", linestyle="--", label=name)
        metric = next((s["metric"] for s in result["scores"] if s["task"] == task), "score")
        ax.set_ylabel(f"test {metric} (mean ± sd over seeds)")
        ax.set_title(f"{task}, after pre-training at equal FLOPs")
        ax.legend(fontsize=7)
    report.save(fig, path)
