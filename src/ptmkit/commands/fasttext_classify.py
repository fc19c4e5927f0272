"""``ptm fasttext-classify``: fastText's supervised text classifier (Joulin et al. 2016).

    ptm fasttext-classify train (--task mr | --input TRAIN.txt [--valid DEV.txt]) -o MODEL [--dim 100]
        [--epoch 5] [--lr 0.1] [--wordNgrams 1] [--bucket 2000000] [--minCount 1] [--loss softmax|hs]
        [--thread 0] [--seed 1] [--overwrite]
    ptm fasttext-classify test MODEL (--task mr [--split test] | FILE) [-k 1]
    ptm fasttext-classify predict MODEL FILE|- [-k 1] [--prob]

Files are in fastText's format: one example per line, labels as ``__label__NAME`` tokens.
Tasks: the built-in classification tasks (``mr``, ``zh-reviews``, ...) and ``brown-genre``
(15 genres of the Brown corpus).  ``train`` prints and saves (``scores.json``) the accuracy on
dev and test (a task) or on ``--valid``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from ptmkit import outputs
from ptmkit.config import to_dict
from ptmkit.errors import PtmError

HELP = "train, test and apply fastText's supervised text classifier"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (``--lr nan`` would train a classifier that answers at random)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fasttext-classify", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    t = sub.add_parser("train", help="train a classifier on a task or a __label__ file",
                       epilog="DIR must be new, empty, or (with --overwrite) a classifier ptm wrote; --overwrite "
                              "removes only the files ptm wrote there, an input inside DIR is refused, and a failed "
                              "command leaves nothing behind.")  # fmt: skip
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", help="built-in task (mr, brown-genre, ...)")
    src.add_argument("--input", metavar="FILE", help="training file in fastText's __label__ format")
    t.add_argument("--valid", metavar="FILE", help="evaluation file (with --input)")
    t.add_argument("--out", "-o", required=True, metavar="DIR", help="model directory (new or empty)")
    t.add_argument("--dim", type=_positive, default=100)
    t.add_argument("--epoch", type=_positive, default=5)
    t.add_argument("--lr", type=_positive_float, default=0.1)
    t.add_argument("--wordNgrams", dest="word_ngrams", type=_positive, default=1)
    t.add_argument("--bucket", type=int, default=2_000_000)
    t.add_argument("--minCount", dest="min_count", type=_positive, default=1)
    t.add_argument("--loss", choices=("softmax", "hs"), default="softmax")
    t.add_argument("--thread", type=int, default=0, help="threads (0: one per core)")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--overwrite", action="store_true", help="replace a classifier ptm wrote in --out")
    t.set_defaults(func=run_train)

    e = sub.add_parser("test", help="precision/recall at k and accuracy on a task split or a __label__ file")
    e.add_argument("model", metavar="MODEL")
    e.add_argument("file", nargs="?", metavar="FILE")
    e.add_argument("--task")
    e.add_argument("--split", default="test", choices=("train", "dev", "test"))
    e.add_argument("-k", type=_positive, default=1)
    e.set_defaults(func=run_test)

    q = sub.add_parser("predict", help="the k most probable labels of each line of FILE ('-': stdin)")
    q.add_argument("model", metavar="MODEL")
    q.add_argument("file", metavar="FILE")
    q.add_argument("-k", type=_positive, default=1)
    q.add_argument("--prob", action="store_true", help="print each label's probability after it")
    q.set_defaults(func=run_predict)


def _static():
    """``(classify_data, fasttext_classify)``, imported when a sub-command runs: their numba
    kernels would slow ``--help`` down."""
    from ptmkit.static import classify_data, fasttext_classify

    return classify_data, fasttext_classify


def run_train(args: argparse.Namespace) -> int:
    classify_data, fasttext_classify = _static()

    if args.valid and args.task:
        raise PtmError("--valid goes with --input; a --task is evaluated on its own dev and test splits")
    try:
        cfg = fasttext_classify.ClassifierConfig(dim=args.dim, epochs=args.epoch, lr=args.lr, word_ngrams=args.word_ngrams,
                               bucket=args.bucket, min_count=args.min_count, loss=args.loss, workers=args.thread,
                               seed=args.seed)  # fmt: skip
    except ValueError as exc:
        raise PtmError(f"bad option: {exc}") from None
    outputs.check(args.out, "classifier", [args.input, args.valid], args.overwrite)  # before reading data
    if args.task:
        train = classify_data.task_lines(args.task, "train")
        evals = {split: classify_data.task_lines(args.task, split) for split in ("dev", "test")}
    else:
        train = classify_data.read_label_file(args.input)
        evals = {"valid": classify_data.read_label_file(args.valid)} if args.valid else {}
    clf = fasttext_classify.train_classifier(train, cfg, progress=sys.stderr.isatty())
    scores = {name: clf.test(data) for name, data in evals.items()}
    result = {"task": args.task or args.input, "train": len(train), "labels": len(clf.labels),
              "config": to_dict(cfg), "stats": clf.train_stats, "scores": scores}  # fmt: skip
    with outputs.staged(args.out, "classifier", [args.input, args.valid], args.overwrite) as tmp:
        clf.save(tmp)
        (tmp / "scores.json").write_text(json.dumps(result, indent=2) + "\n")
    for name, s in scores.items():
        print(f"{name}\tN {s['n']}\taccuracy {s['accuracy']:.4f}")
    print(f"saved to {args.out}")
    return 0


def run_test(args: argparse.Namespace) -> int:
    classify_data, fasttext_classify = _static()

    if (args.task is None) == (args.file is None):
        raise PtmError("give either a FILE in __label__ format or --task NAME (with --split)")
    clf = fasttext_classify.FastTextClassifier.load(args.model)
    data = classify_data.task_lines(args.task, args.split) if args.task else args.file
    s = clf.test(data, k=args.k)
    print(f"N\t{s['n']}")
    print(f"P@{args.k}\t{s[f'precision_at_{args.k}']:.4f}")
    print(f"R@{args.k}\t{s[f'recall_at_{args.k}']:.4f}")
    print(f"accuracy\t{s['accuracy']:.4f}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    classify_data, fasttext_classify = _static()

    clf = fasttext_classify.FastTextClassifier.load(args.model)
    if args.file == "-":
        data = classify_data.parse_label_lines(sys.stdin, "stdin", require_labels=False)
    else:
        data = classify_data.read_label_file(args.file, require_labels=False)
    for row in clf.predict(data, k=args.k):
        if args.prob:
            print(" ".join(f"{classify_data.LABEL_PREFIX}{lab} {p:.5f}" for lab, p in row))
        else:
            print(" ".join(f"{classify_data.LABEL_PREFIX}{lab}" for lab, _ in row))
    return 0
