"""``ptm finetune``: fine-tune a pre-trained model for sequence classification and evaluate it."""

from __future__ import annotations

import argparse

from ptmkit.commands import RegistryHelpParser
from ptmkit.commands.task_args import column_pair, columns_of

HELP = "fine-tune a pre-trained model on a task (classification, pairs, tagging, span QA, multiple choice, seq2seq)"

DESCRIPTION = """\
Fine-tune a pre-trained encoder (Transformer, LSTM, ...) for sentence (or sentence-pair)
classification or token tagging, select the epoch with the best dev score, and report its test
score.  Runs go
through the same trainer as pre-training: a checkpoint every epoch, metrics.jsonl, loss.png,
and --resume continues an interrupted run exactly where it stopped.

RUN_OR_CKPT is a pre-training run directory (its latest checkpoint), a checkpoint directory, or a
word-vectors file (word2vec binary or text, GloVe, fastText .vec: a static-vectors encoder).
The task is either built in (fetched on first use: {names:task}; for example --task mr,
movie-review polarity; for tagging, crf=true adds a CRF and select=f1 picks epochs by chunk F1),
of one of the task types {names:task_type}, or given as
three files --train/--dev/--test in JSONL, CSV or TSV (by extension, else sniffed), with the
columns named by --text-column, --pair-column (sentence pairs) and --label-column.  The label
vocabulary comes from the training file.

--random-init trains the same architecture and tokenizer from a fresh initialisation (the
baseline without pre-training); --init both runs the two side by side.  Every (init, seed) run
writes OUT/{init}-seed{S}/results.json and predictions.jsonl; OUT/summary.json aggregates them;
with --init both, OUT/inits.png draws the test score with and without pre-training (mean, sd and
every seed).
OUT must be new, empty, or (with --overwrite) an earlier fine-tuning output of ptm's; the runs
are written to a scratch directory inside OUT and moved into place only when all succeeded, so a
failed or interrupted fine-tuning leaves nothing behind.

Fine-tuning settings are KEY=VALUE overrides: epochs, lr, batch_size, eval_batch_size, warmup
(fraction of steps), weight_decay, max_seq_len, clip_norm, dropout, pooling (auto | cls | last |
mean | concat), select (accuracy | macro_f1 | f1 | loss), and the fine-tuning strategies
layer_decay (discriminative LRs; ULMFiT: 0.385 = 1/2.6), gradual_unfreeze (true: one more layer
per epoch, top down), freeze_embeddings (true: keep the pre-trained embeddings fixed) and
schedule (linear | slanted_triangular).  --recipe ulmfit sets them all as ULMFiT does (Howard &
Ruder 2018: concat pooling, a 50-unit hidden layer, LR / 2.6 per layer down, slanted triangular
LRs, gradual unfreezing from the top, Adam betas 0.7 / 0.99, LR 0.01).

Transfer mode: mode=finetune (default: every weight trains) or mode=features (the encoder stays
fixed; a scalar mix of all its layers and a small task network learn); mix (auto | last |
scalar | layer:K, one hidden state: 0 = embeddings, negative from the top), head (linear | mlp |
bilstm), head_hidden.  Training loop: precision, device, num_threads.

Parameter-efficient fine-tuning, the encoder's weights fixed: adapter_size=M (Houlsby adapters of
M units after every attention and feed-forward sub-layer); lora_rank=R (LoRA: a rank-R update
(lora_alpha / R) B A on the projections lora_targets names, default q,v, the attention's query
and value; lora_alpha defaults to R; lora_dropout; lora_targets=q,k,v,o,fc1,fc2 or globs over
full names such as layers.1[01].attn.*); bitfit=true (BitFit: only the encoder's bias terms).
LoRA and BitFit save only their weights and the head, with the base checkpoint's path and a
digest of its weights: --eval-only and ptm predict load the model on that base and refuse one
whose weights changed.  lora_merge=true saves the model with the updates folded into the
weights instead (full size, loads without the base, predicts at the base model's speed).

GPT's input transformations for a model pre-trained left to right (clm): gpt_transform=true reads
[CLS] a [SEP] b [MASK] (start, delimiter, extract; per answer for multiple choice) with the head
on the extract token; symmetric_pairs=true adds the representations of both orders of a pair
(similarity tasks).

Multi-task fine-tuning (MT-DNN, Liu et al. 2019): --tasks mr,brown-pos trains one shared encoder
with a head per task; each step is one task's batch, the tasks' batches of an epoch shuffled
together (task_schedule=proportional: each task in proportion to its size) or alternating
(task_schedule=round_robin).  Dev and test scores are reported per task ("mr/accuracy") and the
epoch is kept by their mean ("mean").  A per-task stage afterwards, as MT-DNN does: fine-tune on
one task with --after OUT/pretrained-seed0.
"""

EPILOG = """\
examples:
  ptm finetune runs/tiny --task mr -o out/mr
  ptm finetune runs/tiny --task mr --init both --seeds 1 2 3 --train-size 500 -o out/mr500 lr=1e-4 epochs=10
  ptm finetune runs/tiny --task mr -o out/ulmfit layer_decay=0.385 gradual_unfreeze=true
  ptm finetune runs/lm-task --task mr -o out/ulmfit-all --recipe ulmfit epochs=8
  ptm finetune runs/elmo --task mr -o out/elmo-features mode=features head=bilstm
  ptm finetune runs/tiny --task mr -o out/lora lora_rank=8 lr=5e-4
  ptm finetune runs/tiny --task mr -o out/bitfit bitfit=true lr=1e-3
  ptm finetune runs/tiny --task mr --seeds 1 2 3 -o out/mr --resume     continue an interrupted grid
  ptm finetune runs/tiny --tasks mr,brown-pos -o out/mtdnn task_schedule=round_robin
  ptm finetune runs/tiny --task mr --after out/mtdnn/pretrained-seed0 -o out/mtdnn-mr
  ptm finetune out/mr/pretrained-seed0 --eval-only -o out/mr-scored      score a fine-tuned model again
  ptm finetune runs/tiny --train t.csv --dev d.csv --test e.csv --text-column sentence --label-column y -o out/mine
  ptm finetune runs/tiny --train t.jsonl --dev d.jsonl --test e.jsonl --text-column premise \\
      --pair-column hypothesis -o out/nli
"""




