"""``ptm evaluate``: a suite of downstream tasks under one protocol, for one or more models."""

from __future__ import annotations

import argparse
from pathlib import Path

from ptmkit import fileio, outputs
from ptmkit.commands.compare import add_protocol_args

HELP = "fine-tune models on a suite of tasks under one protocol and tabulate the scores"
DESCRIPTION = """\
Fine-tune every MODEL (a run, a checkpoint directory, or a word-vectors file) on every task of
a suite, in both transfer modes (finetune: all weights; features: frozen encoder + scalar mix +
a task BiLSTM), with one protocol: a fixed training subset, the first --eval-size dev/test
examples, --epochs epochs, the LR chosen on dev from --lrs, --seeds seeds.  A from-scratch row
(the first model's architecture, randomly initialised) is the baseline.

suites: en = mr, brown-pos, wordnet-wsd, bible-paraphrase, wordnet-qa
        zh = zh-reviews, peoples-daily-ner, peoples-daily-pos
        xling = cross-lingual: per layer, verse retrieval P@1 (en <-> es, ny, grc; with and
          without per-language centering), English-Spanish lexicon induction P@1 (FreeDict) and
          Greek-English word alignment (SimAlign Argmax / IterMax, AER, beside IBM Model 1) into
          OUT/xling.md, .json, .png; then the fine-tuning protocol on bible-genre-en-es and
          bible-genre-en-ny (trained on English, tested on Spanish / Chichewa: zero-shot
          transfer) and bible-genre-ny (in-language)
        vl = vision-language runs (clip-tiny, visualbert-tiny, ...): on the emoji set's unseen
          concepts, image <-> text retrieval R@1/5/10 per drawing style (trained and held out)
          and caption locale (--locales), and zero-shot category / subcategory classification by
          prompts, chance beside each, into OUT/vl.md, .json, .png (no fine-tuning)
Writes OUT/table.md, OUT/table.png and OUT/results.json; OUT must be new, empty, or an earlier
evaluation of ptm's (.ptmkit-output.json marks it).

Learning curve: --train-sizes 100,500,2000,all runs the protocol once per training size (nested
subsets; all = the whole training split) into OUT/n-SIZE/ and writes OUT/learning_curve.md (per
task: mean ± sd per model, mode and size, and the pre-training gain over the from-scratch row),
OUT/learning_curve.json and OUT/learning_curve.png (score vs training size, log x).
"""
EPILOG = """\
examples:
  ptm evaluate runs/bert runs/w2v/vectors.bin --suite en -o eval/en
  ptm evaluate runs/bert-zh --suite zh -o eval/zh --seeds 1 --modes finetune
  ptm evaluate runs/bert --suite mr,brown-pos -o eval/curve --train-sizes 100,500,2000,all
  ptm evaluate runs/xlm runs/mbert --suite xling -o eval/xling --modes finetune
  ptm evaluate runs/clip runs/caption-lm --suite vl -o eval/vl
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", metavar="MODEL", help="runs, checkpoint directories or vectors files")
    p.add_argument("--suite", default="en", help="en, zh, xling or vl, or a comma-separated list of built-in tasks")
    p.add_argument("-o", "--out", required=True, help="output directory")
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument("--train-size", type=int, default=500, help="training examples per task (default 500)")
    sizes.add_argument("--train-sizes", metavar="N,N,...,all",
                       help="a learning curve: the protocol at each of these training sizes ('all': the whole split)")
    add_protocol_args(p)
    p.add_argument("--features-lrs", nargs="+", type=float, default=None,
                   help="LR grid of the features mode (default: --lrs)")
    p.add_argument("--modes", nargs="+", default=["finetune", "features"], choices=["finetune", "features"])
    p.add_argument("--images", default="emoji", metavar="DATA",
                   help="--suite vl: the image-text data (default emoji; or a directory with captions.jsonl)")
    p.add_argument("--locales", default="en,es,zh", help="--suite vl: caption locales to retrieve by (default en,es,zh)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import evaluate, learning_curve, vl_eval, xling  # the one heavy import, when the command runs

    suite = args.suite if args.suite in evaluate.SUITES else tuple(t.strip() for t in args.suite.split(",") if t.strip())
    labels = {}
    for m in args.models:
        label = fileio.path_label(m)
        while label.casefold() in {k.casefold() for k in labels}:  # one directory each, on any file system
            label += "'"
        labels[fileio.path_part(label, "model label")] = m
    for task in ([] if isinstance(suite, str) else suite):  # each names a directory: refused before OUT is claimed
        fileio.path_part(task, "task name")
    if suite == "vl":  # vision-language runs: retrieval and zero-shot measures, no fine-tuning protocol
        with outputs.writing(args.out, "evaluate", inputs=list(args.models), overwrite=True, keep=lambda: True,
                             names=list(vl_eval.FILES)):
            vl_eval.evaluate_vl(list(labels.items()), args.out, args.images, [x for x in args.locales.split(",") if x])
        print((Path(args.out) / "vl.md").read_text())
        return 0
    protocol = evaluate.Protocol(train_size=args.train_size, eval_size=args.eval_size, seeds=tuple(args.seeds), lrs=tuple(args.lrs),
                        features_lrs=tuple(args.features_lrs) if args.features_lrs else None, epochs=args.epochs,
                        modes=tuple(args.modes), baseline=not args.no_baseline)
    if args.train_sizes is not None:
        sizes = learning_curve.parse_train_sizes(args.train_sizes)  # a bad list fails before the output is claimed
        names = ["learning_curve.json", "learning_curve.md", "learning_curve.png"]
        with outputs.writing(args.out, "evaluate", inputs=list(args.models), overwrite=True, names=names, keep=lambda: True):
            result = learning_curve.learning_curve(labels, suite, args.out, protocol, sizes, resume=args.resume)
        print((Path(args.out) / "learning_curve.md").read_text())
        return 0 if result["runs"] else 1
    with outputs.writing(args.out, "evaluate", inputs=list(args.models), overwrite=True, keep=lambda: True):
        if suite == "xling":  # the representation measures, then the transfer tasks under the protocol
            xling.xling(labels, args.out)
            print((Path(args.out) / "xling.md").read_text())
            suite = xling.TRANSFER_TASKS
        result = evaluate.evaluate(labels, suite, args.out, protocol, resume=args.resume)
    print((Path(args.out) / "table.md").read_text())
    return 0 if result["runs"] else 1
