"""Intrinsic scores of the first-generation models trained by ptmkit on one corpus.

Trains word2vec (Skip-gram and CBOW, each with negative sampling and hierarchical softmax),
fastText (Skip-gram), GloVe, SVD-PPMI and the NNLM (its feature matrix C) with shared settings
(dim 100, window 5 (GloVe 10), min_count 5, 2 threads) through the same entry point as
``ptm pretrain`` (:func:`ptmkit.static.run.run_static`), then evaluates every ``vectors.bin``
with the evaluator of ``ptm vectors evaluate``:

* Spearman rho on WordSim-353, SimLex-999, MEN, RW, SimVerb-3500, MTurk-771, RG-65 (pairs with an
  out-of-vocabulary word are left out, as gensim does);
* analogy accuracy (3CosAdd; 3CosMul in the JSON) on Google (questions-words) and MSR, searching
  the 30,000 most frequent words; questions with an unknown word are skipped.

The corpus is lowercased (the evaluation sets are case-insensitive anyway) and optionally cut to
its first ``--max-words`` words (whole lines).  The NNLM, a softmax over the whole vocabulary per
token, is trained on the first ``--nnlm-words`` words only.  Time = wall-clock seconds of the
whole run (vocabulary, counting, training, writing; the numba kernels are compiled beforehand on a
tiny corpus), words/s = corpus words x passes (epochs) / time.  Prints a Markdown table, the
classic analogies on the Skip-gram vectors, and a final JSON line.

    python benchmarks/static_scores.py [--corpus english-mix|ptb|brown|PATH] [--max-words N]
        [--nnlm-words 1000000] [--models sg_ns,cbow_ns,...] [--workers 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

# label, static model or preset, overrides (on top of the shared settings)
MODELS = {
    "sg_ns": ("word2vec SG-NS", "word2vec-sg-ns", {}),
    "sg_hs": ("word2vec SG-HS", "word2vec-sg-hs", {}),
    "cbow_ns": ("word2vec CBOW-NS", "word2vec-cbow-ns", {}),
    "cbow_hs": ("word2vec CBOW-HS", "word2vec-cbow-hs", {}),
    "fasttext": ("fastText SG", "fasttext", {"model": "skipgram"}),
    "glove": ("GloVe", "glove", {"window": 10}),
    "svd_ppmi": ("SVD-PPMI", "svd-ppmi", {}),
    "nnlm": ("NNLM (C)", "nnlm", {"order": 4, "hidden": 100, "batch_size": 512, "lr": 2e-3, "epochs": 3.0,
                                  "eval_every": 250, "max_minutes": 4.0}),
}
PAIRS = {"wordsim353": "WS353", "simlex999": "SimLex", "men": "MEN", "rw": "RW", "simverb3500": "SimVerb",
         "mturk771": "MTurk", "rg65": "RG-65"}  # fmt: skip
ANALOGIES = {"google": "Google", "msr": "MSR"}
# a : b :: c : d, read "b - a + c = d"
CLASSIC = [
    ("man", "king", "woman", "queen"),
    ("man", "father", "woman", "mother"),
    ("man", "brother", "woman", "sister"),
    ("france", "paris", "italy", "rome"),
    ("france", "paris", "germany", "berlin"),
    ("japan", "tokyo", "russia", "moscow"),
    ("big", "bigger", "small", "smaller"),
    ("good", "better", "bad", "worse"),
    ("walk", "walking", "swim", "swimming"),
    ("go", "went", "come", "came"),
    ("car", "cars", "child", "children"),
    ("france", "french", "germany", "german"),
]


# ----------------------------------------------------------------------------- data


def corpus_files(spec: str) -> list[Path]:
    """A path, or a data recipe's training text (``train.txt``, else its largest ``.txt``)."""
    if Path(spec).exists():
        return [Path(spec)]
    from ptmkit.data.sources.base import fetch

    d = fetch(spec)
    if (d / "train.txt").exists():
        return [d / "train.txt"]
    txt = sorted(d.glob("*.txt"), key=lambda p: p.stat().st_size)
    if not txt:
        raise SystemExit(f"data recipe {spec!r} holds no .txt file in {d}")
    return [txt[-1]]


