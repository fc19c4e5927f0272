"""``ptm prepare``: tokenize text files into a memory-mapped corpus directory."""

from __future__ import annotations

import argparse
import math

from ptmkit.data.memory import parse_count, parse_size  # light: no numpy, no torch
from ptmkit.data.textfiles import TextFormat  # light: the standard library only
from ptmkit.errors import PtmError

HELP = "tokenize text files (plain, JSONL, CSV, Parquet; compressed) into a memory-mapped corpus (for pre-training)"

DESCRIPTION = """\
Tokenize UTF-8 text files into DIR: tokens.bin (uint16/uint32 ids), word_starts.bin (one bit
per token: does it begin a word, for whole-word and span masking), sentences.npy and
documents.npy (offsets), meta.json and a copy of the tokenizer.  One line is one sentence; a
blank line or the end of a file ends a document.  Streams the input with bounded memory on all
cores; the result does not depend on --workers.

FILE is read by its suffix: plain UTF-8 text (any suffix not below); JSON Lines (.jsonl, .ndjson,
.json: one object a line, the text in --field, default "text"); CSV or TSV (.csv, .tsv: a header
row, the text in --column, default "text"); Parquet (.parquet, .pq: the text in --field).  A row of
JSON Lines, CSV or Parquet is one document: its lines are its sentences (blank lines inside it do
not split it).  All but Parquet may be compressed, named by a last suffix: .gz, .bz2, .xz (.lzma),
.zst (.zstd), as in corpus.jsonl.gz or wiki.txt.zst; they are decompressed as they are read, never
whole.  Other archives (.zip, .7z, .lz4, .tar, ...) are refused; decompress them first.

--memory-budget SIZE bounds the memory the text in flight takes in all processes together (the
reader and writer, and the workers while they encode): the block size, the text handed to the
encoder at once and the blocks in flight are derived from it, fewer workers are used when it
cannot feed them all (unless --workers is given), and a budget too small is refused with the
minimum it needs.  SIZE is bytes with K, M, G (1024-based): 512M, 2G, 1.5GiB.  The processes'
own footprint (Python, numpy, numba and the tokenizer library: about 120 MB in the parent, a
few MB per worker) comes on top and does not grow with the corpus.  A line longer than a block
is refused under a budget (one line is one sentence).  At the end ptm logs the peak it measured.

--shard-size TOKENS writes the corpus as shards of about TOKENS tokens (k, M, G: 1000-based;
50M = 50,000,000 tokens, about 100 MB of uint16 ids) in DIR/shards/00000, 00001, ..., each an
ordinary corpus directory, with the index in DIR/meta.json (the shards, their counts and where
each begins).  A shard ends at the first sentence end at or past its size; a document may run on
into the next shard.  `ptm pretrain --data DIR` reads the set as the one corpus it was cut from.
Without --shard-size DIR is one corpus, as before.

--dedup exact drops every document whose normalised text (Unicode NFKC, lower-cased, whitespace
runs as one space) repeats an earlier one's (an 8-byte hash of each kept document is remembered).
--dedup near drops every document whose word 5-grams resemble an earlier one's: MinHash LSH with
128 permutations, in bands chosen for --dedup-threshold (the Jaccard similarity, default 0.8;
about 0.6 KB remembered per kept document).  The first of a group of duplicates is kept, across
all FILEs.  What was removed (count and share) is logged and recorded in DIR/meta.json as
"dedup".  With --dedup each document is held whole while it is compared (under --memory-budget a
document longer than a block is refused).

--language CODE records the text's language (a multilingual pre-training joins one corpus per
language: ptm pretrain --data en/ es/ ny/); the tokenizer must have been trained on it
(ptm tokenizer train ... --languages en,es,ny).  --parallel A,B prepares translation pairs for XLM's
translation language model: one JSON Lines / CSV / TSV file with a field per language (A and B,
an optional "ref"), or two line-aligned files (A's, then B's; JSON Lines with the text in --field
and, where both carry a "ref", the same ref on each line).  Unequal line counts, unaligned refs
and empty sides are refused with their line numbers.  Pair k becomes document k: A's sentence,
then B's.

DIR must be new, empty, or a corpus ptm prepared (marked by .ptmkit-output.json); an input file
inside DIR is refused.  The corpus is written to a scratch directory inside DIR and moved into
place only when complete, so a failure leaves DIR as it was.
"""

EPILOG = """\
example:
  ptm prepare ptb/train.txt ptb/valid.txt -t tok.json -o corpora/ptb
  ptm prepare zh.txt -t tok.json -o corpora/zh --segmenter jieba   # Chinese words for whole-word masking
  ptm prepare zh.txt -t tok.json -o corpora/zh --segmenter jieba --user-dict dictionary.txt
  ptm prepare web/*.txt -t tok.json -o corpora/web --memory-budget 2G         # bounded memory
  ptm prepare web/*.txt -t tok.json -o corpora/web --memory-budget 512M --shard-size 50M
                                                                             # shards of ~50M tokens
  ptm prepare crawl/*.jsonl.zst -t tok.json -o corpora/crawl --field content --dedup near
  ptm prepare reviews.csv.gz -t tok.json -o corpora/reviews --column review --dedup exact
  ptm prepare wiki/*.parquet -t tok.json -o corpora/wiki                      # the field "text"
  ptm pretrain bert-tiny --data corpora/web -o runs/web                      # reads every shard
  ptm prepare es.train.txt -t tok.json -o corpora/es --language es           # one language
  ptm prepare en-es.train.jsonl -t tok.json -o corpora/en-es --parallel en,es # translation pairs
"""