def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "finetune", help=HELP, description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("model", metavar="RUN_OR_CKPT", help="pre-training run directory, checkpoint directory, or a word2vec / "
                                                       "GloVe / fastText vectors file (static word features)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="fine-tuning settings, e.g. lr=5e-5 epochs=5")
    p.add_argument("--task", help="built-in task: {names:task}")
    p.add_argument("--tasks", metavar="T1,T2,...", default=None,
                   help="multi-task fine-tuning (MT-DNN) on several built-in tasks of any types, e.g. mr,brown-pos: "
                        "a shared encoder, one head per task, one task's batch per step (task_schedule=proportional "
                        "| round_robin), the epoch kept by the mean dev score over the tasks")
    p.add_argument("--train", metavar="FILE", help="training file (JSONL/CSV/TSV)")
    p.add_argument("--dev", metavar="FILE", help="dev file, used to select the epoch")
    p.add_argument("--test", metavar="FILE", help="test file, scored with the selected model")
    p.add_argument("--type", default=None, metavar="TYPE",
                   help="task type of the --train/--dev/--test files ({names:task_type}); default: the "
                        "one their columns show (tokens+tags: tagging; choices: multiple_choice; "
                        "question+context+answers: span_qa; text+labels: multi_label), else classification")
    p.add_argument("--text-column", default=None, help="classification / regression: column of the (first) text "
                                                       "(default: text)")
    p.add_argument("--pair-column", default=None, help="column of the second text for sentence pairs")
    p.add_argument("--label-column", default=None, help="column of the label or target (default: label)")
    p.add_argument("--column", dest="columns", action="append", type=column_pair, metavar="NAME=COLUMN",
                   help="any column of the task type's files, e.g. --column question=q --column tokens=words")
    p.add_argument("--after", metavar="FINETUNE_RUN", default=None,
                   help="two-stage fine-tuning: start from the encoder selected by an earlier fine-tuning on an "
                        "intermediate task (its run directory, e.g. OUT/pretrained-seed0), not from RUN_OR_CKPT's")
    p.add_argument("--tagging", dest="type", action="store_const", const="tagging",
                   help="same as --type tagging: JSONL with 'tokens' and 'tags' lists, or CoNLL style "
                        "('word tag' per line, a blank line between sentences)")
    init = p.add_mutually_exclusive_group()
    init.add_argument("--init", choices=("pretrained", "random", "both"), default="pretrained",
                      help="start from the pre-trained weights, a fresh initialisation, or run both")
    init.add_argument("--random-init", dest="init", action="store_const", const="random",
                      help="same as --init random (the baseline without pre-training)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="S", help="one run per seed (default: 0)")
    p.add_argument("--lrs", nargs="+", type=float, default=None, metavar="LR",
                   help="grid of learning rates: each run keeps the one with the best dev score")
    p.add_argument("--train-size", type=int, default=None, metavar="N",
                   help="use a fixed random subset of N training examples")
    p.add_argument("--out", "-o", required=True, metavar="OUT",
                   help="output directory: new, empty, or (with --overwrite) an earlier fine-tuning output")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the fine-tuning results ptm wrote in OUT (only once the new runs succeeded; "
                        "other files in OUT are kept)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted fine-tuning in OUT: finished runs are read back, an interrupted "
                        "one continues from its last epoch checkpoint, the rest start")
    p.add_argument("--recipe", choices=("ulmfit",), default=None,
                   help="start from a recipe's settings (ulmfit: pooling=concat head=mlp head_hidden=50 "
                        "layer_decay=0.385 gradual_unfreeze=true schedule=slanted_triangular warmup=0.1 "
                        "betas=[0.7,0.99] lr=0.01); KEY=VALUE overrides apply on top")
    p.add_argument("--eval-only", action="store_true",
                   help="score a fine-tuned (or distilled, pruned, quantized) model without training: RUN_OR_CKPT is "
                        "its run directory (e.g. OUT/pretrained-seed0, holding task_model.json); the task is the one "
                        "it was trained on unless --task or --train/--dev/--test name another with the same labels; "
                        "OUT gets results.json (dev and test) and predictions.jsonl")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.__class__ = RegistryHelpParser
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import finetune as workflow  # the one heavy import, when the command runs

    cfg = workflow.parse_overrides(list(args.overrides), args.recipe)
    columns = columns_of(args)
    files = (args.train, args.dev, args.test)

    def load_data():
        return workflow.task_data(args.task, getattr(args, "tasks", None), files, args.type, columns)

    if args.eval_only:
        given = args.task or getattr(args, "tasks", None) or any(files)
        workflow.eval_only(args.model, load_data if given else None, args.out, inputs=[args.model, *files],
                           overwrite=args.overwrite)
        return 0
    inits = ["pretrained", "random"] if args.init == "both" else [args.init]
    workflow.finetune_runs(args.model, load_data, args.out, cfg, inits, list(args.seeds), lrs=args.lrs,
                           train_size=args.train_size, after=args.after, inputs=[args.model, *files, args.after],
                           overwrite=args.overwrite, resume=args.resume, progress=not args.quiet)
    return 0
