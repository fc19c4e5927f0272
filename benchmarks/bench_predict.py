"""Prediction throughput: ``ptmkit.predict`` vs HF transformers' ``pipeline`` on the same fine-tuned
model, texts in, labels and probabilities out.

The model: a MiniLM (or any BERT-family) run fine-tuned on MR by ``ptm finetune`` (``--run``),
exported to HF transformers by ``ptm export`` (``BertForSequenceClassification``, its tokenizer
beside it), so both sides hold the same weights.  Before timing, both label every text and the
benchmark reports how many labels agree and the largest difference of the probabilities.

Texts: MR's test sentences (1,005, in file order; movie reviews, about 26 tokens) and the first
1,005 of brown-pos's test sentences joined back into text (news, fiction, science; longer: "text a newcomer brings",
unseen by the model and from another domain).  Each side does all of its work per call:
tokenizing, batching, the model, softmax, the label names.  HF's ``pipeline("text-classification")``
is called as its documentation shows on a list, with ``batch_size``, ``truncation=True``,
``max_length`` = the run's ``max_seq_len`` and ``top_k=None`` (every label's probability, as
ptmkit returns); ptmkit's ``predict`` batches the same number of texts, sorted by length inside a
chunk (its default).  Rounds interleave the two sides; the median of the rounds is reported.
Batch 1 times the first 200 texts.  fp32, eval mode, 2 threads by default.

    python benchmarks/bench_predict.py --run runs/peft/mr/full/lr5e-05/pretrained-seed1 [--rounds 5]

Prints a table and, as the last line, one JSON object (texts per second, ratios).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import ptmkit
from ptmkit.data.tasks import load_task
from ptmkit.train.mfu import cpu_name
from ptmkit.workflows.predict import load_predictor


def texts_of(name: str) -> list[str]:
    data = load_task(name)
    test = data.test
    return list(test.texts) if hasattr(test, "texts") else [" ".join(words) for words in test.words]


def export(run: Path, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "ptmkit.cli", "export", str(run), "-o", str(out), "--quiet"], check=True)
    return out


def agreement(ours: list[dict], theirs: list[list[dict]]) -> tuple[float, float]:
    """Share of equal labels, largest |p_ptmkit - p_HF| over every label of every text."""
    same, worst = 0, 0.0
    for a, b in zip(ours, theirs):
        hf = {d["label"]: d["score"] for d in b}
        top = max(hf, key=hf.get)
        same += str(a["prediction"]) == top
        worst = max(worst, max(abs(a["probabilities"][k] - hf[k]) for k in hf))
    return same / len(ours), worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="a fine-tuned MR run (holds task_model.json)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    tm = load_predictor(args.run)
    max_len = int(tm.cfg.max_seq_len)
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = export(args.run, Path(tmp) / "hf")
        # label names: the exported config maps ids to ptmkit's label names, so both sides say the same
        clf = pipeline("text-classification", model=str(hf_dir), tokenizer=str(hf_dir), device=-1)
        clf.model.eval()
        sets = {"mr": texts_of("mr"), "brown": texts_of("brown-pos")[:1005]}
        load = Path("/proc/loadavg").read_text().split()[0]

        def ours(texts: list[str], bs: int) -> list[dict]:
            return ptmkit.predict(tm, texts, batch_size=bs)

        def theirs(texts: list[str], bs: int) -> list:
            return clf(texts, batch_size=bs, truncation=True, max_length=max_len, top_k=None)

        checks = {}
        for name, texts in sets.items():
            checks[name] = agreement(ours(texts, args.batch_size), theirs(texts, args.batch_size))
        cases = [(name, bs, texts if bs > 1 else texts[:200]) for name, texts in sets.items()
                 for bs in (args.batch_size, 1)]
        times: dict[tuple[str, int], dict[str, list[float]]] = {(n, b): {"ptmkit": [], "hf": []} for n, b, _ in cases}
        for _ in range(args.rounds):
            for name, bs, texts in cases:
                for side, fn in (("ptmkit", ours), ("hf", theirs)):
                    start = time.perf_counter()
                    fn(texts, bs)
                    times[(name, bs)][side].append(len(texts) / (time.perf_counter() - start))

    rows = []
    print(f"\nCPU: {cpu_name()}, {args.threads} threads, load at start {load}, {args.rounds} rounds (median)")
    print(f"{'texts':8s} {'batch':>5s} {'n':>6s} {'ptmkit/s':>9s} {'HF/s':>8s} {'ratio':>6s}")
    for (name, bs, texts) in cases:
        t = times[(name, bs)]
        a, b = statistics.median(t["ptmkit"]), statistics.median(t["hf"])
        rows.append({"texts": name, "batch": bs, "n": len(texts), "ptmkit_per_s": a, "hf_per_s": b, "ratio": a / b})
        print(f"{name:8s} {bs:>5d} {len(texts):>6d} {a:>9.1f} {b:>8.1f} {a / b:>5.2f}x")
    for name, (same, worst) in checks.items():
        print(f"{name}: labels equal on {same:.2%} of texts, largest probability difference {worst:.2e}")
    print(json.dumps({"cpu": cpu_name(), "threads": args.threads, "load_at_start": load, "rows": rows,
                      "agreement": {k: {"labels_equal": s, "max_prob_diff": w} for k, (s, w) in checks.items()},
                      "geomean_ratio": float(np.exp(np.mean([np.log(r["ratio"]) for r in rows])))}))


if __name__ == "__main__":
    main()
