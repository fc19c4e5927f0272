"""Prune a fine-tuned model and measure what it cost and gained: the workflow behind ``ptm prune``.

1. OUT is checked before anything slow; the task model is loaded
   (:func:`ptmkit.tasks.saved.load_task_model`) on the task it was fine-tuned on, or on the task
   given again (the user's own files); its dev and test scores are the baseline.
2. By method (:mod:`ptmkit.compress.pruning`):

   * ``heads``: attention heads masked in steps of 10 % of all heads, least important first
     (Michel et al. 2019; importance re-estimated on the dev split after every step) or in a seeded
     random order; with ``curve`` both orders are walked to 90 % (as far as every layer keeping one
     head allows), scoring dev and test at each step.  The fraction is the one asked for, or else
     the largest step whose dev score lies within ``tolerance`` (1 point) of the unpruned one.
     The heads masked at that fraction are then cut out of the weights (``prune_heads``).
   * ``layers``: the encoder keeps the layers ``keep_layers`` (renumbered; Transformer encoder).
   * ``magnitude``: global unstructured L1 pruning of the encoder's linear weights to the asked
     sparsity (or the largest one within ``tolerance`` on dev), made permanent; with ``curve``
     sparsity 0, 10, ..., 90 % scored on dev and test.

3. Both models score dev and test; their encoders are timed at batch 1 and 32 on sequences of the
   task's median length, on ``threads`` threads, in interleaved rounds (the measurement of
   ``ptm quantize``: :func:`ptmkit.workflows.quantize.interleaved_ms`).
4. OUT becomes a task model of its own (``task_model.json`` with ``compression`` = method,
   fraction, heads pruned or layers kept, source run; ``derived_from`` = the source run), which
   ``load_task_model`` and ``ptm finetune OUT --eval-only`` read, with ``results.json`` (scores,
   curve, speed, parameter counts, the CPU), the run card ``README.md`` and ``curve.png``: the
   score against the amount pruned at every step the command scored (with ``curve``: both orders
   on dev and test to 90 %, also in ``curve.json``; without: the heads masked on the way to the
   fraction, on dev, or the model before and after).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ptmkit import outputs
from ptmkit.compress.importance import head_mask_injected, head_shape, split_batches
from ptmkit.compress.pruning import (
    ORDERS,
    check_fraction,
    fractions_to,
    head_pruning_path,
    heads_for,
    keep_layers,
    magnitude_prune,
    most_prunable,
    prunable_within,
    prune_heads,
    with_mix,
)
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.runcard import write_run_card
from ptmkit.tasks.saved import encoder_of, load_task_model, save_task_model
from ptmkit.workflows.quantize import cpu_name, interleaved_ms, typical_length
from ptmkit.workflows.report import colours, figure, save

METHODS = ("heads", "layers", "magnitude")
RESULTS_FILE, CURVE_FILE, CURVE_PLOT = "results.json", "curve.json", "curve.png"
CURVE_TO = 0.9  # the curves run to 90 % of the heads / weights
BATCHES = (1, 32)


def _check(method: str, fraction: float | None, order: str, layers: Sequence[int] | None, curve: bool,
           tolerance: float, threads: int, rounds: int) -> None:
    if method not in METHODS:
        raise PtmError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if order not in ORDERS:
        raise PtmError(f"--order must be one of {', '.join(ORDERS)}, got {order!r}")
    if fraction is not None:
        check_fraction(fraction, "--fraction")
    if method == "layers":
        if layers is None:
            raise PtmError("--method layers needs --keep-layers, e.g. --keep-layers 0,2,4")
        if fraction is not None or curve:
            raise PtmError("--fraction and --curve apply to --method heads and magnitude; --method layers keeps the "
                           "layers --keep-layers names")
    elif layers is not None:
        raise PtmError(f"--keep-layers goes with --method layers (this is --method {method})")
    if not tolerance >= 0:
        raise PtmError(f"--tolerance is a drop in the dev score (0.01 = 1 point), >= 0; got {tolerance!r}")
    if threads < 1 or rounds < 1:
        raise PtmError(f"--threads and rounds must be at least 1, got {threads} and {rounds}")


def prune_run(run: str | Path, out: str | Path, method: str = "heads", fraction: float | None = None,
              order: str = "importance", layers: Sequence[int] | None = None, curve: bool = False,
              load_data: Callable[[], Any] | None = None, seed: int = 0, tolerance: float = 0.01,
              importance_split: str = "dev", batch_size: int | None = None, inputs: Sequence[Any] = (),
              overwrite: bool = False, threads: int = 2, rounds: int = 5) -> dict[str, Any]:
    """``ptm prune``: a pruned copy of the task model in ``run`` written to ``out`` (see the module
    docstring).  load_data: reads the task (``None``: the built-in task the run recorded).
    importance_split / batch_size: the labelled batches head importance is estimated on.  inputs:
    every file the command reads (refused inside ``out``).  Returns what ``OUT/results.json`` holds."""
    _check(method, fraction, order, layers, curve, tolerance, threads, rounds)
    out, run = Path(out), Path(run)
    inputs = [run, *inputs]
    outputs.check(out, "prune", inputs, overwrite)  # before any slow loading
    started = time.time()
    before_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # pruning edits the weights themselves: LoRA's updates, if any, are folded into them first
        tm = load_task_model(run, load_data() if load_data is not None else None, merged=True)
        if (tm.info.get("compression") or {}).get("quantization"):
            raise PtmError(f"{run} is quantized (int8); prune the float32 fine-tuned model it was made from "
                           f"({tm.info['compression'].get('source', 'its source run')})")
        metric = tm.task.select
        unpruned = {split: tm.evaluate(split) for split in ("dev", "test")}
        print(f"{tm.info.get('task')}: unpruned dev {metric} {unpruned['dev'][metric]:.4f}, test "
              f"{unpruned['test'][metric]:.4f}", flush=True)
        judge = Judge(metric, unpruned["dev"][metric], tolerance)
        model, cfg = copy.deepcopy(tm.model), tm.cfg
        found: dict[str, Any] = {}
        if method == "heads":
            found = _heads(tm, model, fraction, order, curve, judge, seed, importance_split, batch_size)
        elif method == "magnitude":
            found = _magnitude(tm, model, fraction, curve, judge)
        else:
            cfg = with_mix(cfg, keep_layers(model, list(layers), cfg.mix))
            found = {"compression": {"kept_layers": list(layers), "num_layers": encoder_of(model).num_layers}}
        measured = found.pop("measured", None)
        model.eval()
        pruned = {split: tm.evaluate(split, model) for split in ("dev", "test")}
        speed = encoder_speed(tm, encoder_of(tm.model), encoder_of(model), threads, rounds)
        compression = {"method": method, **found.pop("compression"), "source": str(run)}
        counts = {"before": _count(tm.model), "after": _count(model)}
        with outputs.writing(out, "prune", inputs, overwrite=overwrite) as session:
            if overwrite and session.state == "own":
                outputs.clean(out)
            save_task_model(out, model, tm.task, tm.config, tm.tokenizer, cfg,
                            derived_from={"run": str(run), "by": "ptm prune"}, compression=compression)
            results = {"source": str(run), "task": tm.info.get("task"), "task_type": tm.info.get("task_type"),
                       "select": metric, "compression": compression, "unpruned": unpruned, "dev": pruned["dev"],
                       "test": pruned["test"], **found, "num_parameters": counts, "speed": speed, "cpu": cpu_name(),
                       "time_s": round(time.time() - started, 2)}
            if found.get("curve"):
                curve_doc = {"method": method, "metric": metric, "unpruned": unpruned, "tolerance": tolerance,
                             **found["curve"]}
                atomic_write_text(out / CURVE_FILE, json.dumps(curve_doc, indent=2) + "\n")
            else:
                curve_doc = {"method": method, "metric": metric, "unpruned": unpruned, "tolerance": tolerance,
                             **(measured or _two_points(method, unpruned, pruned, _amount(compression, tm.model)))}
            plot_curve(curve_doc, out / CURVE_PLOT)
            atomic_write_text(out / RESULTS_FILE, json.dumps(results, indent=2) + "\n")
            write_run_card(out, kind="prune")
    finally:
        torch.set_num_threads(before_threads)
    print(format_results(results))
    print(f"results: {out / RESULTS_FILE}")
    return results


class Judge:
    """Whether a dev score is within ``tolerance`` of the unpruned ``base`` (``loss``: lower is better)."""

    def __init__(self, metric: str, base: float, tolerance: float) -> None:
        self.metric, self.base, self.tolerance = metric, float(base), float(tolerance)
        self.lower_is_better = metric == "loss"

    def largest(self, path: Sequence[dict[str, Any]]) -> float:
        return prunable_within(path, lambda s: s["dev"][self.metric], self.base, self.tolerance, self.lower_is_better)


def _scorer(tm: Any, splits: Sequence[str]) -> Callable[[torch.Tensor], dict[str, Any]]:
    """The scores on ``splits`` of the unpruned model under a head mask ``[layers, heads]``."""

    def score(mask: torch.Tensor) -> dict[str, Any]:
        with head_mask_injected(encoder_of(tm.model), mask.to(next(tm.model.parameters()).dtype)):
            scores = {split: tm.evaluate(split) for split in splits}
        metric = tm.task.select
        print(f"  {int((mask == 0).sum())} of {mask.numel()} heads masked: "
              + ", ".join(f"{split} {metric} {s[metric]:.4f}" for split, s in scores.items()), flush=True)
        return scores
    return score


def _heads(tm: Any, model: torch.nn.Module, fraction: float | None, order: str, curve: bool, judge: Judge, seed: int,
           split: str, batch_size: int | None) -> dict[str, Any]:
    """Walk the pruning path(s), pick the fraction, cut those heads out of ``model``."""
    L, H = head_shape(encoder_of(model))
    most = most_prunable(L, H)
    if fraction is not None and heads_for(fraction, L, H) > most:
        raise PtmError(f"--fraction {fraction:g} prunes {heads_for(fraction, L, H)} of {L * H} heads, but every layer "
                       f"keeps at least one head: at most {most} can go; whole layers go with --method layers "
                       f"--keep-layers")
    grid = [f for f in fractions_to(CURVE_TO) if heads_for(f, L, H) <= most]
    if curve or fraction is None:
        steps = sorted(set(grid) | ({fraction} if fraction is not None else set()))
    else:
        steps = fractions_to(fraction)
    batches = split_batches(tm.task, split, batch_size) if order == "importance" or curve else []
    splits = ("dev", "test") if curve else ("dev",)
    paths = {}
    for o in (ORDERS if curve else (order,)):
        print(f"masking heads in {o} order: {len(steps) - 1} steps", flush=True)
        paths[o] = head_pruning_path(tm.model, steps, o, batches, seed, score=_scorer(tm, splits))
    within = judge.largest(paths[order])
    chosen_fraction = within if fraction is None else fraction
    chosen = next(s for s in paths[order] if s["fraction"] == chosen_fraction)
    heads = {int(k): v for k, v in chosen["heads"].items()}
    prune_heads(model, heads)
    return {"fraction": chosen_fraction, "prunable_within_tolerance": {"tolerance": judge.tolerance, "fraction": within,
                                                                        "order": order},
            "masked_dev": chosen["dev"], "num_heads_pruned": chosen["heads_masked"], "total_heads": L * H,
            "curve": paths if curve else None, "measured": paths,
            "compression": {"fraction": chosen_fraction, "order": order, "seed": seed if order == "random" else None,
                            "heads_pruned": chosen["heads"], "importance_split": split}}


def _magnitude(tm: Any, model: torch.nn.Module, fraction: float | None, curve: bool, judge: Judge) -> dict[str, Any]:
    """Score the sparsity grid when needed, pick the sparsity, prune ``model`` to it."""
    path = None
    if curve or fraction is None:
        splits = ("dev", "test") if curve else ("dev",)
        path = []
        for s in fractions_to(CURVE_TO):
            trial = copy.deepcopy(tm.model)
            achieved = magnitude_prune(trial, s)
            path.append({"fraction": s, "sparsity": achieved["sparsity"],
                         **{split: tm.evaluate(split, trial) for split in splits}})
            print(f"sparsity {s:.1f}: dev {judge.metric} {path[-1]['dev'][judge.metric]:.4f}", flush=True)
    within = judge.largest(path) if path else None
    chosen = fraction if fraction is not None else within
    achieved = magnitude_prune(model, chosen)
    return {"fraction": chosen, "sparsity": achieved,
            "prunable_within_tolerance": {"tolerance": judge.tolerance, "fraction": within} if path else None,
            "curve": {"magnitude": path} if curve else None, "measured": {"magnitude": path} if path else None,
            "compression": {"fraction": chosen, "sparsity": achieved["sparsity"], "scope": "encoder linear weights"}}


def _count(model: torch.nn.Module) -> dict[str, int]:
    enc = encoder_of(model)
    return {"model": sum(p.numel() for p in model.parameters()), "encoder": sum(p.numel() for p in enc.parameters()),
            "encoder_nonzero": sum(int((p != 0).sum()) for p in enc.parameters())}


def encoder_speed(tm: Any, before: torch.nn.Module, after: torch.nn.Module, threads: int, rounds: int,
                  batches: Sequence[int] = BATCHES) -> dict[str, Any]:
    """Milliseconds per encoder call ``[B, median dev length]`` of both encoders (random token ids),
    and the speed-up (time before / time after), as ``ptm quantize`` measures."""
    seq_len = typical_length(tm)
    result: dict[str, Any] = {"threads": threads, "seq_len": seq_len, "rounds": rounds, "what": "encoder forward"}
    g = torch.Generator().manual_seed(0)
    causal = bool(tm.task.causal)
    for b in batches:
        ids = torch.randint(0, tm.tokenizer.vocab_size, (b, seq_len), generator=g)
        mask = torch.ones_like(ids)
        ms = interleaved_ms({name: (lambda m=m: m(ids, mask, causal=causal)) for name, m in
                             (("before", before.eval()), ("after", after.eval()))}, rounds)
        result[f"batch_{b}"] = {"before_ms": round(ms["before"], 3), "after_ms": round(ms["after"], 3),
                                "speedup": round(ms["before"] / ms["after"], 3)}
    return result


def _amount(compression: dict[str, Any], unpruned: torch.nn.Module) -> float:
    """How much of the model ``compression`` removed, as the curve's x: the sparsity, or the
    fraction of the encoder's layers removed."""
    if compression["method"] == "layers":
        return 1 - len(compression["kept_layers"]) / max(encoder_of(unpruned).num_layers, 1)
    return float(compression.get("sparsity", compression.get("fraction", 0.0)))