# --chunk-mb bounds: tiny blocks make every line a task of its own (a 1-byte block, what 0 was
# rounded to, read 1 MB of text in 4 s against 0.4 s with 64 KiB: hours for a real corpus, which
# looks like a hang); above 1 GiB one block would hold a whole corpus in memory per worker.
MIN_CHUNK_MB = 1 / 16
MAX_CHUNK_MB = 1024.0


def chunk_mb(text: str) -> float:
    """argparse type of ``--chunk-mb``: a number of MB in [MIN_CHUNK_MB, MAX_CHUNK_MB]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MB, got {text!r}") from None
    if not (math.isfinite(value) and MIN_CHUNK_MB <= value <= MAX_CHUNK_MB):
        raise argparse.ArgumentTypeError(
            f"must be between {MIN_CHUNK_MB:g} (64 KiB) and {MAX_CHUNK_MB:g} MB, got {text}; the default 1 suits any corpus"
        )
    return value


def memory_budget(text: str) -> int:
    """argparse type of ``--memory-budget``: a size such as 512M or 2G."""
    try:
        return parse_size(text)
    except PtmError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--memory-budget: ")) from None


def shard_size(text: str) -> int:
    """argparse type of ``--shard-size``: a number of tokens such as 50M."""
    try:
        return parse_count(text)
    except PtmError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shard-size: ")) from None


def jaccard(text: str) -> float:
    """argparse type of ``--dedup-threshold``: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a Jaccard similarity such as 0.8, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("prepare", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="text, JSON Lines, CSV/TSV or Parquet files, maybe compressed (.gz .bz2 .xz .zst)")
    p.add_argument("-t", "--tokenizer", required=True, metavar="TOKENIZER_JSON",
                   help="tokenizer.json (from `ptm tokenizer train`) or a model directory with vocab.txt")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="corpus directory to create")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="processes (default: all cores)")
    p.add_argument("--chunk-mb", type=chunk_mb, default=1.0, metavar="MB",
                   help=f"block size per task, {MIN_CHUNK_MB:g} to {MAX_CHUNK_MB:g} (default 1)")
    p.add_argument("--memory-budget", type=memory_budget, default=None, metavar="SIZE",
                   help="bound on the memory of the text in flight, all processes together (512M, 2G); "
                        "the processes' own ~120 MB come on top")
    p.add_argument("--shard-size", type=shard_size, default=None, metavar="TOKENS",
                   help="write shards of about TOKENS tokens (50M = 50,000,000) under DIR/shards/ with one index")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the corpus ptm prepared in DIR (once the new one is complete; other files stay)")
    p.add_argument("--link", default=None, metavar="GRAPH",
                   help="link every word to a knowledge graph (wordnet, or a graph directory) and record the entity "
                        "links beside the word starts (entities.npy / entities.json), for ERNIE's objective.alignment=corpus")
    p.add_argument("--segmenter", default=None, metavar="NAME",
                   help="word segmenter refining the word starts (jieba, for Chinese; pip install 'ptmkit[zh]')")
    p.add_argument("--user-dict", default=None, metavar="FILE",
                   help="jieba user dictionary: one word per line, optionally with a frequency and a POS tag")
    p.add_argument("--field", default="text", metavar="NAME",
                   help="the field holding the text in JSON Lines and Parquet files (default text)")
    p.add_argument("--column", default="text", metavar="NAME",
                   help="the column (header name) holding the text in CSV and TSV files (default text)")
    p.add_argument("--dedup", choices=("exact", "near"), default=None,
                   help="drop duplicate documents: exact (normalised text) or near (MinHash LSH of word 5-grams)")
    p.add_argument("--dedup-threshold", type=jaccard, default=0.8, metavar="J",
                   help="--dedup near: the Jaccard similarity from which a document is a near duplicate (default 0.8)")
    p.add_argument("--language", default=None, metavar="CODE",
                   help="the text's language (en, es, ...), one the tokenizer was trained on (--languages)")
    p.add_argument("--parallel", default=None, metavar="A,B",
                   help="FILEs are translation pairs in languages A and B (see above): a corpus for XLM's TLM")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.data.parallel import prepare, prepare_parallel  # the command's one heavy import
    if args.dedup != "near" and args.dedup_threshold != 0.8:
        raise PtmError("--dedup-threshold is the similarity of --dedup near; give --dedup near with it")
    if args.parallel is not None:
        if args.language is not None or args.dedup is not None or args.shard_size is not None or args.link is not None:
            raise PtmError("--parallel prepares translation pairs; --language, --dedup, --shard-size and --link do not apply")
        corpus = prepare_parallel(args.files, args.parallel.split(","), args.tokenizer, args.output, field=args.field,
                                  workers=args.workers, overwrite=args.overwrite, memory_budget=args.memory_budget)
        print(f"{corpus} ({corpus.meta['pairs']:,} pairs, {' -> '.join(corpus.meta['parallel'])})")
        return 0
    corpus = prepare(args.files, args.tokenizer, args.output, workers=args.workers,
                     chunk_bytes=int(args.chunk_mb * (1 << 20)), overwrite=args.overwrite,
                     segmenter=args.segmenter, user_dict=args.user_dict, memory_budget=args.memory_budget,
                     shard_tokens=args.shard_size, link=args.link, fmt=TextFormat(args.field, args.column),
                     dedup=args.dedup, dedup_threshold=args.dedup_threshold, language=args.language)
    print(f"{corpus}")
    return 0
