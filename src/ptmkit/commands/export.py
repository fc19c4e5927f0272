"""``ptm export``: write a ptmkit run or checkpoint as an HF transformers model directory, or its
encoder as an ONNX graph (``--format onnx``); a fine-tuned or compressed task model as the HF task
class of its head."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ptmkit import outputs
from ptmkit.commands import HelpFromRegistry
from ptmkit.errors import PtmError, suggest

HELP = ("export a run, checkpoint or fine-tuned model to an HF transformers directory (BERT, GPT-2, BART, T5, "
        "...) or ONNX")

DESCRIPTION = """\
Export a pre-trained ptmkit model to an HF transformers directory (config.json,
model.safetensors and the tokenizer files) that `from_pretrained` loads, or its encoder
to an ONNX graph (--format onnx).

SOURCE is a run directory (its latest checkpoint is used), a checkpoint directory, or a
fine-tuned task model: a directory with task_model.json, as every fine-tuning run
(OUT/pretrained-seed1) and every compressed model (ptm distil, ptm prune --method layers
or magnitude, LayerDrop, BERT-of-Theseus) has.

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

fine-tuned task models: written as the HF task class of their head, with the tokenizer
files and the labels in config.json (id2label and label2id, hence num_labels; problem_type);
AutoModelFor...from_pretrained loads the directory and gives ptmkit's logits:
  classification  pooling=cls over the encoder's pooler, head=linear
                  -> ...ForSequenceClassification (single_label_classification)
  regression      the same, one output -> ...ForSequenceClassification, num_labels=1,
                  problem_type regression; its output is the prediction in the data's units
  tagging         head=linear, crf=false -> ...ForTokenClassification.  HF gives logits
                  for every piece; ptmkit tags a word by its FIRST piece, so read the
                  logits at each word's first piece (tokenizer(words,
                  is_split_into_words=True).word_ids(): the first position of each word)
  span_qa         -> ...ForQuestionAnswering: start/end logits for every token; ptmkit
                  scores only the context's tokens and [CLS] (mask the question's out)
The families: bert, roberta, albert, electra (tagging and span QA) and gpt2 (tagging).
--format picks one of them by any of its formats; by default the family of the
pre-training objective when it can hold the model, else the first that claims the encoder
(as for a pre-trained export) and has the class.  Refused, with the reason: quantized
models (ptm quantize: export the float model and quantize in your runtime), pruned
attention heads, adapters, mix other than last, head=mlp or bilstm, pooling mean, last or
concat, a CRF, encoders that are not Transformers (BiLSTM students), multiple choice,
multi-task and seq2seq models.

DIR must not exist or be empty: nothing is overwritten.  It is written to a scratch
directory inside DIR and moved into place only when complete.
"""

EPILOG = """\
examples:
  ptm export runs/tiny -o hf/tiny                          BERT with its MLM (+NSP) heads
  ptm export runs/tiny/checkpoints/step-0002000 -o hf/enc --format bert
  ptm export runs/gpt -o hf/gpt                            GPT-2
  ptm export runs/tiny -o onnx/tiny --format onnx           the encoder for ONNX Runtime
  ptm export ft/mr/pretrained-seed1 -o hf/mr                BertForSequenceClassification
then in Python: transformers.BertForMaskedLM.from_pretrained("hf/tiny"),
onnxruntime.InferenceSession("onnx/tiny/model.onnx"), or
transformers.AutoModelForSequenceClassification.from_pretrained("hf/mr")
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("source", metavar="SOURCE", help="run directory, checkpoint directory or fine-tuned task model")
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
    task_model = interop.is_task_model(args.source)
    if args.format == onnx_export.FORMAT:
        if task_model:
            raise PtmError(f"{args.source} is a fine-tuned task model and --format onnx exports a pre-trained encoder: "
                           f"export it to HF (no --format) and use HF's ONNX tools, or export the "
                           f"checkpoint it was fine-tuned from")
        info = onnx_export.export_onnx(args.source, args.out)
        check = info["check"]
        # a line per path: two paths on one line run past what a terminal or a log shows
        print(f"exported the {info['encoder']} encoder of {info['source']} as ONNX\n  to {args.out}\n"
              f"  inputs {', '.join(info['inputs'])}; ONNX Runtime vs PyTorch: max |diff| {check['max_abs_diff']:.2e}")
        return 0

    outputs.check(args.out, "export", inputs=[args.source])  # before loading the model
    if task_model:
        out = interop.export_task_hf(args.source, args.out, args.format)
        written = json.loads((Path(out) / "config.json").read_text(encoding="utf-8"))
        print(f"exported the fine-tuned model {args.source} as {', '.join(written.get('architectures') or ['?'])} "
              f"({len(written.get('id2label') or {})} outputs)\n  to {out}")
        return 0
    model = pretrained.load_pretrained(args.source)
    fmt = args.format or interop.infer_format(model)
    out = interop.export_hf(model, args.out, fmt)
    print(f"exported {model.path} as {fmt}\n  to {out}")
    return 0
