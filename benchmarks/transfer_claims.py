"""Three claims of the transfer-learning papers, measured on given pre-trained runs.

(a) **GPT's auxiliary LM loss helps large training sets, not small ones** (Radford et al. 2018,
    §5 "Impact of the auxiliary objective"): a causal-LM run (``--gpt``, e.g. gpt2-tiny)
    fine-tuned on MR with ``aux_lm_weight`` 0 and 0.5 (the paper's λ), on ``--small-size``
    training sentences and on ``--large-size`` (default: all 8,032).
(b) **ELMo's scalar mix of all layers beats the top layer** (Peters et al. 2018, §5.1, Table 2):
    each feature model (``--bert``, ``--elmo``) frozen, with ``mix=scalar`` and with ``mix=last``,
    under ``ptm evaluate``'s feature protocol (a BiLSTM task network) on MR and brown-pos.
(c) **Layers differ in what they encode** (Peters et al. 2018, §5.3: the first biLSTM layer is
    best for POS tagging, the top layer for word-sense disambiguation): each feature model frozen,
    one hidden state alone (``mix=layer:k``, k = 0 the token embeddings .. L the top) feeding a
    ``--probe-head`` (default ``linear``: a probe that cannot build new context, so the score is
    what the layer itself holds), on brown-pos and wordnet-wsd; the best layer per task.
(d) **Multi-task fine-tuning helps its tasks** (Liu et al. 2019, MT-DNN, Table 2): the ``--bert``
    run fine-tuned on MR and brown-pos together (one shared encoder, a head per task, the epoch
    kept by the mean dev score) against one fine-tuning per task, under the same protocol; the
    test score per task.  MT-DNN's optional per-task stage afterwards is not part of it.

Every condition follows ``ptmkit.workflows.evaluate``'s protocol: a fixed (nested) random training subset,
the first ``--eval-size`` dev and test examples, ``--epochs`` epochs, the peak LR chosen on dev
from ``--lrs`` (and the epoch by dev), ``--seeds`` seeds; the score is the test metric (accuracy
for all four tasks), reported as mean ± sd over seeds with the per-seed values in the JSON.  The
numbers are reported whichever way they come out; a difference within about one sd is no evidence.

    python benchmarks/transfer_claims.py --gpt runs/gpt --bert runs/bert [--elmo runs/elmo] \\
        [--out runs/transfer-claims] [--seeds 1 2 3] [--parts a b c d] [--quick]

Prints a table and, as the last line, one JSON object; writes ``OUT/results.json`` and
``OUT/probing.png`` (part c: score against layer, one line per task, one panel per model).
``--quick`` is a smoke setting (tiny subsets, one epoch, two seeds): it checks the script, not
the claims.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

AUX_WEIGHTS = (0.0, 0.5)
MIX_TASKS = ("mr", "brown-pos")
PROBE_TASKS = ("brown-pos", "wordnet-wsd")
MULTI_TASKS = ("mr", "brown-pos")


def measure(pre, data, out: Path, cfg, args) -> dict[str, Any]:
    """Fine-tune ``pre`` on ``data`` with ``cfg`` for every seed (LR chosen on dev); test scores."""
    from ptmkit.workflows.finetune import run_seeds

    t0 = time.perf_counter()
    runs = run_seeds(pre, data, out, cfg, ["pretrained"], list(args.seeds), overwrite=True, progress=False,
                     lrs=list(args.lrs))
    values = np.array([r["test"][r["select"]] for r in runs], dtype=np.float64)
    return {"metric": runs[0]["select"], "mean": float(values.mean()),
            "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0, "values": values.tolist(),
            "lrs": [r["config"]["lr"] for r in runs], "best_epochs": [r["best_epoch"] for r in runs],
            "n_train": len(data.train), "seconds": round(time.perf_counter() - t0, 1)}


def cell(c: dict[str, Any]) -> str:
    return f"{c['mean']:.4f} ± {c['sd']:.4f}"


def part_aux_lm(gpt: str, tasks, protocol, args, out: Path) -> dict[str, Any]:
    """(a) aux_lm_weight 0 vs 0.5 on MR at the small and the large training size."""
    from ptmkit.tasks.finetune import load_model
    from ptmkit.workflows.evaluate import protocol_config, protocol_data

    pre = load_model(gpt)
    rows = {}
    for label, size in (("small", args.small_size), ("large", args.large_size)):
        data = protocol_data(tasks("mr"), replace(protocol, train_size=size))
        for w in AUX_WEIGHTS:
            cfg = replace(protocol_config(data, "finetune", protocol), aux_lm_weight=w)
            rows[f"{label}/aux-{w:g}"] = measure(pre, data, out / "a-aux-lm" / f"n-{len(data.train)}" / f"aux-{w:g}", cfg, args)
    result = {"model": str(gpt), "task": "mr", "cells": rows}
    for label in ("small", "large"):
        result[f"gain_{label}"] = rows[f"{label}/aux-0.5"]["mean"] - rows[f"{label}/aux-0"]["mean"]
    return result


def part_scalar_mix(models: dict[str, str], tasks, protocol, args, out: Path) -> dict[str, Any]:
    """(b) features mode, ELMo's scalar mix vs the top layer, on MR and brown-pos."""
    from ptmkit.tasks.finetune import load_model
    from ptmkit.workflows.evaluate import protocol_config, protocol_data

    result = {}
    for name, run in models.items():
        pre = load_model(run)
        for task in MIX_TASKS:
            data = protocol_data(tasks(task), protocol)
            cells = {mix: measure(pre, data, out / "b-scalar-mix" / name / task / mix,
                                  replace(protocol_config(data, "features", protocol), mix=mix), args)
                     for mix in ("scalar", "last")}
            result[f"{name}/{task}"] = {"model": str(run), "task": task, "cells": cells,
                                        "gain": cells["scalar"]["mean"] - cells["last"]["mean"]}
    return result