def _two_points(method: str, unpruned: dict[str, Any], pruned: dict[str, Any], amount: float) -> dict[str, Any]:
    """The curve of a command that scored no steps between them: the unpruned and the pruned model."""
    return {method: [{"fraction": 0.0, **unpruned}, {"fraction": amount, **pruned}]}


X_LABELS = {"heads": "fraction of attention heads pruned", "magnitude": "sparsity of the encoder's linear weights",
            "layers": "fraction of the encoder's layers removed"}


def plot_curve(doc: dict[str, Any], path: Path) -> Path:
    """Dev (solid) and test (dashed, where scored) score against the fraction pruned, one colour
    per order (importance vs random), for magnitude pruning or for the layers kept; the dotted line:
    the unpruned dev score minus the tolerance.  Without ``--curve`` it shows the steps the command
    scored anyway (the heads masked on the way to the fraction, on dev) or the model before and after."""
    metric = doc["metric"]
    fig = figure(6.4, 4.2)
    ax = fig.subplots()
    names = [n for n in ("importance", "random", "magnitude", "layers") if doc.get(n)]
    for name, colour in zip(names, colours(len(names))):
        steps = doc[name]
        xs = [s["fraction"] for s in steps]
        for split, style in (("dev", "-o"), ("test", "--s")):
            if all(split in s for s in steps):
                ax.plot(xs, [s[split][metric] for s in steps], style, color=colour, ms=3.5, label=f"{name} ({split})")
    base = doc["unpruned"]["dev"][metric]
    ax.axhline(base - doc["tolerance"] if metric != "loss" else base + doc["tolerance"], color="grey", lw=0.8, ls=":",
               label=f"unpruned dev {'+' if metric == 'loss' else '-'} {doc['tolerance']:g}")
    ax.set_xlabel(X_LABELS[doc["method"]])
    ax.set_ylabel(metric)
    ax.set_title(f"{doc['method']} pruning")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, path)