def write_prefix(paths: list[Path], max_words: int | None, out: Path) -> int:
    """Lowercased copy of the first ``max_words`` words (whole lines) of ``paths``; returns its words."""
    n = 0
    with open(out, "w", encoding="utf-8") as g:
        for path in paths:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    k = len(line.split())
                    if max_words and n + k > max_words:
                        return n
                    g.write(line.lower())
                    n += k
    return n


# ----------------------------------------------------------------------------- training + evaluation


def shared_overrides(model: str, workers: int) -> dict:
    from ptmkit import registry
    from ptmkit.config import field_names
    from ptmkit.static.presets import resolve_static

    name = resolve_static(model)[0]
    keys = set(field_names(registry.get("static", name).config_class))
    wanted = {"dim": 100, "window": 5, "min_count": 5, "workers": workers, "threads": workers, "seed": 1}
    return {k: v for k, v in wanted.items() if k in keys}


def warm_up(model: str, overrides: dict, tmp: Path) -> None:
    """Compile the model's numba kernels on a tiny corpus (not timed)."""
    from ptmkit.static.run import run_static

    text = tmp / "warm.txt"
    text.write_text("the cat sat on the mat and the dog sat on the rug\n" * 200)
    small = {k: v for k, v in overrides.items() if k not in ("dim", "window")}
    small.update(dim=8, min_count=1)
    run_static(model, [text], tmp / f"warm-{model}", small, progress=False, overwrite=True)


def evaluate(vectors: Path) -> dict:
    from ptmkit.commands.vectors import evaluate_all
    from ptmkit.static.vectors import WordVectors

    wv = WordVectors.load(vectors)
    r = evaluate_all(wv, list(PAIRS), list(ANALOGIES), restrict_vocab=30_000)
    out = {"vocab": len(wv)}
    for name, res in r["pairs"].items():
        out[name] = res.get("spearman")
        out[f"{name}_pairs"] = res.get("n_pairs", 0)
    for name, by_method in r["analogies"].items():
        for method, res in by_method.items():
            out[f"{name}_{method}"] = res.get("accuracy")
            out[f"{name}_answered"] = res.get("n_questions", 0)
    return out


def classic_analogies(vectors: Path) -> list[dict]:
    from ptmkit.static.vectors import WordVectors

    wv = WordVectors.load(vectors)
    rows = []
    for a, b, c, d in CLASSIC:
        if not all(w in wv for w in (a, b, c, d)):
            rows.append({"query": f"{b} - {a} + {c}", "expected": d, "top": [], "correct": None})
            continue
        top = [w for w, _ in wv.analogy(a, b, c, topn=3, restrict_vocab=30_000)]
        rows.append({"query": f"{b} - {a} + {c}", "expected": d, "top": top, "correct": bool(top) and top[0] == d})
    return rows


def run_one(key: str, corpus: Path, words: int, out: Path, workers: int, tmp: Path) -> dict:
    from ptmkit.static.run import resolve_config, run_static

    label, model, extra = MODELS[key]
    overrides = {**shared_overrides(model, workers), **extra}
    name, cfg = resolve_config(model, overrides)
    warm_up(model, overrides, tmp)
    t0 = time.perf_counter()
    run_static(model, [corpus], out, overrides, progress=True, overwrite=True)
    seconds = time.perf_counter() - t0
    stats = json.loads((out / "config.json").read_text()).get("stats", {})
    passes = stats.get("epochs") or getattr(cfg, "epochs", 1)
    if name == "svd-ppmi":
        passes = 1  # one counting pass, then linear algebra on the counts
    result = {"key": key, "label": label, "model": name, "words": words, "seconds": seconds,
              "words_per_second": words * passes / seconds, "passes": passes, **evaluate(out / "vectors.bin")}  # fmt: skip
    return result


