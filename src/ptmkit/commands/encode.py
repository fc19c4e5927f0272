"""``ptm encode``: sentence vectors from a pre-trained model (or SIF over static word vectors)."""

from __future__ import annotations

import argparse

HELP = "sentence vectors of each input line (mean / cls / last pooling, or SIF over word vectors) as .npy"

DESCRIPTION = """\
Write one sentence vector per input line as a float32 .npy matrix [lines, dim].

MODEL is a pre-training run (its latest checkpoint), a checkpoint directory, an HF model imported
by ptm import, a fine-tuned task model (its encoder), or a word-vectors file (word2vec binary or
text, GloVe; or the static run directory holding vectors.bin).

A contextual model reads each line with its family's special tokens ([CLS] text [SEP]; a
left-to-right model: text [SEP]) and pools its top layer's states: --pooling mean (over the real
tokens, special tokens included; the default), cls (the first token's state; not for
left-to-right models) or last (the last real token's state).  An encoder-decoder (BART, T5) is
pooled over its encoder.  Lines longer than --max-seq-len tokens (default: the model's positions)
are cut.

Static word vectors give SIF embeddings (Arora et al. 2017): each line's in-vocabulary words
(split at white space) averaged with weights a / (a + p(w)), a = 1e-3, then the projection on
the first principal component of all lines removed.  p(w) comes from the counts in vocab.txt
beside the vectors (runs ptm trained have it), else from Zipf's law over the file's word order.
A line without a known word gives a zero row.

--normalize divides every row by its L2 norm (unit rows: dot products are cosines).  Lines are
read, encoded and written --chunk-size at a time, --batch-size per forward pass, batched by
length.  --input '-' reads stdin.  OUT must be a new file, or an existing one with --force; it is
written to a temporary file that replaces OUT only when every line is done.
"""

EPILOG = """\
examples:
  ptm encode runs/bert --input sentences.txt -o vectors.npy
  ptm encode ckpt/ --input sentences.txt -o vectors.npy --pooling cls --normalize
  ptm encode runs/gpt --input sentences.txt -o vectors.npy --pooling last
  ptm encode runs/w2v/vectors.bin --input sentences.txt -o sif.npy      SIF baseline
  cat sentences.txt | ptm encode runs/bert --input - -o vectors.npy
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "encode", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("model", metavar="MODEL", help="a run, checkpoint, imported HF model, fine-tuned model or vectors file")
    p.add_argument("--input", "-i", required=True, metavar="FILE", help="text, one sentence per line; '-': stdin")
    p.add_argument("--out", "-o", required=True, metavar="OUT", help="the .npy file to write (float32, one row a line)")
    p.add_argument("--pooling", choices=("mean", "cls", "last"), default="mean",
                   help="how a contextual model's states become one vector (default: mean)")
    p.add_argument("--normalize", action="store_true", help="unit L2 rows")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="lines per forward pass (default: 32)")
    p.add_argument("--chunk-size", type=int, default=1024, metavar="N",
                   help="lines read, encoded and written at a time (default: 1024)")
    p.add_argument("--max-seq-len", type=int, default=None, metavar="N",
                   help="tokens per line at most, special tokens included (default: the model's positions)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists (never an input)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import encode as workflow  # the one heavy import, when the command runs

    rows, dim = workflow.encode_file(args.model, args.input, args.out, pooling=args.pooling, normalize=args.normalize,
                                     batch_size=args.batch_size, chunk_size=args.chunk_size, max_len=args.max_seq_len,
                                     force=args.force, device=workflow.resolve_device(args.device))
    print(f"{rows} x {dim} vectors -> {args.out}")
    return 0
