"""``ptm prepare``: tokenize text files into a memory-mapped corpus directory."""

from __future__ import annotations

import argparse

HELP = "tokenize text files into a memory-mapped corpus (for pre-training)"

DESCRIPTION = """\
Tokenize UTF-8 text files into DIR: tokens.bin (uint16/uint32 ids), word_starts.bin (one bit
per token: does it begin a word, for whole-word and span masking), sentences.npy and
documents.npy (offsets), meta.json and a copy of the tokenizer.  One line is one sentence; a
blank line or the end of a file ends a document.  Streams the input with bounded memory on all
cores; the result does not depend on --workers.

DIR must be new, empty, or a corpus ptm prepared (marked by .ptmkit-output.json); an input file
inside DIR is refused.  The corpus is written to a scratch directory inside DIR and moved into
place only when complete, so a failure leaves DIR as it was.
"""

EPILOG = """\
example:
  ptm prepare ptb/train.txt ptb/valid.txt -t tok.json -o corpora/ptb
  ptm prepare zh.txt -t tok.json -o corpora/zh --segmenter jieba   # Chinese words for whole-word masking
  ptm prepare zh.txt -t tok.json -o corpora/zh --segmenter jieba --user-dict dictionary.txt
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("prepare", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text files")
    p.add_argument("-t", "--tokenizer", required=True, metavar="TOKENIZER_JSON",
                   help="tokenizer.json (from `ptm tokenizer train`) or a model directory with vocab.txt")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="corpus directory to create")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="processes (default: all cores)")
    p.add_argument("--chunk-mb", type=float, default=1.0, metavar="MB", help="block size per task (default 1)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the corpus ptm prepared in DIR (once the new one is complete; other files stay)")
    p.add_argument("--segmenter", default=None, metavar="NAME",
                   help="word segmenter refining the word starts (jieba, for Chinese; pip install 'ptmkit[zh]')")
    p.add_argument("--user-dict", default=None, metavar="FILE",
                   help="jieba user dictionary: one word per line, optionally with a frequency and a POS tag")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.data.prepare import prepare

    corpus = prepare(args.files, args.tokenizer, args.output, workers=args.workers,
                     chunk_bytes=max(1, int(args.chunk_mb * (1 << 20))), overwrite=args.overwrite,
                     segmenter=args.segmenter, user_dict=args.user_dict)
    print(f"{corpus}")
    return 0