def part_probing(models: dict[str, str], tasks, protocol, args, out: Path) -> dict[str, Any]:
    """(c) one hidden state at a time (features mode, ``--probe-head``) on brown-pos and wordnet-wsd."""
    from ptmkit.tasks.finetune import load_model
    from ptmkit.workflows.evaluate import protocol_config, protocol_data

    result = {}
    for name, run in models.items():
        pre = load_model(run)
        layers = pre.backbone.num_layers + 1
        for task in PROBE_TASKS:
            data = protocol_data(tasks(task), protocol)
            base = replace(protocol_config(data, "features", protocol), head=args.probe_head)
            scores = [measure(pre, data, out / "c-probing" / name / task / f"layer-{k}", replace(base, mix=f"layer:{k}"), args)
                      for k in range(layers)]
            means = [s["mean"] for s in scores]
            result[f"{name}/{task}"] = {"model": str(run), "task": task, "layers": scores, "best_layer": int(np.argmax(means))}
    return result


def part_multitask(run: str, tasks, protocol, args, out: Path) -> dict[str, Any]:
    """(d) MR + brown-pos fine-tuned together (MT-DNN) vs one task at a time, test score per task."""
    from ptmkit.tasks.finetune import load_model
    from ptmkit.tasks.multitask import MultiTaskData
    from ptmkit.workflows.evaluate import protocol_config, protocol_data
    from ptmkit.workflows.finetune import run_seeds

    pre = load_model(run)
    data = {t: protocol_data(tasks(t), protocol) for t in MULTI_TASKS}
    single = {t: measure(pre, d, out / "d-multitask" / "single" / t, protocol_config(d, "finetune", protocol), args)
              for t, d in data.items()}
    multi_data = MultiTaskData(dict(data))
    cfg = protocol_config(data[MULTI_TASKS[0]], "finetune", protocol)
    t0 = time.perf_counter()
    runs = run_seeds(pre, multi_data, out / "d-multitask" / "multi", cfg, ["pretrained"], list(args.seeds),
                     overwrite=True, progress=False, lrs=list(args.lrs))
    multi = {}
    for t in MULTI_TASKS:
        metric = single[t]["metric"]
        values = np.array([r["test"][f"{t}/{metric}"] for r in runs], dtype=np.float64)
        multi[t] = {"metric": metric, "mean": float(values.mean()), "values": values.tolist(),
                    "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0, "n_train": len(data[t].train),
                    "lrs": [r["config"]["lr"] for r in runs], "best_epochs": [r["best_epoch"] for r in runs],
                    "seconds": round(time.perf_counter() - t0, 1)}
    return {"model": str(run), "single": single, "multi": multi,
            "gain": {t: multi[t]["mean"] - single[t]["mean"] for t in MULTI_TASKS}}


