"""``ptm pretrain``: pre-train a Transformer from a preset, or static word vectors, on your corpus."""

from __future__ import annotations

import argparse
from pathlib import Path

from ptmkit.commands import RegistryHelpParser
from ptmkit.data.textfiles import TextFormat  # light: the standard library only
from ptmkit.errors import PtmError

HELP = "pre-train a Transformer (BERT, GPT-2, ...) or static word vectors (word2vec, GloVe, ...)"

DESCRIPTION = """\
Pre-train a Transformer from a preset on your own corpus.

PRESET is a bundled preset name (bert-tiny, bert-mini, bert-small, bert-base, gpt2-tiny,
gpt2-small, ...) or the path of a YAML file with the sections model, objective, tokenizer, train.
Its model.encoder is one of {names:encoder}; its objective.name one of {names:objective}.

DATA is either a corpus prepared by `ptm prepare` (a directory with tokens.bin, meta.json and
tokenizer.json, or a set of shards from `ptm prepare --shard-size`), several such corpora
prepared with one tokenizer (read as one; every example stays within its corpus), or one or more
text files (one sentence per line, a blank line between documents): then a tokenizer is trained
as the preset's `tokenizer` section says and the text is prepared into RUN_DIR/data.
model.vocab_size is taken from the tokenizer.  Text files may also be JSON Lines, CSV/TSV or
Parquet with the text in the field or column "text" (another with --field / --column),
compressed (.gz, .bz2, .xz, .zst) or not, as `ptm prepare` reads them (which also drops
duplicates).

--data-weights W1,W2,... (one per corpus of DATA) blends the corpora: every epoch has as many
examples as they have together, corpus i filling the share Wi / sum(W) of them exactly; each
corpus walks through its own examples in a fresh random order per pass and continues in the
next epoch where it stopped (a corpus whose share exceeds its size repeats examples).  Without
weights an epoch is every example of every corpus once.  Held-out examples (train.eval_fraction)
are taken from each corpus alike.  --data-weights alpha=A gives corpus i the share q_i ∝ p_i^A
of its natural share p_i (tokens): XLM's language sampling over one corpus per language (A = 0.5
in XLM, 0.3 in XLM-R; small languages are up-sampled).

Settings are changed with SECTION.KEY=VALUE overrides (an unknown key is an error that names the
nearest valid one).  Useful train keys: batch_size (global, per optimizer step), grad_accum,
seq_len, lr, warmup_steps, max_steps, schedule (linear | cosine | constant | slanted_triangular |
inverse_sqrt), weight_decay, clip_norm, eval_every, save_every, keep_checkpoints, log_every,
seed, precision (fp32 | bf16 on CUDA), device (auto | cpu | cuda).

RUN_DIR receives config.json (the resolved config), metrics.jsonl (one JSON object per log or
evaluation), loss.png and checkpoints/step-NNNNNNN/ (config.json, model.safetensors,
tokenizer.json, trainer_state.pt) with checkpoints/latest naming the newest.

RUN_DIR must be new, empty, or a run directory ptm made (marked by .ptmkit-output.json); any
other non-empty directory is refused, and so is an input (--data, --eval-data, a preset file)
that lies inside RUN_DIR.  --resume continues a killed or finished run exactly where its latest
checkpoint left it, with the config the run stored: `ptm pretrain --resume -o RUN --data DATA
[train.max_steps=N]` (PRESET and the first run's overrides need not be typed again; overrides on
resume may change train.max_steps, eval_every, eval_batches, save_every, keep_checkpoints,
log_every, num_threads, device, nan_guard, max_seconds and report_to, and any other is refused
by name).  It is an error when RUN_DIR has no checkpoint, when the data's tokenizer differs from
the run's, or when text data differs from the text the run was prepared from.
Schedules follow the budget: lowering train.max_steps below the preset's without setting
train.warmup_steps scales the warm-up to the same share of the run (bert-tiny's 1,000 of 100,000
become 2 of 200), and a plan whose warm-up outlasts it, or that reads the corpus more than 20
times, is named in a warning before training.
--overwrite starts the run over: once the inputs are read, ptm removes the files it wrote in
RUN_DIR (checkpoints, logs, config.json, prepared data) and never any other file.  A run that
fails before its first checkpoint removes the RUN_DIR it created.

--init-from RUN continues the pre-training of RUN (a run directory, its latest checkpoint, or a
checkpoint directory) on DATA: ULMFiT's second stage, the general-domain LM fine-tuned on the
target task's text.  The weights (encoder and objective heads), the tokenizer and the config
come from RUN, SECTION.KEY=VALUE overrides apply on top (train.max_steps, train.lr, ...), and the
optimizer and LR schedule start afresh.  PRESET must be the preset RUN was trained with (the same
encoder, objective and parameter shapes; otherwise an error says what differs).  Text DATA is
prepared with RUN's tokenizer (no new tokenizer is trained); a prepared corpus must have been
prepared with it.

Several processes (data parallel): torchrun --nproc_per_node N -m ptmkit.cli pretrain ...
(batch_size stays the global batch; gloo on CPU, NCCL on GPUs).

Static word vectors (first generation): PRESET may also be a static model ({names:static}),
  word2vec   Skip-gram / CBOW with negative sampling or hierarchical softmax (Mikolov et al. 2013)
  fasttext   Skip-gram / CBOW over character n-gram buckets (Bojanowski et al. 2017)
  glove      weighted least squares on log co-occurrences (Pennington et al. 2014)
  svd-ppmi   truncated SVD of the PPMI matrix (Levy, Goldberg & Dagan 2015)
  nnlm       neural probabilistic LM, vectors = its feature matrix C (Bengio et al. 2003)
  transe     knowledge-graph entity embeddings, h + r = t (Bordes et al. 2013)
  distmult   knowledge-graph entity embeddings, trilinear score (Yang et al. 2015)
or a static preset: {names:static_preset} (or a YAML
file with the sections `static: MODEL` and `config:`).  DATA is then text file(s), one sentence per
line, whitespace-separated words; overrides are the model's config keys without a section (dim=100
window=5 min_count=5 epochs=5 lowercase=true; word2vec, fasttext: model=skipgram|cbow workers=2
negative=5 sample=1e-3, word2vec: loss=ns|hs; glove: x_max=100 threads=2; `config.KEY=VALUE` works
too; an unknown key is an error that lists the valid ones).  RUN_DIR receives vectors.bin (word2vec binary, read by
`ptm vectors` and gensim), vocab.txt and config.json (the config and training statistics).  RUN_DIR
must be new, empty or hold static vectors from ptm; with --overwrite ptm's earlier vectors there are
replaced only once the new training succeeded (other files in RUN_DIR are kept).

Knowledge-graph embeddings (transe, distmult, their presets) read triple files instead of text:
DATA is TRAIN [VALID] TEST, head<TAB>relation<TAB>tail per line (WordNet's: `ptm data get
wordnet-kg`); the entity vectors go to vectors.bin, the relation vectors to relations.bin, and
results.json holds the filtered MRR and Hits@1/3/10 on VALID and TEST (docs/knowledge.md).

Vision-language models: a preset with a `vision` section (clip-tiny, clip-cnn-tiny, lit-minilm,
visualbert-tiny, vilbert-tiny, caption-lm-tiny, bow-tiny) reads image-text data: DATA is `emoji`
(`ptm data get emoji`) or a directory with captions.jsonl ({"image": "a.png", "caption": "..."}
rows; square PNG / JPEG images).  Beside model (the text Transformer), objective, tokenizer and
train it has the sections vision, augment, text (init: a run, an HF directory or minilm; frozen)
and data (styles, locale, max_len).  vision.encoder: {names:image_encoder}
objective.name: {names:vl_objective}
RUN_DIR also receives compute.json (FLOPs per step, images seen); evaluate the run with
`ptm evaluate RUN --suite vl` (docs/multimodal.md).
"""

