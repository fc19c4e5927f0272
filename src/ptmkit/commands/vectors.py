"""``ptm vectors``: query and evaluate a word-vectors file (word2vec text/binary or GloVe).

    ptm vectors neighbors VECTORS WORD [-n 10]
    ptm vectors analogy VECTORS A B C [--method 3cosadd|3cosmul]     (a : b :: c : ?)
    ptm vectors similarity VECTORS W1 W2
    ptm vectors evaluate VECTORS [--pairs FILE ...] [--analogies FILE] [--restrict-vocab N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ptmkit.errors import PtmError


def _load(args):
    from ptmkit.static.vectors import WordVectors

    return WordVectors.load(args.vectors, format=args.format)


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


def _resolve(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise PtmError(f"evaluation file {path} does not exist")
    return p


def _evaluate(args) -> int:
    if not args.pairs and not args.analogies:
        raise PtmError("give --pairs FILE (word-similarity) and/or --analogies FILE (questions-words format)")
    wv = _load(args)
    results: dict = {}
    for path in args.pairs or []:
        r = wv.evaluate_pairs(_resolve(path))
        results[Path(path).stem] = r
        print(f"{Path(path).name}: spearman {r['spearman']:.4f}  pearson {r['pearson']:.4f}  "
              f"pairs {r['n_pairs']}  oov {r['n_oov']}")  # fmt: skip
    if args.analogies:
        r = wv.evaluate_analogies(_resolve(args.analogies), restrict_vocab=args.restrict_vocab or 30_000, method=args.method)
        results["analogies"] = r
        for name, s in r["sections"].items():
            print(f"  {name:32s} {s['accuracy']:.4f}  ({s['correct']}/{s['total']})")
        print(f"{Path(args.analogies).name}: accuracy {r['accuracy']:.4f}  ({r['correct']}/{r['n_questions']}, "
              f"{r['n_oov']} with unknown words skipped)")  # fmt: skip
    if args.json:
        print(json.dumps(results))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("vectors", help="query and evaluate word vectors (word2vec/GloVe files)")
    sub = parser.add_subparsers(dest="vectors_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("vectors", help="vectors file: word2vec text or binary, or GloVe text")
        p.add_argument("--format", default="auto", choices=["auto", "word2vec", "word2vec-binary", "glove"])
        p.add_argument("--restrict-vocab", type=int, default=None, help="search only the N most frequent words")

    p = sub.add_parser("neighbors", help="nearest words by cosine similarity")
    common(p)
    p.add_argument("word")
    p.add_argument("-n", type=int, default=10)
    p.set_defaults(func=_neighbors)

    p = sub.add_parser("analogy", help="a : b :: c : ?  (e.g. man king woman -> queen)")
    common(p)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("c")
    p.add_argument("-n", type=int, default=5)
    p.add_argument("--method", default="3cosadd", choices=["3cosadd", "3cosmul"])
    p.set_defaults(func=_analogy)

    p = sub.add_parser("similarity", help="cosine similarity of two words")
    common(p)
    p.add_argument("w1")
    p.add_argument("w2")
    p.set_defaults(func=_similarity)

    p = sub.add_parser("evaluate", help="word-similarity (Spearman) and analogy accuracy")
    common(p)
    p.add_argument("--pairs", action="append", help="word1<TAB>word2<TAB>score file (repeatable)")
    p.add_argument("--analogies", help="questions-words.txt style file")
    p.add_argument("--method", default="3cosadd", choices=["3cosadd", "3cosmul"])
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    p.set_defaults(func=_evaluate)