# ----------------------------------------------------------------------------- report


def fmt(x, digits=3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def markdown(results: list[dict], caption: str) -> str:
    head = ["model", *PAIRS.values(), *ANALOGIES.values(), "vocab", "words", "time (s)", "words/s"]
    lines = [f"**{caption}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["label"], *(fmt(r.get(k)) for k in PAIRS), *(fmt(None if r.get(f"{k}_3cosadd") is None
                 else 100 * r[f"{k}_3cosadd"], 1) for k in ANALOGIES),  # fmt: skip
                 f"{r['vocab']:,}", f"{r['words'] / 1e6:.1f}M", f"{r['seconds']:.0f}", f"{r['words_per_second'] / 1e3:.0f}k"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="english-mix", help="english-mix | ptb | brown | a text file")
    ap.add_argument("--max-words", type=int, default=None, help="train on the first N words (whole lines)")
    ap.add_argument("--nnlm-words", type=int, default=1_000_000, help="the NNLM trains on the first N words")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", default=None, help="keep every model's output directory under this directory")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.models.split(",") if k.strip()]
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")

    import torch

    from ptmkit.static.presets import resolve_static

    torch.set_num_threads(args.workers)
    sources = corpus_files(args.corpus)
    with tempfile.TemporaryDirectory(prefix="static-scores-") as tmp_name:
        tmp = Path(tmp_name)
        keep = Path(args.keep) if args.keep else tmp / "runs"
        corpus = tmp / "corpus.txt"
        words = write_prefix(sources, args.max_words, corpus)
        nnlm_corpus = tmp / "corpus-nnlm.txt"
        nnlm_words = write_prefix([corpus], args.nnlm_words, nnlm_corpus) if "nnlm" in keys else 0
        print(f"# corpus {args.corpus}: {words:,} words (lowercased){'' if not args.max_words else ' (prefix)'}",
              file=sys.stderr, flush=True)  # fmt: skip
        results, skipped = [], []
        for key in keys:
            if resolve_static(MODELS[key][1]) is None:  # e.g. a model not registered in this version
                skipped.append(key)
                print(f"# skipping {key}: {MODELS[key][1]!r} is not a registered static model", file=sys.stderr, flush=True)
                continue
            print(f"# training {MODELS[key][0]}", file=sys.stderr, flush=True)
            text, n = (nnlm_corpus, nnlm_words) if key == "nnlm" else (corpus, words)
            r = run_one(key, text, n, keep / key, args.workers, tmp)
            results.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
        classic = classic_analogies(keep / "sg_ns" / "vectors.bin") if "sg_ns" in keys else []

    cut = f"its first {words / 1e6:.1f}M words" if args.max_words else f"all {words / 1e6:.1f}M words"
    caption = (f"Intrinsic scores of ptmkit's static models trained on {args.corpus} ({cut}, lowercased"
               + (f"; NNLM on the first {nnlm_words / 1e6:.1f}M words" if nnlm_words else "")
               + f"), dim 100, window 5 (GloVe 10), min_count 5, {args.workers} threads. Spearman rho on the "
               "similarity sets; Google/MSR: 3CosAdd accuracy (%) among the 30k most frequent words; "
               "time = whole run (vocabulary + training).")  # fmt: skip
    print(markdown(results, caption))
    if classic:
        print("\nclassic analogies (word2vec SG-NS, 3CosAdd, top 3):")
        for row in classic:
            mark = "?" if row["correct"] is None else ("✓" if row["correct"] else "✗")
            print(f"  {mark} {row['query']} = {row['expected']}: {', '.join(row['top']) or 'out of vocabulary'}")
    print(json.dumps({"corpus": args.corpus, "words": words, "nnlm_words": nnlm_words, "results": results,
                      "classic_analogies": classic, "skipped": skipped}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