EPILOG = """\
examples:
  ptm pretrain bert-tiny --data ptb.train.txt -o runs/tiny train.max_steps=2000
  ptm pretrain bert-tiny --data corpus_dir --eval-data valid.txt -o runs/tiny \\
      model.hidden_size=64 train.batch_size=32 train.lr=5e-4
  ptm pretrain gpt2-tiny --data corpus_dir -o runs/gpt train.schedule=cosine train.warmup_steps=100
  ptm pretrain my_preset.yaml --data corpus_dir -o runs/mine
  ptm pretrain clip-tiny --data emoji -o runs/clip train.max_steps=500
  ptm pretrain bert-tiny --data wiki_dir books_dir --data-weights 0.7,0.3 -o runs/blend
                                                                      70 % / 30 % of every epoch's examples
  ptm pretrain bert-tiny --data corpus_dir -o runs/tiny --resume      continue after a kill
  ptm pretrain bert-tiny --data corpus_dir -o runs/tiny --resume train.max_steps=5000   train longer
  ptm pretrain awd-lstm-tiny --data wiki.txt -o runs/lm                ULMFiT stage 1: general-domain LM
  ptm pretrain awd-lstm-tiny --init-from runs/lm --data task.txt -o runs/lm-task train.max_steps=500 train.lr=1e-3
                                                                      stage 2: the LM fine-tuned on the task's text
  ptm pretrain word2vec --data corpus.txt -o vec/w2v model=cbow loss=hs dim=100 workers=2
  ptm pretrain word2vec-sg-ns --data corpus.txt -o vec/sgns epochs=10
  ptm pretrain glove --data corpus.txt -o vec/glove window=10 epochs=25
  ptm pretrain fasttext --data corpus.txt -o vec/ft min_n=3 max_n=6 --overwrite
  ptm pretrain transe-wn18rr --data wn18rr/train.tsv wn18rr/valid.tsv wn18rr/test.tsv -o kge/transe
"""




