"""ptmkit vs gensim: word2vec (Skip-gram-NS, CBOW-NS, Skip-gram-HS) and fastText (Skip-gram-NS).

Both libraries train on the same corpus with the same hyper-parameters and the same number of
threads; each training runs in a fresh subprocess (peak memory = its ``ru_maxrss``).  Reported:
words/s = corpus words × epochs / training seconds (vocabulary building excluded for both),
analogy accuracy (questions-words, restrict_vocab 30000, 3CosAdd) and Spearman ρ on WordSim-353
and SimLex-999, all computed by the same evaluator (``WordVectors``, which matches gensim's).
The last line printed is one JSON object.

    python benchmarks/bench_static.py [--corpus PATH] [--max-words N] [--epochs 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = {
    "sg_ns": dict(kind="word2vec", model="skipgram", loss="ns"),
    "cbow_ns": dict(kind="word2vec", model="cbow", loss="ns"),
    "sg_hs": dict(kind="word2vec", model="skipgram", loss="hs"),
    "fasttext": dict(kind="fasttext", model="skipgram", loss="ns"),
}


# ----------------------------------------------------------------------------- data


def find_corpus(args) -> Path:
    if args.corpus:
        return Path(args.corpus)
    from ptmkit.data.sources.base import fetch

    for name, files in (("english-mix", ("train.txt", "english-mix.txt", "corpus.txt")), ("ptb", ("train.txt",))):
        try:
            d = fetch(name)
        except Exception as exc:  # a recipe may not exist (yet) or the registry may be unreachable
            print(f"# corpus {name!r} unavailable: {exc}", file=sys.stderr)
            continue
        for f in files:
            if (d / f).exists():
                return d / f
        txt = sorted(d.glob("*.txt"), key=lambda p: p.stat().st_size)
        if txt:
            return txt[-1]
    raise SystemExit("no corpus: pass --corpus PATH")


def eval_files() -> dict[str, Path]:
    names = {"analogies": "questions-words.txt", "ws353": "wordsim353.tsv", "simlex": "simlex999.txt"}
    try:
        from ptmkit.data.sources.base import fetch

        d = fetch("gensim-eval")
    except Exception:
        import gensim

        d = Path(gensim.__file__).parent / "test" / "test_data"
    return {k: d / v for k, v in names.items()}


def prefix_corpus(path: Path, max_words: int | None, tmp: Path) -> tuple[Path, int]:
    """The first ``max_words`` words (whole lines) of ``path``; returns (file, number of words)."""
    n = 0
    out = tmp / "corpus.txt"
    with open(path, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        for line in f:
            k = len(line.split())
            if max_words and n + k > max_words:
                break
            g.write(line)
            n += k
    return out, n


# ----------------------------------------------------------------------------- one training (subprocess)


def worker(impl: str, name: str, corpus: Path, hp: dict, out: Path) -> None:
    spec = MODELS[name]
    sg = spec["model"] == "skipgram"
    alpha = 0.025 if sg else 0.05
    common = dict(dim=hp["dim"], window=hp["window"], epochs=hp["epochs"], min_count=hp["min_count"], sample=hp["sample"])
    if impl == "ptmkit":
        from ptmkit.static.fasttext import FastTextConfig, train_fasttext_ids
        from ptmkit.static.vectors import WordVectors
        from ptmkit.static.vocab import load_corpus
        from ptmkit.static.word2vec import Word2VecConfig, train_on_ids

        if spec["kind"] == "word2vec":
            cfg = Word2VecConfig(model=spec["model"], loss=spec["loss"], alpha=alpha, workers=hp["workers"], cache=False, **common)
        else:
            cfg = FastTextConfig(model=spec["model"], alpha=alpha, workers=hp["workers"], bucket=hp["bucket"], cache=False, **common)
        vocab, ids = load_corpus(corpus, cfg.min_count, cache=False)
        # load the compiled kernels from numba's cache before timing (a few-sentence run)
        warm = type(cfg)(**{**cfg.__dict__, "epochs": 1})
        sub_v, sub_c = load_corpus([s.split() for s in corpus.read_text().splitlines()[:200]], 1, cache=False)
        (train_on_ids if spec["kind"] == "word2vec" else train_fasttext_ids)(sub_v, sub_c, warm, progress=False)
        t0 = time.perf_counter()
        if spec["kind"] == "word2vec":
            vectors, _ = train_on_ids(vocab, ids, cfg, progress=False)
            seconds = time.perf_counter() - t0
            wv = WordVectors(vocab.words, vectors)
        else:
            model, _ = train_fasttext_ids(vocab, ids, cfg, progress=False)
            seconds = time.perf_counter() - t0
            wv = model.wv
        n_words = ids.n_words
    else:
        from gensim.models import FastText, Word2Vec

        from ptmkit.static.vectors import WordVectors

        sentences = [line.split() for line in corpus.read_text(encoding="utf-8").splitlines()]
        kw = dict(vector_size=hp["dim"], window=hp["window"], min_count=hp["min_count"], sample=hp["sample"],
                  workers=hp["workers"], sg=int(sg), alpha=alpha, min_alpha=alpha * 1e-4, seed=1)  # fmt: skip
        if spec["kind"] == "word2vec":
            m = Word2Vec(hs=int(spec["loss"] == "hs"), negative=5 if spec["loss"] == "ns" else 0, **kw)
        else:
            m = FastText(negative=5, bucket=hp["bucket"], min_n=3, max_n=6, **kw)
        m.build_vocab(sentences)
        t0 = time.perf_counter()
        m.train(sentences, total_examples=m.corpus_count, epochs=hp["epochs"])
        seconds = time.perf_counter() - t0
        wv = WordVectors(m.wv.index_to_key, m.wv.vectors)
        n_words = int(sum(m.wv.get_vecattr(w, "count") for w in m.wv.index_to_key))
    files = eval_files()
    analogy = wv.evaluate_analogies(files["analogies"], restrict_vocab=30_000)
    ws = wv.evaluate_pairs(files["ws353"])
    sl = wv.evaluate_pairs(files["simlex"])
    words = n_words * hp["epochs"]
    result = {
        "impl": impl, "model": name, "seconds": seconds, "words": words, "words_per_second": words / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "analogy": 100 * analogy["accuracy"], "analogy_n": analogy["n_questions"],
        "ws353": ws["spearman"], "simlex": sl["spearman"], "vocab": len(wv),
    }  # fmt: skip
    out.write_text(json.dumps(result))


def run_one(impl: str, name: str, corpus: Path, hp: dict, tmp: Path) -> dict:
    out = tmp / f"{impl}-{name}.json"
    env = {**os.environ, "NUMBA_NUM_THREADS": str(hp["workers"]), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--worker", impl, name, str(corpus), json.dumps(hp), str(out)]
    subprocess.run(cmd, check=True, env=env)
    return json.loads(out.read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, impl, name, corpus, hp, out = sys.argv
        worker(impl, name, Path(corpus), json.loads(hp), Path(out))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="text file (one sentence per line); default: english-mix, else PTB train")
    ap.add_argument("--max-words", type=int, default=None, help="use the first N words of the corpus")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {', '.join(MODELS)}")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bucket", type=int, default=2_000_000)
    args = ap.parse_args()
    hp = dict(dim=args.dim, window=5, epochs=args.epochs, min_count=5, sample=1e-3, workers=args.workers, bucket=args.bucket)
    src = find_corpus(args)
    summary: dict = {"corpus": str(src), **hp}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        corpus, n = prefix_corpus(src, args.max_words, tmp)
        summary["corpus_words"] = n
        print(f"corpus {src} ({n:,} words), {hp}")
        print(f"{'model':10s} {'impl':7s} {'words/s':>10s} {'sec':>7s} {'peakMB':>7s} {'analogy%':>9s} {'ws353':>7s} {'simlex':>7s}")
        for name in args.models.split(","):
            rows = {}
            for impl in ("ptmkit", "gensim"):
                r = rows[impl] = run_one(impl, name, corpus, hp, tmp)
                print(f"{name:10s} {impl:7s} {r['words_per_second']:10.0f} {r['seconds']:7.1f} {r['peak_rss_mb']:7.0f} "
                      f"{r['analogy']:9.2f} {r['ws353']:7.3f} {r['simlex']:7.3f}", flush=True)  # fmt: skip
            p, g = rows["ptmkit"], rows["gensim"]
            summary[f"{name}_speedup"] = round(p["words_per_second"] / g["words_per_second"], 3)
            summary[f"{name}_analogy_delta"] = round(p["analogy"] - g["analogy"], 2)
            summary[f"{name}_ws353_delta"] = round(p["ws353"] - g["ws353"], 4)
            summary[f"{name}_simlex_delta"] = round(p["simlex"] - g["simlex"], 4)
            summary[f"{name}_raw"] = rows
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
