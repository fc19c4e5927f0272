"""K-BERT on a model that already knows language: WordNet knowledge injected into the imported
all-MiniLM-L6-v2 at fine-tuning time, with the sentence tree's soft positions and visible
matrix (``kbert``), as plain text (``plain``: the paper's ablation, where the claim is that
injected triples add "knowledge noise") and without knowledge (``none``).

Knowledge: every WordNet surface form's most frequent sense with up to two hypernyms / holonyms
(``dog  is a  canine``; :func:`ptmkit.knowledge.lexicons.kbert_triples`).  Tasks: built-in
classification tasks (default ``wordnet-hypernym``, where lexical knowledge should help, and
``mr``, where it should not matter), a fixed training subset of ``--train-size`` examples, the
same LR for every condition, ``--seeds`` seeds; test accuracy (the epoch chosen on dev).

    python benchmarks/kbert_wordnet.py [--out runs/kbert] [--tasks wordnet-hypernym,mr] [--seeds 1 2 3]
        [--train-size 2000] [--epochs 2] [--model CKPT]

Runs already in ``--out`` are read back (``ptm finetune --resume``).  Prints a table and, as the
last line, one JSON object; writes ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

MODES = ("none", "plain", "kbert")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def minilm_checkpoint(out: Path) -> Path:
    """all-MiniLM-L6-v2 (``ptm data get minilm``) imported as a ptmkit checkpoint, once."""
    from ptmkit.cli import main
    from ptmkit.data.sources.base import fetch

    ck = out / "minilm"
    if not (ck / "config.json").is_file():
        assert main(["import", str(fetch("minilm")), "-o", str(ck), "--quiet"]) == 0
    return ck


def finetune(ck: Path, task: str, mode: str, seeds: list[int], args) -> list[dict]:
    from ptmkit.cli import main

    out = args.out / "runs" / task / mode
    argv = ["finetune", str(ck), "--task", task, "-o", str(out), "--seeds", *map(str, seeds),
            "--train-size", str(args.train_size), f"epochs={args.epochs}", f"lr={args.lr}", "batch_size=32",
            f"max_seq_len={args.max_seq_len}", f"num_threads={args.threads}", "--quiet"]
    if mode != "none":
        argv += ["knowledge=wordnet", f"knowledge_mode={mode}"]  # ptmkit.knowledge.lexicons.named_lexicons
    if out.exists():
        argv.append("--resume")
    t0 = time.perf_counter()
    rc = main(argv)
    if rc != 0:
        raise SystemExit(f"ptm {' '.join(argv)} failed ({rc})")
    runs = [json.loads((out / f"pretrained-seed{s}" / "results.json").read_text()) for s in seeds]
    print(f"  {task} / {mode}: {time.perf_counter() - t0:.0f} s", flush=True)
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/kbert"))
    p.add_argument("--model", type=Path, default=None, help="a checkpoint (default: the imported MiniLM)")
    p.add_argument("--tasks", default="wordnet-hypernym,mr")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--train-size", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ck = args.model or minilm_checkpoint(args.out)
    results: dict = {}
    t0 = time.perf_counter()
    for task in args.tasks.split(","):
        for mode in args.modes.split(","):
            runs = finetune(ck, task, mode, args.seeds, args)
            acc = [r["test"]["accuracy"] for r in runs]
            results.setdefault(task, {})[mode] = {"test_accuracy": acc, "mean": float(np.mean(acc)),
                                                  "sd": float(np.std(acc, ddof=1)) if len(acc) > 1 else 0.0}
    print(f"\nK-BERT on {ck.name}: test accuracy, mean ± sd over seeds {args.seeds} "
          f"({args.train_size} training examples, {args.epochs} epochs, LR {args.lr}; {cpu_name()})")
    print("| task | " + " | ".join(args.modes.split(",")) + " |")
    print("|---|" + "---|" * len(args.modes.split(",")))
    for task, by_mode in results.items():
        print(f"| {task} | " + " | ".join(f"{m['mean']:.4f} ± {m['sd']:.4f}" for m in by_mode.values()) + " |")
    summary = {"model": str(ck), "cpu": cpu_name(), "seeds": args.seeds, "train_size": args.train_size,
               "epochs": args.epochs, "lr": args.lr, "seconds": round(time.perf_counter() - t0, 1), "results": results}
    (args.out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
