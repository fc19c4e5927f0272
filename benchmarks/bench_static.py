"""ptmkit vs gensim and the original C tools: word2vec (Skip-gram-NS, CBOW-NS, Skip-gram-HS) and fastText
(Skip-gram-NS), plus GloVe.

The C anchors (``c_tools.py``): Mikolov's word2vec.c for the word2vec rows, the fastText C++ command for
``fasttext``; a model whose tool is missing is compared with gensim only (``--no-c`` skips them).

``sg_ns_shared`` / ``cbow_ns_shared`` train ptmkit's word2vec with ``kernel=shared_negatives`` (negatives
shared across a window, Ji et al. 2016) against gensim's usual Skip-gram-NS / CBOW-NS; ``sg_hs_shared``
with ``kernel=shared_path`` (a window's context words against one Huffman path as a block) against
Skip-gram-HS.  The C tool of a ``*_shared`` row trains its exact update.

Both libraries train on the same corpus with the same hyper-parameters, seed and number of threads;
every training runs in a fresh subprocess (peak memory = its ``ru_maxrss``).  With ``--seeds N`` each
model is trained N times per library, the libraries interleaved (the order rotates with the seed)
so that a change in the load of a shared machine hits all alike.  Reported:
words/s = corpus words × epochs / training seconds (vocabulary building excluded for both; median
over seeds), words per CPU-second (process CPU time of all threads, which a loaded machine
distorts less than wall time), analogy accuracy (questions-words, restrict_vocab 30000, 3CosAdd) and Spearman ρ on
WordSim-353 and SimLex-999 (mean ± sd over seeds), all computed by the same evaluator
(``WordVectors``, which matches gensim's).  GloVe (gensim has none) reports the words/s of
co-occurrence counting and of training next to its scores, against glove-python where it is
installed (``pip install -e .[bench]`` or ``pip install bicleaner-ai-glove``; keys ``glove_speedup``, ``glove_count_speedup``,
``glove_analogy_delta``, ...; its model differs from the paper's, see ``train_glove_python``).  The last line printed is one
JSON object: ``<model>_speedup`` (vs gensim), ``<model>_speedup_c`` (vs the C tool), ``<model>_cpu_speedup(_c)``,
``<model>_analogy_delta(_c)`` (points), ``<model>_ws353_delta(_c)``, ``<model>_simlex_delta(_c)``,
``<model>_mem_ratio`` (peak RSS, ptmkit ÷ gensim) and the raw figures of every run.

    python benchmarks/bench_static.py [--corpus PATH|RECIPE[+RECIPE...]] [--max-words N] [--seeds N (3)] [--no-c]
        [--models sg_ns,cbow_ns,sg_hs,sg_ns_shared,cbow_ns_shared,sg_hs_shared,fasttext,glove] [--epochs 5] [--workers 2] [--lowercase]
        [--ptmkit-set hot_rows=32 sync_words=16]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import c_tools  # noqa: E402

MODELS = {
    "sg_ns": dict(kind="word2vec", model="skipgram", loss="ns"),
    "cbow_ns": dict(kind="word2vec", model="cbow", loss="ns"),
    "sg_hs": dict(kind="word2vec", model="skipgram", loss="hs"),
    # ptmkit's shared-negatives kernel; gensim trains its usual (per-pair) update
    "sg_ns_shared": dict(kind="word2vec", model="skipgram", loss="ns", kernel="shared_negatives"),
    "cbow_ns_shared": dict(kind="word2vec", model="cbow", loss="ns", kernel="shared_negatives"),
    "sg_hs_shared": dict(kind="word2vec", model="skipgram", loss="hs", kernel="shared_path"),
    "fasttext": dict(kind="fasttext", model="skipgram", loss="ns"),
}
GLOVE = "glove"


# ----------------------------------------------------------------------------- data


def recipe_file(name: str) -> Path:
    """The training text of data recipe ``name`` (train.txt, else the largest .txt)."""
    from ptmkit.data.sources.base import fetch

    d = fetch(name)
    for f in ("train.txt", f"{name}.txt", "corpus.txt"):
        if (d / f).exists():
            return d / f
    txt = sorted(d.glob("*.txt"), key=lambda p: p.stat().st_size)
    if not txt:
        raise SystemExit(f"recipe {name!r} holds no .txt file in {d}")
    return txt[-1]


def find_corpus(spec: str | None) -> list[Path]:
    """Files of ``spec``: a path, recipe names joined by '+', or (None) english-mix, else PTB."""
    if spec:
        if Path(spec).exists():
            return [Path(spec)]
        return [recipe_file(name) for name in spec.split("+")]
    for name in ("english-mix", "ptb"):
        try:
            return [recipe_file(name)]
        except Exception as exc:  # a recipe may not exist or the registry may be unreachable
            print(f"# corpus {name!r} unavailable: {exc}", file=sys.stderr)
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


def prefix_corpus(paths: list[Path], max_words: int | None, lowercase: bool, tmp: Path) -> tuple[Path, int]:
    """The first ``max_words`` words (whole lines) of ``paths`` concatenated; returns (file, words)."""
    n = 0
    out = tmp / "corpus.txt"
    with open(out, "w", encoding="utf-8") as g:
        for path in paths:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    k = len(line.split())
                    if max_words and n + k > max_words:
                        return out, n
                    g.write(line.lower() if lowercase else line)
                    n += k
    return out, n


# ----------------------------------------------------------------------------- one training (subprocess)


def evaluate(wv) -> dict:
    files = eval_files()
    analogy = wv.evaluate_analogies(files["analogies"], restrict_vocab=30_000)
    ws = wv.evaluate_pairs(files["ws353"])
    sl = wv.evaluate_pairs(files["simlex"])
    return {"analogy": 100 * analogy["accuracy"], "analogy_n": analogy["n_questions"],
            "ws353": ws["spearman"], "ws353_pairs": ws["n_pairs"], "simlex": sl["spearman"],
            "simlex_pairs": sl["n_pairs"], "vocab": len(wv)}  # fmt: skip


def worker(impl: str, name: str, corpus: Path, hp: dict, seed: int, out: Path) -> None:
    if impl == "c":
        out.write_text(json.dumps(train_with_c_tool(name, corpus, hp, seed, out.parent)))
        return
    if name == GLOVE and impl == "ptmkit":
        from ptmkit.static.glove import GloVeConfig, train_glove

        cfg = GloVeConfig(dim=hp["dim"], min_count=hp["min_count"], epochs=hp["glove_epochs"], threads=hp["workers"], seed=seed)
        train_glove([["warm", "up", "warm"]] * 3, GloVeConfig(dim=8, min_count=1, epochs=1), progress=False)  # compile
        t0 = time.perf_counter()
        wv, stats = train_glove(corpus, cfg, progress=False)
        seconds = time.perf_counter() - t0
        words = int(stats.get("tokens", 0))
        result = {"impl": impl, "model": name, "seed": seed, "seconds": seconds, "words": words * cfg.epochs,
                  "words_per_second": stats["train_words_per_s"], "count_words_per_second": stats.get("count_words_per_s"),
                  "train_seconds": stats["train_seconds"], "nnz": stats.get("pairs"), **evaluate(wv)}  # fmt: skip
    elif name == GLOVE:
        result = train_glove_python(corpus, hp, seed)
    else:
        result = train_w2v(impl, name, corpus, hp, seed)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.write_text(json.dumps(result))


def train_w2v(impl: str, name: str, corpus: Path, hp: dict, seed: int) -> dict:
    from ptmkit.static.vectors import WordVectors

    spec = MODELS[name]
    sg = spec["model"] == "skipgram"
    alpha = 0.025 if sg else 0.05
    common = dict(dim=hp["dim"], window=hp["window"], epochs=hp["epochs"], min_count=hp["min_count"], sample=hp["sample"])
    if impl == "ptmkit":
        from ptmkit.static.fasttext import FastTextConfig, train_fasttext_ids
        from ptmkit.static.vocab import load_corpus
        from ptmkit.static.word2vec import Word2VecConfig, train_on_ids

        w2v = spec["kind"] == "word2vec"
        if w2v:
            cfg = Word2VecConfig(model=spec["model"], loss=spec["loss"], kernel=spec.get("kernel", "exact"), alpha=alpha,
                                 workers=hp["workers"], seed=seed, cache=False, **common, **hp.get("ptmkit_set", {}))  # fmt: skip
        else:
            cfg = FastTextConfig(model=spec["model"], alpha=alpha, workers=hp["workers"], bucket=hp["bucket"], seed=seed,
                                 cache=False, **common)
        vocab, ids = load_corpus(corpus, cfg.min_count, cache=False)
        # load the compiled kernels from numba's cache before timing (a few-sentence run)
        warm = type(cfg)(**{**cfg.__dict__, "epochs": 1, **({} if w2v else {"bucket": 1000})})
        with open(corpus, encoding="utf-8") as f:
            head = [f.readline().split() for _ in range(200)]
        sub_v, sub_c = load_corpus([s for s in head if s], 1, cache=False)
        (train_on_ids if w2v else train_fasttext_ids)(sub_v, sub_c, warm, progress=False)
        t0, c0 = time.perf_counter(), time.process_time()
        if w2v:
            vectors, _ = train_on_ids(vocab, ids, cfg, progress=False)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            wv = WordVectors(vocab.words, vectors)
        else:
            model, _ = train_fasttext_ids(vocab, ids, cfg, progress=False)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            wv = model.wv
        n_words = ids.n_words
    else:
        from gensim.models import FastText, Word2Vec

        with open(corpus, encoding="utf-8") as f:
            sentences = [line.split() for line in f]
        kw = dict(vector_size=hp["dim"], window=hp["window"], min_count=hp["min_count"], sample=hp["sample"],
                  workers=hp["workers"], sg=int(sg), alpha=alpha, min_alpha=alpha * 1e-4, seed=seed)  # fmt: skip
        if spec["kind"] == "word2vec":
            m = Word2Vec(hs=int(spec["loss"] == "hs"), negative=5 if spec["loss"] == "ns" else 0, **kw)
        else:
            m = FastText(negative=5, bucket=hp["bucket"], min_n=3, max_n=6, **kw)
        m.build_vocab(sentences)
        t0, c0 = time.perf_counter(), time.process_time()
        m.train(sentences, total_examples=m.corpus_count, epochs=hp["epochs"])
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        wv = WordVectors(m.wv.index_to_key, m.wv.vectors)
        n_words = int(sum(m.wv.get_vecattr(w, "count") for w in m.wv.index_to_key))
    words = n_words * hp["epochs"]
    return {"impl": impl, "model": name, "seed": seed, "seconds": seconds, "words": words,
            "words_per_second": words / seconds, "cpu_seconds": cpu, "words_per_cpu_second": words / cpu,
            **evaluate(wv)}  # fmt: skip


def train_glove_python(corpus: Path, hp: dict, seed: int) -> dict:
    """GloVe by glove-python (``pip install bicleaner-ai-glove``, a maintained build of Kula's
    ``glove_python``) on the same co-occurrences as ptmkit's: the same vocabulary (min_count, words
    below it removed before windowing), window 10 with 1/d weights, and ptmkit's x_max, alpha,
    learning rate, dimension, epochs and threads.  Its model differs from the paper's by design: one
    vector matrix for words and contexts, trained on the upper triangle of X, with plain AdaGrad
    (raw squared gradients); its ``word_vectors`` are scored."""
    import numpy as np
    from glove import Corpus, Glove

    from ptmkit.static.glove import GloVeConfig
    from ptmkit.static.vectors import WordVectors
    from ptmkit.static.vocab import load_corpus

    defaults = GloVeConfig()
    vocab, ids = load_corpus(corpus, hp["min_count"], cache=False)  # ptmkit's vocabulary, OOV words dropped
    words = list(vocab.words)
    index = {w: i for i, w in enumerate(words)}
    table = np.array(words, dtype=object)
    bounds = ids.sentences
    sentences = [table[ids.ids[a:b]].tolist() for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    tokens = ids.n_words
    t0 = time.perf_counter()
    co = Corpus(index)
    co.fit(sentences, window=defaults.window)
    count_seconds = time.perf_counter() - t0
    model = Glove(no_components=hp["dim"], learning_rate=defaults.lr, alpha=defaults.alpha, max_count=defaults.x_max,
                  random_state=seed)
    t1, c1 = time.perf_counter(), time.process_time()
    model.fit(co.matrix, epochs=hp["glove_epochs"], no_threads=hp["workers"])
    seconds, cpu = time.perf_counter() - t1, time.process_time() - c1
    wv = WordVectors(words, model.word_vectors.astype(np.float32))
    return {"impl": "glove-python", "model": GLOVE, "seed": seed, "seconds": seconds, "words": tokens * hp["glove_epochs"],
            "words_per_second": tokens * hp["glove_epochs"] / seconds, "count_words_per_second": tokens / count_seconds,
            "words_per_cpu_second": tokens * hp["glove_epochs"] / cpu, "train_seconds": seconds, "nnz": int(co.matrix.nnz),
            **evaluate(wv)}  # fmt: skip


def glove_python_available() -> bool:
    try:
        import glove  # noqa: F401
    except ImportError:
        print("# GloVe: glove-python is not installed (pip install bicleaner-ai-glove): ptmkit only", file=sys.stderr)
        return False
    return True


def c_model(name: str) -> str:
    """The C tool's model for a bench model: the shared-negatives rows are anchored on the exact update."""
    return name.removesuffix("_shared")


