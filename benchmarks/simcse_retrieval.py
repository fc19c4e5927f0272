"""Contrastive sentence embeddings on verse retrieval: the built-in ``bible-retrieval`` task (each
test verse's text, KJV or WEB, retrieves its other translation among all the test split's
``text_pair`` verses by cosine similarity).  Four sentence encoders, scored on the test split:

(a) ``minilm``: all-MiniLM-L6-v2 as imported (``ptm data get minilm``, ``ptm import``), mean
    pooling, no training;
(b) ``sif``: SIF (Arora et al. 2017: ``ptm encode`` on a vectors file) over word2vec Skip-gram
    vectors trained by ``ptm pretrain word2vec-sg-ns`` on the training split's verses (both
    translations, lower-cased; SIF's word frequencies from the same run's ``vocab.txt``);
(c) ``simcse-unsup``: MiniLM after unsupervised SimCSE (``unsupervised=true``: each sentence of
    ``--train-size`` training pairs, both translations, is its own positive, dropout the noise);
(d) ``simcse-sup``: MiniLM after supervised SimCSE on the same ``--train-size`` pairs.

(c) and (d) run ``ptm finetune --task bible-retrieval`` with mean pooling, τ = 0.05, batch 64 and
the paper's learning rates (3e-5 unsupervised, 5e-5 supervised for BERT-base), nothing tuned;
every model reads at most ``--max-seq-len`` tokens a verse.  Also printed: the anisotropy of each
encoder, the mean cosine between the vectors of different test sentences (all pairs among
``--sample`` random ones), which SimCSE argues contrastive training lowers.

    python benchmarks/simcse_retrieval.py [--out runs/simcse] [--train-size 2000] [--epochs 1] [--seed 1]

Runs already in ``--out`` are read back (``ptm finetune --resume``).  Prints a table and, as the
last line, one JSON object; writes ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from kbert_wordnet import cpu_name, minilm_checkpoint

LR = {"simcse-unsup": 3e-5, "simcse-sup": 5e-5}  # Gao et al. 2021, BERT-base


def retrieval(texts: list[str], pairs: list[str], q: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """The task's test scores from vectors of the texts ``q [N, D]`` and of their pairs ``p [N, D]``:
    each text ranks the distinct pairs (:mod:`ptmkit.tasks.retrieval`)."""
    from ptmkit.tasks.retrieval import cosine_retrieval, retrieval_scores

    _, first, gold = np.unique(pairs, return_index=True, return_inverse=True)
    return retrieval_scores(cosine_retrieval(q, p[first], gold.reshape(-1))[0])


def anisotropy(v: np.ndarray) -> float:
    """Mean cosine over all pairs of different rows of ``v [n, D]``."""
    from ptmkit.tasks.retrieval import unit

    u = unit(v)
    s = u @ u.T
    n = len(u)
    return float((s.sum() - np.trace(s)) / (n * (n - 1)))


def static_vectors(out: Path, train, args) -> Path:
    """word2vec Skip-gram (negative sampling) on the training split's verses, once."""
    from ptmkit.cli import main

    run = out / "word2vec"
    if not (run / "vectors.bin").is_file():
        corpus = out / "train_verses.txt"
        corpus.write_text("\n".join(t for s in (train.texts, train.text_pairs) for t in s) + "\n", encoding="utf-8")
        argv = ["pretrain", "word2vec-sg-ns", "--data", str(corpus), "-o", str(run), "--quiet", "lowercase=true",
                "min_count=2", f"workers={args.threads}", "cache=false", f"seed={args.seed}"]
        if main(argv) != 0:
            raise SystemExit(f"ptm {' '.join(argv)} failed")
    return run


