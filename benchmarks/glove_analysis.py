"""Why GloVe trails word2vec on the analogies of a mid-sized corpus: one setting at a time.

Counts the co-occurrences of the corpus once per window, then trains GloVe under each setting
and scores the vectors after several epoch counts (training continues from one checkpoint to the
next, so a setting costs its largest epoch count once).  Each checkpoint is scored as ``W + W~``
(the paper's output, the default) and as ``W`` alone.  Scores are the ones of
``benchmarks/bench_static.py`` (3CosAdd on the Google analogies among the 30k most frequent words,
Spearman rho on WordSim-353 and SimLex-999), so the rows compare with its word2vec figures.

Usage::

    python benchmarks/glove_analysis.py [--corpus english-mix] [--max-words N]
        [--settings base,xmax100,dim300,window5,lr] [--epochs 10,25,50] [--threads 2] [--out DIR]

Settings (each changes one thing from ``base`` = the library defaults: dim 100, window 10,
x_max 10, alpha 0.75, lr 0.05): ``xmax100`` (the paper's x_max), ``dim300`` (the paper's size),
``window5`` (word2vec's window), ``lr`` (learning rate 0.1), ``xmax3`` (a smaller x_max),
``sgns_window`` (window 5 weighted (5 - d + 1) / 5 instead of 1/d: the expectation of
word2vec's reduced window).  Writes ``glove_analysis.json`` and prints a
table and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_static  # noqa: E402
import numpy as np  # noqa: E402

from ptmkit.static.cooccurrence import count_cooccurrence  # noqa: E402
from ptmkit.static.glove import GloVeConfig, GloVeModel, block_size_for, epoch_block_order, shuffled_entries  # noqa: E402
from ptmkit.static.vectors import WordVectors  # noqa: E402
from ptmkit.static.vocab import load_corpus  # noqa: E402

BASE = GloVeConfig(dim=100, window=10, min_count=5, x_max=10.0, alpha=0.75, lr=0.05)
SETTINGS: dict[str, tuple[dict, str]] = {
    "base": ({}, "harmonic"),
    "xmax100": ({"x_max": 100.0}, "harmonic"),
    "xmax3": ({"x_max": 3.0}, "harmonic"),
    "dim300": ({"dim": 300}, "harmonic"),
    "window5": ({"window": 5}, "harmonic"),
    "lr": ({"lr": 0.1}, "harmonic"),
    "sgns_window": ({"window": 5}, "linear"),
}


def score(vectors: np.ndarray, words: list[str]) -> dict:
    return {k: round(float(v), 4) for k, v in bench_static.evaluate(WordVectors(words, vectors)).items()
            if k in ("analogy", "ws353", "simlex")}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=None, help="text file or recipe name(s) (default: english-mix)")
    ap.add_argument("--max-words", type=int, default=None)
    ap.add_argument("--settings", default="base,xmax100,dim300,window5")
    ap.add_argument("--epochs", default="10,25,50", help="comma-separated epoch counts at which to score")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="runs/glove-analysis")
    args = ap.parse_args()
    names = [s for s in args.settings.split(",") if s]
    bad = [s for s in names if s not in SETTINGS]
    if bad:
        raise SystemExit(f"unknown setting(s) {bad}; choose from {sorted(SETTINGS)}")
    checkpoints = sorted({int(e) for e in args.epochs.split(",")})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import tempfile

    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    with tempfile.TemporaryDirectory() as t:
        corpus_file, n = bench_static.prefix_corpus(bench_static.find_corpus(args.corpus), args.max_words, False, Path(t))
        vocab, corpus = load_corpus(corpus_file, BASE.min_count, cache=False)
    words = list(vocab.words)
    print(f"corpus {n:,} words, vocabulary {len(words):,}; settings {names}; scored at epochs {checkpoints}", flush=True)
    counted: dict[tuple[int, str], object] = {}
    rows = []
    for name in names:
        change, kind = SETTINGS[name]
        cfg = replace(BASE, **change, seed=args.seed)
        key = (cfg.window, kind)
        if key not in counted:
            t0 = time.perf_counter()
            counted[key] = count_cooccurrence(corpus.ids, corpus.sentences, len(words), window=cfg.window,
                                              weighting=kind, progress=False)  # fmt: skip
            print(f"  counted window {cfg.window} ({kind}): {counted[key].nnz:,} pairs in {time.perf_counter() - t0:.0f} s", flush=True)
        cooc = counted[key]
        I, J, logX, fX = shuffled_entries(cooc, cfg.x_max, cfg.alpha, cfg.seed)
        block_size = block_size_for(cooc.nnz, numba.get_num_threads())
        model = GloVeModel(cooc.vocab_size, cfg.dim, cfg.seed)
        t0, done = time.perf_counter(), 0
        for stop in checkpoints:
            while done < stop:
                blocks = epoch_block_order(cooc.nnz, cfg.seed, done, block_size)
                loss = model.epoch(I, J, logX, fX, blocks, cfg.lr, numba.get_num_threads(), cfg.grad_clip, block_size)
                done += 1
            row = {"setting": name, "epochs": stop, "loss": round(loss, 5), "seconds": round(time.perf_counter() - t0, 1),
                   "sum": score(model.vectors(), words), "w_only": score(model.W.astype(np.float32), words),
                   "diff": score((model.W - model.Wc).astype(np.float32), words),
                   "diff_norm_ratio": round(float(np.linalg.norm(model.W - model.Wc) / np.linalg.norm(model.W + model.Wc)), 4)}  # fmt: skip
            rows.append(row)
            print(f"  {name:11s} epoch {stop:3d}  loss {loss:.4f}  W+W~ {row['sum']}  W {row['w_only']}  W-W~ {row['diff']}"
                  f"  |W-W~|/|W+W~| {row['diff_norm_ratio']}  ({row['seconds']:.0f} s)", flush=True)  # fmt: skip
            (out / "glove_analysis.json").write_text(json.dumps({"corpus_words": n, "rows": rows}, indent=1))
    print("\n| setting | epochs | analogy % W+W̃ / W / W−W̃ | WS-353 W+W̃ / W | SimLex W+W̃ / W | ‖W−W̃‖ / ‖W+W̃‖ |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s, w, d = r["sum"], r["w_only"], r["diff"]
        print(f"| {r['setting']} | {r['epochs']} | {s['analogy']:.2f} / {w['analogy']:.2f} / {d['analogy']:.2f} | "
              f"{s['ws353']:.3f} / {w['ws353']:.3f} | {s['simlex']:.3f} / {w['simlex']:.3f} | {r['diff_norm_ratio']:.2f} |")  # fmt: skip
    best = max(rows, key=lambda r: r["sum"]["analogy"])
    print(json.dumps({"corpus_words": n, "best_setting": best["setting"], "best_epochs": best["epochs"],
                      "best_analogy": best["sum"]["analogy"],
                      **{f"{r['setting']}_{r['epochs']}_analogy": r["sum"]["analogy"] for r in rows}}))  # fmt: skip


if __name__ == "__main__":
    main()