def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pretrain",
        help=HELP,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("preset", metavar="PRESET", nargs="?", default=None,
                   help="preset name or YAML file, or a static model ({names:static}); not needed with --resume")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.max_steps=200")
    p.add_argument("--data", "-d", nargs="+", required=True, metavar="DATA", help="prepared corpus directory or text file(s)")
    p.add_argument("--data-weights", default=None, metavar="W1,W2,...",
                   help="one weight per prepared corpus of --data: each epoch draws their examples in these proportions; "
                        "alpha=A: shares ∝ (token share)^A, XLM's language sampling")
    p.add_argument("--field", default="text", metavar="NAME",
                   help="text files of --data / --eval-data: the field holding the text in JSON Lines and Parquet")
    p.add_argument("--column", default="text", metavar="NAME",
                   help="text files of --data / --eval-data: the column (header name) holding the text in CSV and TSV")
    p.add_argument("--eval-data", nargs="+", metavar="DATA", help="held-out corpus directory or text file(s) "
                   "(default: hold out train.eval_fraction of the training examples)")
    p.add_argument("--out", "-o", required=True, metavar="RUN_DIR", help="run directory (logs, checkpoints)")
    p.add_argument("--init-from", metavar="RUN", default=None,
                   help="continue pre-training RUN (a run or checkpoint directory) on DATA: its weights, tokenizer and "
                        "config (plus the overrides), a fresh optimizer and schedule (ULMFiT's target-task LM fine-tuning)")
    p.add_argument("--resume", action="store_true",
                   help="continue from RUN_DIR's latest checkpoint (an error if there is none)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over: remove what ptm wrote in RUN_DIR (checkpoints, logs, config, prepared data) once "
                        "the inputs are read; other files stay (static models: replace RUN_DIR's vectors)")
    p.__class__ = RegistryHelpParser
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows.pretrain import pretrain  # the one heavy import, when the command runs

    if args.resume and args.overwrite:
        raise PtmError("--resume and --overwrite exclude each other")
    overrides = list(args.overrides)
    preset = args.preset
    if preset is not None and "=" in preset and not Path(preset).exists():  # `--resume -o RUN train.max_steps=N`
        overrides.insert(0, preset)
        preset = None
    if preset is None and not args.resume:
        raise PtmError("name a PRESET (bert-tiny, gpt2-tiny, ... or a YAML file): see `ptm pretrain --help`")
    # `--data a.txt train.lr=1e-3`: argparse hands the override to --data; give it back.
    data = _split(args.data, overrides)
    eval_data = _split(args.eval_data, overrides) if args.eval_data else None
    if not data:
        raise PtmError("--data needs a prepared corpus directory or text file(s)")
    pretrain(preset, data, args.out, overrides=overrides, resume=args.resume, eval_data=eval_data, overwrite=args.overwrite,
             init_from=args.init_from, data_weights=args.data_weights, fmt=TextFormat(args.field, args.column))
    return 0


def _split(items: list[str], overrides: list[str]) -> str | list[str]:
    paths = []
    for item in items:
        if "=" in item and not Path(item).exists():
            overrides.append(item)
        else:
            paths.append(item)
    return paths[0] if len(paths) == 1 else paths