def simcse(ck: Path, mode: str, args) -> Path:
    """``ptm finetune`` with the sentence_embedding task type; returns the run directory."""
    from ptmkit.cli import main

    out = args.out / "runs" / mode
    argv = ["finetune", str(ck), "--task", "bible-retrieval", "-o", str(out), "--seeds", str(args.seed),
            "--train-size", str(args.train_size), f"epochs={args.epochs}", f"lr={LR[mode]}",
            f"batch_size={args.batch_size}", f"max_seq_len={args.max_seq_len}", f"num_threads={args.threads}",
            "pooling=mean", "temperature=0.05", "warmup=0.0", "--quiet"]
    if mode == "simcse-unsup":
        argv.append("unsupervised=true")
    if out.exists():
        argv.append("--resume")
    if main(argv) != 0:
        raise SystemExit(f"ptm {' '.join(argv)} failed")
    return out / f"pretrained-seed{args.seed}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/simcse"))
    p.add_argument("--train-size", type=int, default=2000, help="training pairs for SimCSE (default: 2000)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sample", type=int, default=1000, help="test sentences for the anisotropy (default: 1000)")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(args.threads)
    import ptmkit
    from ptmkit.data.tasks import load_task

    t0 = time.perf_counter()
    data = load_task("bible-retrieval")
    test = data.test
    pool = list(dict.fromkeys(test.texts + test.text_pairs))
    sample = [pool[i] for i in np.random.default_rng(args.seed).choice(len(pool), min(args.sample, len(pool)),
                                                                      replace=False)]
    ck = minilm_checkpoint(args.out)
    rows: dict[str, dict] = {}

    def both(model: Path | str) -> tuple[np.ndarray, np.ndarray]:
        v = ptmkit.encode(model, test.texts + test.text_pairs, pooling="mean", max_len=args.max_seq_len)
        return v[: len(test)], v[len(test):]

    t = time.perf_counter()
    q, c = both(ck)
    rows["minilm"] = {**retrieval(test.texts, test.text_pairs, q, c),
                      "anisotropy": anisotropy(ptmkit.encode(ck, sample, max_len=args.max_seq_len)),
                      "seconds": round(time.perf_counter() - t, 1)}
    print(f"  minilm: {rows['minilm']}", flush=True)
    t = time.perf_counter()
    w2v = static_vectors(args.out, data.train, args)
    q, c = both(w2v)  # SIF's common component: removed over the test texts and pairs together
    rows["sif"] = {**retrieval(test.texts, test.text_pairs, q, c), "anisotropy": anisotropy(ptmkit.encode(w2v, sample)),
                   "seconds": round(time.perf_counter() - t, 1)}
    print(f"  sif: {rows['sif']}", flush=True)
    for mode in ("simcse-unsup", "simcse-sup"):
        t = time.perf_counter()
        run = simcse(ck, mode, args)
        result = json.loads((run / "results.json").read_text())
        rows[mode] = {**{k: result["test"][k] for k in ("mrr", "recall_at_1", "recall_at_10")},
                      "dev_mrr": result["dev"]["mrr"],
                      "anisotropy": anisotropy(ptmkit.encode(run, sample, max_len=args.max_seq_len)),
                      "train_pairs": result["sizes"]["train"], "seconds": round(time.perf_counter() - t, 1)}
        print(f"  {mode}: {rows[mode]}", flush=True)

    print(f"\nbible-retrieval test split: {len(test)} queries, {len(set(test.text_pairs))} candidates; "
          f"SimCSE on {args.train_size} training pairs, {args.epochs} epoch(s), batch {args.batch_size}, "
          f"max_seq_len {args.max_seq_len}, seed {args.seed}; {cpu_name()}")
    print("| encoder | recall@1 | recall@10 | MRR | anisotropy |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['recall_at_1']:.4f} | {r['recall_at_10']:.4f} | {r['mrr']:.4f} | {r['anisotropy']:.4f} |")
    summary = {"task": "bible-retrieval", "cpu": cpu_name(), "seed": args.seed, "train_size": args.train_size,
               "epochs": args.epochs, "batch_size": args.batch_size, "max_seq_len": args.max_seq_len,
               "lr": LR, "temperature": 0.05, "test_queries": len(test), "anisotropy_sample": len(sample),
               "seconds": round(time.perf_counter() - t0, 1), "results": rows}
    (args.out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