def plot_probing(probing: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(key.split("/")[0] for key in probing))
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 3.8), squeeze=False)
    for ax, model in zip(axes[0], models):
        for key, entry in probing.items():
            if key.split("/")[0] != model:
                continue
            ks = np.arange(len(entry["layers"]))
            ax.errorbar(ks, [s["mean"] for s in entry["layers"]], yerr=[s["sd"] for s in entry["layers"]], marker="o",
                        capsize=3, label=f"{entry['task']} (best: {entry['best_layer']})")
        ax.set_xticks(ks, ["emb"] + [str(k) for k in ks[1:]])
        ax.set_xlabel("hidden state (0 = embeddings)")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{model}: one layer alone")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(result: dict[str, Any], args) -> str:
    lines = []
    seeds = f"mean ± sd over {len(args.seeds)} seeds"
    if "aux_lm" in result:
        a = result["aux_lm"]
        lines += [f"(a) auxiliary LM loss, {a['model']} fine-tuned on MR, test accuracy ({seeds})",
                  f"{'train size':<11} | {'aux 0':<15} | {'aux 0.5':<15} | aux 0.5 - aux 0"]
        for label in ("small", "large"):
            c0, c5 = a["cells"][f"{label}/aux-0"], a["cells"][f"{label}/aux-0.5"]
            lines.append(f"{c0['n_train']:<11d} | {cell(c0)} | {cell(c5)} | {a[f'gain_{label}']:+.4f}")
        lines.append("")
    if "scalar_mix" in result:
        lines += [f"(b) features mode (frozen encoder, BiLSTM head): scalar mix vs top layer, test accuracy ({seeds})",
                  f"{'model / task':<21} | {'scalar mix':<15} | {'top layer':<15} | scalar - top"]
        for key, b in result["scalar_mix"].items():
            lines.append(f"{key:<21} | {cell(b['cells']['scalar'])} | {cell(b['cells']['last'])} | {b['gain']:+.4f}")
        lines.append("")
    if "probing" in result:
        lines += [f"(c) one hidden state alone ({args.probe_head} head), test accuracy ({seeds}); 0 = embeddings"]
        for key, c in result["probing"].items():
            per = "  ".join(f"{k}: {cell(s)}" for k, s in enumerate(c["layers"]))
            lines.append(f"{key:<21} | {per} | best layer {c['best_layer']}")
        lines.append("")
    if "multitask" in result:
        d = result["multitask"]
        lines += [f"(d) multi-task (MT-DNN) vs single-task fine-tuning, {d['model']}, test score ({seeds})",
                  f"{'task':<11} | {'single task':<15} | {'multi-task':<15} | multi - single"]
        for t, gain in d["gain"].items():
            lines.append(f"{t:<11} | {cell(d['single'][t])} | {cell(d['multi'][t])} | {gain:+.4f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt", help="a causal-LM run (objective clm), for part (a)")
    ap.add_argument("--bert", help="a BERT-style run, for parts (b), (c) and (d)")
    ap.add_argument("--elmo", help="an ELMo biLM run, for parts (b) and (c)")
    ap.add_argument("--out", default="runs/transfer-claims")
    ap.add_argument("--parts", nargs="+", default=["a", "b", "c"], choices=["a", "b", "c", "d"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--lrs", nargs="+", type=float, default=[3e-4, 1e-3], help="LR grid, chosen on dev")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--train-size", type=int, default=500, help="training examples in (b) and (c)")
    ap.add_argument("--small-size", type=int, default=500, help="(a): the small training set")
    ap.add_argument("--large-size", default="all", help="(a): the large training set ('all' or a number)")
    ap.add_argument("--eval-size", type=int, default=1000, help="dev and test examples per task")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--probe-head", default="linear", choices=["linear", "mlp", "bilstm"], help="(c)'s task network")
    ap.add_argument("--quick", action="store_true", help="a smoke setting of seconds (checks the script, not the claims)")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.lrs, args.epochs = args.seeds[:2], [1e-3], 1
        args.train_size, args.small_size, args.large_size, args.eval_size, args.max_seq_len = 32, 32, "64", 32, 32
    large = None if str(args.large_size).lower() == "all" else int(args.large_size)
    args.large_size = large

    from ptmkit.data.tasks import load_task
    from ptmkit.workflows.evaluate import Protocol

    started = time.perf_counter()
    loaded: dict[str, Any] = {}

    def tasks(name: str):
        if name not in loaded:
            loaded[name] = load_task(name)
        return loaded[name]

    protocol = Protocol(train_size=args.train_size, eval_size=args.eval_size, seeds=tuple(args.seeds),
                        lrs=tuple(args.lrs), epochs=args.epochs, max_seq_len=args.max_seq_len)
    feature_models = {name: run for name, run in (("bert", args.bert), ("elmo", args.elmo)) if run}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items()}}
    if "a" in args.parts:
        if not args.gpt:
            ap.error("part a needs --gpt RUN (a run pre-trained with the clm objective)")
        result["aux_lm"] = part_aux_lm(args.gpt, tasks, protocol, args, out)
    if {"b", "c"} & set(args.parts) and not feature_models:
        ap.error("parts b and c need --bert RUN and/or --elmo RUN")
    if "b" in args.parts:
        result["scalar_mix"] = part_scalar_mix(feature_models, tasks, protocol, args, out)
    if "c" in args.parts:
        result["probing"] = part_probing(feature_models, tasks, protocol, args, out)
        plot_probing(result["probing"], out / "probing.png")
    if "d" in args.parts:
        if not args.bert:
            ap.error("part d needs --bert RUN")
        result["multitask"] = part_multitask(args.bert, tasks, protocol, args, out)
    result["seconds"] = round(time.perf_counter() - started, 1)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(report(result, args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
