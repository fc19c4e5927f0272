"""``ptm tokenizer``: train a tokenizer on text files, or encode text with one."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from ptmkit.data.textfiles import TextFormat  # light: the standard library only
from ptmkit.errors import PtmError

HELP = "train a tokenizer (wordpiece, bpe, unigram, char, word) or encode text"

DESCRIPTION = """\
kinds:
  wordpiece  BERT: lowercase (optional), punctuation and CJK characters split, ## subwords
  bpe        GPT-2: byte-level BPE, never an unknown token
  unigram    SentencePiece-style unigram LM over words marked with a leading ▁
  char       one token per character (CJK included); a space is the token ▁
  word       whitespace-separated words (static embeddings, NNLM)
All kinds reserve [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4).

`train` reads what `ptm prepare` reads: plain text, JSON Lines (.jsonl: the text in --field),
CSV/TSV (.csv, .tsv: the text in --column) and Parquet (.parquet: --field), compressed by suffix
(.gz, .bz2, .xz, .zst) or not; a structured file trains as its plain text copy would.

--languages en,es,ny names each FILE's language (one code per file, in order; repeat a code for a
language with several files).  The subword vocabulary is then learnt from word counts balanced as
XLM samples its languages: language i gets the share q_i ∝ p_i^alpha of the counts (p_i its natural
share; --alpha 1 keeps the natural shares, 0 makes them equal, XLM uses 0.5), so a small language
is not left with characters only.  One token <lang_XX> per language is added after the vocabulary:
`ptm prepare --language XX` and the XLM objective read the languages from it.
"""

EPILOG = """\
examples:
  ptm tokenizer train ptb/train.txt --kind wordpiece --vocab-size 8000 -o tok.json
  ptm tokenizer train crawl/*.jsonl.zst --field content --kind bpe --vocab-size 32000 -o tok.json
  ptm tokenizer train en.txt es.txt ny.txt --languages en,es,ny --alpha 0.5 -o tok.json
  echo "the cat sat" | ptm tokenizer encode -t tok.json
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tokenizer", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="tokenizer_command", metavar="ACTION", required=True)
    tr = sub.add_parser("train", help="train a tokenizer on text files")
    tr.add_argument("files", nargs="+", metavar="FILE",
                    help="UTF-8 text (one sentence per line), JSON Lines, CSV/TSV or Parquet, maybe compressed")
    tr.add_argument("--field", default="text", metavar="NAME",
                    help="the field holding the text in JSON Lines and Parquet files (default text)")
    tr.add_argument("--column", default="text", metavar="NAME",
                    help="the column (header name) holding the text in CSV and TSV files (default text)")
    tr.add_argument("--kind", "-k", default="wordpiece", help="wordpiece | bpe | unigram | char | word (default wordpiece)")
    tr.add_argument("--vocab-size", type=int, default=8000, metavar="N", help="vocabulary size (default 8000)")
    tr.add_argument("--min-frequency", type=int, default=2, metavar="N", help="least count of a kept merge/word (default 2)")
    case = tr.add_mutually_exclusive_group()
    case.add_argument("--lowercase", dest="lowercase", action="store_true", default=True, help="lowercase text (default)")
    case.add_argument("--cased", dest="lowercase", action="store_false", help="keep case")
    tr.add_argument("-o", "--output", required=True, metavar="TOKENIZER_JSON", help="where to write tokenizer.json")
    tr.add_argument("--force", action="store_true", help="overwrite an existing output file")
    tr.add_argument("--languages", default=None, metavar="CODES",
                    help="the language of each FILE, comma-separated (en,es,ny): a multilingual tokenizer")
    tr.add_argument("--alpha", type=float, default=None, metavar="A",
                    help="--languages: language shares ∝ p_i^A (default 0.5, XLM's; 1 natural, 0 equal)")
    tr.set_defaults(func=run_train)
    en = sub.add_parser("encode", help="print token ids and tokens of text (arguments or stdin lines)")
    en.add_argument("-t", "--tokenizer", required=True, metavar="TOKENIZER_JSON")
    en.add_argument("text", nargs="*", help="texts (default: read lines from stdin)")
    en.add_argument("--special", action="store_true", help="add [CLS] ... [SEP]")
    en.set_defaults(func=run_encode)


def run_train(args: argparse.Namespace) -> int:
    from ptmkit.tokenization import tokenizer  # the one heavy import, when the command runs

    tokenizer.check_kind(args.kind)
    languages = args.languages.split(",") if args.languages is not None else None
    if languages is None and args.alpha is not None:
        raise PtmError("--alpha balances the languages of --languages; name each file's language with it")
    out = Path(args.output)
    if out.is_dir():
        out = out / "tokenizer.json"
    if any(Path(f).exists() and Path(f).resolve() == out.resolve() for f in args.files):
        raise PtmError(f"{out} is one of the training files; write the tokenizer to another file")
    if out.exists() and not args.force:
        raise PtmError(f"{out} exists; pass --force to overwrite it")
    tok = tokenizer.Tokenizer.train(args.files, args.kind, args.vocab_size, min_frequency=args.min_frequency,
                                    lowercase=args.lowercase, show_progress=sys.stderr.isatty(),
                                    fmt=TextFormat(args.field, args.column), languages=languages,
                                    alpha=0.5 if args.alpha is None else args.alpha)
    path = tok.save(out)
    print(f"{tok} -> {path}")
    return 0


def _stdin_lines() -> Iterator[str]:
    """stdin's lines as UTF-8 text, one at a time (so ``| head`` stops early); a line that is not
    UTF-8 is a :class:`PtmError` naming it (Python's text stdin would raise, or under a C locale
    pass undecodable bytes on as surrogates that the tokenizer rejects)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (embedding, tests)
        yield from (line.rstrip("\n") for line in sys.stdin)
        return
    for number, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise PtmError(
                f"stdin line {number} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the "
                f"line); ptm tokenizer encode reads UTF-8: convert the input first (e.g. iconv -f latin1 -t utf-8)"
            ) from None


def _argument_texts(texts: list[str]) -> list[str]:
    """The texts given as arguments; bytes that were not UTF-8 reach Python as surrogates."""
    for number, text in enumerate(texts, 1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise PtmError(f"text argument {number} is not UTF-8; pass UTF-8 text") from None
    return texts


def run_encode(args: argparse.Namespace) -> int:
    from ptmkit.tokenization import tokenizer  # the one heavy import, when the command runs

    tok = tokenizer.Tokenizer.load(args.tokenizer)
    texts = _argument_texts(args.text) if args.text else _stdin_lines()
    for text in texts:
        ids = tok.encode(text, add_special_tokens=args.special)
        print(json.dumps({"ids": ids, "tokens": [tok.id_to_token(i) for i in ids]}, ensure_ascii=False))
    return 0
