"""``ptm export``: write a ptmkit run or checkpoint as an HF transformers model directory, or its
encoder as an ONNX graph (``--format onnx``)."""

from __future__ import annotations

import argparse

from ptmkit import outputs
from ptmkit.commands import HelpFromRegistry
from ptmkit.errors import PtmError, suggest

HELP = "export a run or checkpoint to an HF transformers directory (BERT, GPT-2, BART, T5, ...) or ONNX"

DESCRIPTION = """\
Export a pre-trained ptmkit model to an HF transformers directory (config.json,
model.safetensors and the tokenizer files) that `from_pretrained` loads, or its encoder
to an ONNX graph (--format onnx).

RUN_OR_CKPT is a run directory (its latest checkpoint is used) or a checkpoint directory.

formats (default: inferred from the model: the format of the family the objective prefers, else
the first that can express it): {names:hf_format}; among them
  bert      BertModel: the encoder and its pooler (post-LN, bidirectional models)
  bert-mlm  with the MLM head (BertForMaskedLM), and the NSP head when the model has one
            (BertForPreTraining); the default for models trained with the mlm objective
  gpt2      GPT2LMHeadModel (pre-LN causal models, the clm objective); the LM head is tied
  electra   ElectraForPreTraining: the discriminator and its replaced-token head; the default
            for models trained with the electra objective (the generator is not exported)
and each other family's model with the heads it can carry (HF families: {names:hf_family}).

  onnx      the encoder alone as an ONNX graph (model.onnx, tokenizer.json, onnx_export.json):
            inputs input_ids, attention_mask (and token_type_ids when the model has segments),
            output last_hidden_state [batch, sequence, hidden], both axes dynamic.  For BERT,
            RoBERTa, ALBERT, ELECTRA and the encoders of BART and T5; checked against PyTorch
            with ONNX Runtime before anything is written.  Needs pip install 'ptmkit[onnx]'.

DIR must not exist or be empty: nothing is overwritten.  It is written to a scratch
directory inside DIR and moved into place only when complete.
"""

EPILOG = """\
examples:
  ptm export runs/tiny -o hf/tiny                          BERT with its MLM (+NSP) heads
  ptm export runs/tiny/checkpoints/step-0002000 -o hf/enc --format bert
  ptm export runs/gpt -o hf/gpt                            GPT-2
  ptm export runs/tiny -o onnx/tiny --format onnx           the encoder for ONNX Runtime
then in Python: transformers.BertForMaskedLM.from_pretrained("hf/tiny"), or
onnxruntime.InferenceSession("onnx/tiny/model.onnx")
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("source", metavar="RUN_OR_CKPT", help="run directory or checkpoint directory")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory (new or empty)")
    p.add_argument("--format", "-f", default=None, metavar="FORMAT",
                   help="HF model format or onnx, one of those listed above (default: inferred from the model)")
    p.__class__ = HelpFromRegistry
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit import interop, pretrained  # the one heavy import (torch), when the command runs
    from ptmkit.interop import onnx_export

    known = (*interop.formats(), onnx_export.FORMAT)
    if args.format is not None and args.format not in known:
        raise PtmError(f"unknown --format {args.format!r}{suggest(args.format, known)}; formats: {', '.join(known)}")
    if args.format == onnx_export.FORMAT:
        info = onnx_export.export_onnx(args.source, args.out)
        check = info["check"]
        print(f"exported the {info['encoder']} encoder of {info['source']} as ONNX to {args.out} (inputs "
              f"{', '.join(info['inputs'])}; ONNX Runtime vs PyTorch: max |diff| {check['max_abs_diff']:.2e})")
        return 0

    outputs.check(args.out, "export", inputs=[args.source])  # before loading the model
    model = pretrained.load_pretrained(args.source)
    fmt = args.format or interop.infer_format(model)
    out = interop.export_hf(model, args.out, fmt)
    print(f"exported {model.path} as {fmt} to {out}")
    return 0