def train_with_c_tool(name: str, corpus: Path, hp: dict, seed: int, tmp: Path) -> dict:
    from c_tools import train_c

    wv, seconds, cpu, n_words = train_c(c_model(name), corpus, hp, seed, tmp)
    words = n_words * hp["epochs"]
    return {"impl": "c", "model": name, "seed": seed, "seconds": seconds, "words": words,
            "words_per_second": words / seconds, "cpu_seconds": cpu, "words_per_cpu_second": words / cpu,
            # the C tool runs as a child of this worker: its peak memory is the children's
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, **evaluate(wv)}  # fmt: skip


def run_one(impl: str, name: str, corpus: Path, hp: dict, seed: int, tmp: Path) -> dict:
    out = tmp / f"{impl}-{name}-{seed}.json"
    env = {**os.environ, "NUMBA_NUM_THREADS": str(hp["workers"]), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--worker", impl, name, str(corpus), json.dumps(hp), str(seed), str(out)]
    subprocess.run(cmd, check=True, env=env)
    return json.loads(out.read_text())


# ----------------------------------------------------------------------------- summary


def mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def aggregate(runs: list[dict]) -> dict:
    """Median words/s, mean ± sd of the scores over the seeds of one (library, model)."""
    agg = {"words_per_second": statistics.median(r["words_per_second"] for r in runs), "n_seeds": len(runs),
           "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs)}  # fmt: skip
    if "words_per_cpu_second" in runs[0]:
        agg["words_per_cpu_second"] = statistics.median(r["words_per_cpu_second"] for r in runs)
    for key in ("analogy", "ws353", "simlex"):
        agg[key], agg[f"{key}_sd"] = mean_sd([r[key] for r in runs])
    if "count_words_per_second" in runs[0]:
        agg["count_words_per_second"] = statistics.median(r["count_words_per_second"] or 0.0 for r in runs)
    return agg


def glove_available() -> bool:
    try:
        from ptmkit.static.glove import GloVeConfig, train_glove  # noqa: F401
    except Exception as exc:
        print(f"# GloVe skipped: {exc}", file=sys.stderr)
        return False
    return True


def fmt_row(name: str, impl: str, a: dict) -> str:
    cpu = f"{a['words_per_cpu_second']:10.0f}" if "words_per_cpu_second" in a else f"{'-':>10s}"
    return (f"{name:9s} {impl:7s} {a['words_per_second']:10.0f} {cpu} {a['analogy']:6.2f}±{a['analogy_sd']:<5.2f}"
            f" {a['ws353']:6.3f}±{a['ws353_sd']:<6.3f} {a['simlex']:6.3f}±{a['simlex_sd']:<6.3f} {a['peak_rss_mb']:7.0f}")  # fmt: skip


def score_deltas(summary: dict, prefix: str, p: dict, q: dict, suffix: str = "") -> None:
    """``<prefix>_{analogy,ws353,simlex}_delta<suffix>``: ptmkit's scores ``p`` minus a peer's ``q``."""
    summary[f"{prefix}_analogy_delta{suffix}"] = round(p["analogy"] - q["analogy"], 2)
    summary[f"{prefix}_ws353_delta{suffix}"] = round(p["ws353"] - q["ws353"], 4)
    summary[f"{prefix}_simlex_delta{suffix}"] = round(p["simlex"] - q["simlex"], 4)


def parse_setting(kv: str) -> tuple[str, int]:
    key, _, value = kv.partition("=")
    try:
        return key, int(value)
    except ValueError:
        raise SystemExit(f"--ptmkit-set takes KEY=INT, got {kv!r}") from None


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, impl, name, corpus, hp, seed, out = sys.argv
        worker(impl, name, Path(corpus), json.loads(hp), int(seed), Path(out))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="text file, or recipe name(s) joined by '+' (e.g. english-mix, ptb+brown); "
                    "default: english-mix, else PTB train")  # fmt: skip
    ap.add_argument("--max-words", type=int, default=None, help="use the first N words of the corpus")
    ap.add_argument("--lowercase", action="store_true", help="lowercase the corpus (e.g. to mix PTB with cased text)")
    ap.add_argument("--models", default=",".join([*MODELS, GLOVE]), help=f"comma-separated subset of {', '.join([*MODELS, GLOVE])}")
    ap.add_argument("--seeds", type=int, default=3, help="trainings per library and model (seeds 1..N)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--glove-epochs", type=int, default=25)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bucket", type=int, default=2_000_000)
    ap.add_argument("--no-c", action="store_true", help="skip the original C tools (word2vec.c, fastText C++)")
    ap.add_argument("--ptmkit-set", nargs="+", default=[], metavar="KEY=INT",
                    help="integer settings of ptmkit's Word2VecConfig for the word2vec rows (e.g. hot_rows=32 sync_words=16)")
    args = ap.parse_args()
    hp = dict(dim=args.dim, window=5, epochs=args.epochs, min_count=5, sample=1e-3, workers=args.workers,
              bucket=args.bucket, glove_epochs=args.glove_epochs,
              ptmkit_set=dict(parse_setting(kv) for kv in args.ptmkit_set))  # fmt: skip
    names = [m for m in args.models.split(",") if m]
    bad = [m for m in names if m not in MODELS and m != GLOVE]
    if bad:
        raise SystemExit(f"unknown model(s) {bad}; choose from {[*MODELS, GLOVE]}")
    if GLOVE in names and not glove_available():
        names.remove(GLOVE)
    src = find_corpus(args.corpus)
    summary: dict = {"corpus": "+".join(map(str, src)), "seeds": args.seeds, **hp}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        corpus, n = prefix_corpus(src, args.max_words, args.lowercase, tmp)
        summary["corpus_words"] = n
        print(f"corpus {summary['corpus']} ({n:,} words), seeds {args.seeds}, {hp}")
        print(f"{'model':9s} {'impl':7s} {'words/s':>10s} {'words/cpu-s':>10s} {'analogy%':>12s} {'ws353':>13s} "
              f"{'simlex':>13s} {'peak MB':>7s}")
        for name in names:
            if name == GLOVE:
                impls = ("ptmkit", "glove-python") if glove_python_available() else ("ptmkit",)
            else:
                impls = ("ptmkit", "gensim")
            if name != GLOVE and not args.no_c and c_tools.available(c_model(name)):
                impls = (*impls, "c")
            runs: dict[str, list[dict]] = {i: [] for i in impls}
            for seed in range(1, args.seeds + 1):
                for impl in impls[seed % len(impls):] + impls[:seed % len(impls)]:  # rotate who goes first
                    r = run_one(impl, name, corpus, hp, seed, tmp)
                    runs[impl].append(r)
                    extra = f" count {r['count_words_per_second']:.0f} w/s" if name == GLOVE else ""
                    print(f"  {name:9s} {impl:7s} seed {seed}: {r['words_per_second']:10.0f} w/s {r['seconds']:7.1f} s "
                          f"{r['peak_rss_mb']:6.0f} MB  analogy {r['analogy']:6.2f}  ws353 {r['ws353']:.3f}  "
                          f"simlex {r['simlex']:.3f}{extra}", flush=True)  # fmt: skip
            aggs = {i: aggregate(runs[i]) for i in impls}
            for i in impls:
                print(fmt_row(name, i, aggs[i]), flush=True)
            summary[f"{name}_raw"] = {i: {"summary": aggs[i], "runs": runs[i]} for i in impls}
            p = aggs["ptmkit"]
            if name == GLOVE:
                summary["glove_train_words_per_s"] = round(p["words_per_second"])
                summary["glove_count_words_per_s"] = round(p.get("count_words_per_second", 0.0))
                for key in ("analogy", "ws353", "simlex"):
                    summary[f"glove_{key}"] = round(p[key], 4)
                if "glove-python" in aggs:
                    r = aggs["glove-python"]
                    summary["glove_speedup"] = round(p["words_per_second"] / r["words_per_second"], 3)
                    summary["glove_count_speedup"] = round(p["count_words_per_second"] / r["count_words_per_second"], 3)
                    score_deltas(summary, GLOVE, p, r)
                    summary["glove_mem_ratio"] = round(p["peak_rss_mb"] / r["peak_rss_mb"], 3)
                continue
            g = aggs["gensim"]
            summary[f"{name}_speedup"] = round(p["words_per_second"] / g["words_per_second"], 3)
            # per-seed speed ratios of the interleaved pairs: the spread shows how noisy the machine was
            ratios = [a["words_per_second"] / b["words_per_second"] for a, b in zip(runs["ptmkit"], runs["gensim"])]
            summary[f"{name}_speedup_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
            # words per CPU-second of the whole process (all its threads): robust to a loaded machine
            summary[f"{name}_cpu_speedup"] = round(p["words_per_cpu_second"] / g["words_per_cpu_second"], 3)
            score_deltas(summary, name, p, g)
            summary[f"{name}_mem_ratio"] = round(p["peak_rss_mb"] / g["peak_rss_mb"], 3)
            if "c" in aggs:
                c = aggs["c"]
                summary[f"{name}_speedup_c"] = round(p["words_per_second"] / c["words_per_second"], 3)
                summary[f"{name}_cpu_speedup_c"] = round(p["words_per_cpu_second"] / c["words_per_cpu_second"], 3)
                score_deltas(summary, name, p, c, "_c")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
