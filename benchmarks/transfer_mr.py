"""First and second generation on the same small labelled task, at the same pre-training budget.

MR (movie-review polarity), a fixed subset of ``--train-size`` training sentences, 3 seeds, each
condition choosing its peak LR (and epoch) on MR dev, scored on the 1,005-sentence MR test split:

* ``elmo-features``: ELMo's biLM (``elmo-tiny``) frozen; a scalar mix of its 2L+1 layers (Peters
  et al. 2018, eq. 1) feeds a small BiLSTM task network (``mode=features head=bilstm``);
* ``elmo-finetune``: the same biLM fine-tuned end to end, with the scalar mix (``mix=scalar``);
* ``elmo-random``: the same LSTM architecture and word tokenizer from a random initialisation,
  fine-tuned the same way (what the biLM pre-training adds to that architecture);
* ``bert-tiny``: BERT-tiny pre-trained as ``make demo`` does (Skip-gram vectors start the word
  embeddings, then masked-LM), fine-tuned;
* ``word2vec``: the same architecture with only the Skip-gram word embeddings (MLM's start);
* ``random``: the same architecture from a random initialisation.

Both pre-trained models see the same text (PTB train + the unlabelled MR training sentences,
repeated ``--mr-copies`` times; no dev/test text) and the same training time: BERT-tiny runs the
demo's 1,500 steps, ELMo is stopped at the wall time BERT-tiny took (``train.max_seconds``).
Pre-training runs are reused when ``--out`` already holds them (delete them to re-measure);
``--bert-run`` reuses the BERT-tiny run of a ``make demo`` output (same settings).

    python benchmarks/transfer_mr.py [--out runs/transfer-mr] [--seeds 1 2 3] [--train-size 500] [--quick]

Prints a table and, as the last line, one JSON object; writes ``transfer_mr.png`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

LABELS = {
    "elmo-features": "ELMo biLM, features (frozen, scalar mix + BiLSTM head)",
    "elmo-finetune": "ELMo biLM, fine-tuned (scalar mix)",
    "elmo-random": "random init (ELMo arch.), fine-tuned",
    "bert-tiny": "BERT-tiny (word2vec init + MLM), fine-tuned",
    "word2vec": "word2vec embeddings only (BERT-tiny arch.), fine-tuned",
    "random": "random init (BERT-tiny arch.), fine-tuned",
}


def pretrain_once(preset, files, run_dir: Path, overrides):
    """Pre-train unless ``run_dir`` already holds a finished run; return (run_dir, seconds)."""
    from ptmkit.workflows.pretrain import pretrain

    stamp = run_dir / "pretrain_seconds.json"
    if stamp.is_file():
        return run_dir, json.loads(stamp.read_text())["seconds"]
    t0 = time.perf_counter()
    pretrain(preset, files, run_dir, overrides=list(overrides), overwrite=run_dir.exists(), verbose=True)
    seconds = time.perf_counter() - t0
    stamp.write_text(json.dumps({"seconds": seconds}))
    return run_dir, seconds


def plot(summary, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in LABELS if n in summary]
    fig, ax = plt.subplots(figsize=(10, 4.4))
    for x, name in enumerate(names):
        acc = summary[name]["test_accuracy"]
        ax.bar(x, acc["mean"], yerr=acc["sd"], capsize=6, alpha=0.8, width=0.6)
        ax.scatter(x + np.linspace(-0.12, 0.12, len(acc["values"])), acc["values"], color="black", s=14, zorder=3)
        ax.text(x, acc["mean"] + acc["sd"] + 0.004, f"{acc['mean']:.3f}", ha="center", va="bottom")
    ax.set_xticks(range(len(names)), names, fontsize=9)
    lo = min(min(summary[n]["test_accuracy"]["values"]) for n in names)
    ax.set_ylim(max(0.0, lo - 0.05), 1.0 if lo > 0.9 else min(1.0, lo + 0.25))
    ax.axhline(0.5, color="red", lw=0.8, ls="--")
    ax.set_ylabel("MR test accuracy")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/transfer-mr")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--train-size", type=int, default=500)
    ap.add_argument("--mr-copies", type=int, default=8)
    ap.add_argument("--lrs", nargs="+", type=float, default=[3e-4, 1e-3, 3e-3])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--elmo-steps", type=int, default=1300,
                    help="ELMo's schedule length: about what fits the time budget (0.27 s/step on an idle 2-core "
                         "CPU), so its cosine schedule ends near the stop")
    ap.add_argument("--bert-run", default=None, metavar="DIR",
                    help="reuse a finished BERT-tiny pre-training with the demo's settings (e.g. a `make demo` "
                         "output's pretrain/ directory); its time is read from the demo's results.json")
    ap.add_argument("--quick", action="store_true", help="tiny settings that exercise every stage (no meaningful result)")
    args = ap.parse_args()

    import torch

    from ptmkit.data.sources.base import fetch
    from ptmkit.data.tasks import load_task
    from ptmkit.pretrained import load_pretrained
    from ptmkit.workflows.demo import DemoConfig, quick_config
    from ptmkit.workflows.finetune import run_seeds
    from ptmkit.workflows.pretrain import initial_model
    from ptmkit.workflows.report import format_table
    from ptmkit.workflows.report import summarize_inits as summarize

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    demo = quick_config() if args.quick else DemoConfig()
    ptb, mr = fetch("ptb"), fetch("mr")
    task = load_task("mr").with_train_size(args.train_size, seed=demo.train_subset_seed)
    files = [ptb / "train.txt"] + [mr / "unlabeled_train.txt"] * (1 if args.quick else args.mr_copies)
    if args.quick:
        from ptmkit.workflows.demo import head_copies

        files = head_copies(files, 2000, out / "text")

    if args.bert_run:
        bert_dir = Path(args.bert_run)
        bert_s = json.loads((bert_dir.parent / "results.json").read_text())["stage_times_s"]["pretrain"]
    else:
        bert_dir, bert_s = pretrain_once("bert-tiny", files, out / "bert-tiny", demo.pretrain_overrides)
    elmo_over = [f"train.max_seconds={bert_s:.0f}", f"train.max_steps={args.elmo_steps}", "train.warmup_steps=100", "train.eval_every=250",
                 "train.eval_batches=10", "train.eval_fraction=0.02", "train.save_every=0", "train.log_every=25"]
    if args.quick:
        elmo_over = ["train.max_steps=20", "train.batch_size=8", "train.seq_len=16", "train.eval_every=10",
                     "train.eval_batches=2", "train.save_every=0", "train.log_every=5", "model.hidden_size=64",
                     "model.projection_size=32", f"train.max_seconds={bert_s:.0f}"]
    elmo_dir, elmo_s = pretrain_once("elmo-tiny", files, out / "elmo-tiny", elmo_over)

    base = demo.finetune if not args.quick else replace(demo.finetune, epochs=2)
    lrs = [args.lrs[0]] if args.quick else list(args.lrs)
    conditions = {
        "elmo-features": (load_pretrained(elmo_dir, heads=False), replace(base, mode="features", head="bilstm", head_hidden=64,
                                                                          pooling="mean"), "pretrained"),
        "elmo-finetune": (load_pretrained(elmo_dir, heads=False), replace(base, mix="scalar", pooling="mean"), "pretrained"),
        "elmo-random": (load_pretrained(elmo_dir, heads=False), replace(base, mix="scalar", pooling="mean"), "random"),
        "bert-tiny": (load_pretrained(bert_dir, heads=False), base, "pretrained"),
        "word2vec": (initial_model(bert_dir), base, "pretrained"),
        "random": (load_pretrained(bert_dir, heads=False), base, "random"),
    }
    results, times = [], {}
    for name, (model, cfg, init) in conditions.items():
        t0 = time.perf_counter()
        print(f"\n== {name}: {LABELS[name]} ==", flush=True)
        runs = run_seeds(model, task, out / "finetune" / name, cfg, [init], list(args.seeds), lrs=lrs, resume=True)
        results += [{**r, "init": name} for r in runs]
        times[name] = round(time.perf_counter() - t0, 1)

    summary = summarize(results)
    table = format_table(summary, LABELS)
    print("\n" + table)
    title = f"MR test accuracy, {len(task.train)} training sentences; pre-training {bert_s:.0f} s each"
    plot(summary, out / "transfer_mr.png", title)
    metrics = {
        name: {"test_accuracy_mean": s["test_accuracy"]["mean"], "test_accuracy_sd": s["test_accuracy"]["sd"],
               "dev_accuracy_mean": s["dev_accuracy"]["mean"]}
        for name, s in summary.items()
    }
    result = {
        "train_size": len(task.train), "seeds": args.seeds, "lrs": lrs,
        "pretrain_seconds": {"bert-tiny": round(bert_s, 1), "elmo-tiny": round(elmo_s, 1)},
        "finetune_seconds": times, "results": metrics,
    }
    (out / "results.json").write_text(json.dumps({**result, "summary": summary, "runs": results}, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
