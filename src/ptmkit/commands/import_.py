"""``ptm import``: turn an HF transformers BERT or GPT-2 directory into a ptmkit checkpoint."""

from __future__ import annotations

import argparse

from ptmkit.commands import HelpFromRegistry

HELP = "import an HF transformers directory (BERT, GPT-2, BART, T5, ...) as a ptmkit checkpoint"

DESCRIPTION = """\
Convert an HF transformers model directory (config.json + weights + tokenizer files) into a
ptmkit checkpoint directory (config.json, model.safetensors, tokenizer.json) that
`ptm finetune CKPT_DIR` and the Python API load.

Supported model types (config.json's model_type): {names:hf_model_type}; one HF family each
({names:hf_family}).  For example BERT (model_type "bert": BertModel, BertForMaskedLM,
BertForPreTraining; the MLM and NSP heads come along when present, missing heads are freshly
initialised) and GPT-2 (model_type "gpt2"; the LM head is tied).  The tokenizer is read from tokenizer.json or vocab.txt and must
hold the special tokens [PAD] [UNK] [CLS] [SEP] [MASK].  The weights are read locally: set
HF_HUB_OFFLINE=1 to be sure nothing is downloaded.

CKPT_DIR must not exist or be empty: nothing is overwritten.  It is written to a scratch
directory inside CKPT_DIR and moved into place only when complete.
"""

EPILOG = """\
examples:
  ptm data get minilm
  ptm import ~/.cache/ptmkit/data/minilm -o ckpt/minilm
  ptm finetune ckpt/minilm --task mr
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("source", metavar="HF_DIR", help="HF transformers model directory")
    p.add_argument("--out", "-o", required=True, metavar="CKPT_DIR", help="output checkpoint directory (new or empty)")
    p.__class__ = HelpFromRegistry
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.interop import hf_model_type, import_hf

    kind = hf_model_type(args.source)
    out = import_hf(args.source, args.out)
    print(f"imported {kind} model {args.source}\n  into {out}")  # a line per path: both may be long
    return 0