def format_results(results: dict[str, Any]) -> str:
    """A few lines: the method and amount, each split's score before -> after, the speed-ups."""
    c, metric = results["compression"], results["select"]
    what = {"heads": lambda: f"{c['fraction']:.3f} of the heads ({results['num_heads_pruned']} of {results['total_heads']})",
            "magnitude": lambda: f"sparsity {c['sparsity']:.3f} of the encoder's linear weights",
            "layers": lambda: f"kept layers {','.join(map(str, c['kept_layers']))}"}[c["method"]]()
    lines = [f"pruned ({c['method']}): {what}"]
    for split in ("dev", "test"):
        lines.append(f"{split} {metric}: {results['unpruned'][split][metric]:.4f} -> {results[split][metric]:.4f}")
    within = results.get("prunable_within_tolerance")
    if within:
        lines.append(f"prunable within {within['tolerance']:g} of the unpruned dev {metric}: {within['fraction']:.3f}")
    sp = results["speed"]
    for key in (k for k in sp if k.startswith("batch_")):
        b = sp[key]
        lines.append(f"speed {key.replace('_', ' ')} x {sp['seq_len']} tokens, {sp['threads']} threads: "
                     f"{b['before_ms']:.2f} ms -> {b['after_ms']:.2f} ms ({b['speedup']:.2f}x)")
    return "\n".join(lines)


__all__ = ["CURVE_FILE", "CURVE_PLOT", "METHODS", "RESULTS_FILE", "encoder_speed", "format_results", "plot_curve",
           "prune_run"]
