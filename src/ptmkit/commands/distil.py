"""``ptm distil``: knowledge distillation of a fine-tuned teacher into a smaller student."""

from __future__ import annotations

import argparse

from ptmkit.commands import RegistryHelpParser
from ptmkit.commands.task_args import add_task_arguments, task_files, task_loader
from ptmkit.compress.small_data import AUTO_AUGMENT, SMALL_TRANSFER_SET, parse_augment, parse_mode
from ptmkit.errors import PtmError

HELP = "distil a fine-tuned model into a smaller student (Hinton KD, TinyBERT layers, DistilBERT init, BiLSTM)"

DESCRIPTION = """\
Train a small student to predict what a fine-tuned teacher predicts (knowledge distillation).

TEACHER_RUN is a fine-tuned model: a run directory of `ptm finetune` (e.g. OUT/pretrained-seed0),
or a model already distilled, pruned or cut.  The task is the one it was fine-tuned on (built-in
tasks are read by name; the user's own task needs --train/--dev/--test again).  Classification and
tagging tasks can be distilled.

Loss (Hinton et al. 2015; TinyBERT, Jiao et al. 2020):
  alpha * CE(student, gold) + (1 - alpha) * T^2 * CE(teacher_T, student_T)
  + --hidden * MSE(student states W_h, teacher states) + --attention * MSE(attention maps)
  + --embedding * MSE(student embeddings W_e, teacher embeddings)
over the layers --layer-map pairs (uniform: student layer m learns from teacher layer m*N/M; last;
or explicit 1:2,2:4,3:6).  W_h / W_e are learned where the widths differ (--projection auto).
alpha=1 trains the same student on the gold labels alone (the baseline distillation must beat).

Students share the teacher's tokenizer:
  --student layers       the teacher's encoder cut to --layers (default: every other layer, as
                         DistilBERT), its task head copied from the teacher
  --student transformer  a smaller Transformer, freshly initialised: student.num_layers=3
                         student.hidden_size=192 student.num_heads=4 student.intermediate_size=768
                         (the rest: the teacher's)
  --student bilstm       Tang et al. 2019: a one-layer BiLSTM as wide as the teacher, over the
                         teacher's token embeddings (student.hidden_size=300: narrower, its
                         embeddings then start at random)
  --student pretrained   an encoder of --student-from RUN (e.g. a task-agnostic distilled model)

--theseus replaces instead of distilling (BERT-of-Theseus): the teacher's layers are cut into as
many consecutive modules as the student has layers; in each step every module runs its student
layer with probability p, else its (frozen) teacher layers; p rises linearly from --replace-rate
to 1 at --replace-full-at of training, then the student trains alone.

--general distils a pre-trained TEACHER (a run, checkpoint or imported HF model) on a corpus
instead (DistilBERT's triple loss: --soft 5 --mlm 2 --cosine 1; TinyBERT's general distillation:
--mlm 0 --cosine 0 --hidden 1 --attention 1): the student, made of --layers of the teacher, is an
ordinary pre-training run in OUT to fine-tune with `ptm finetune`.

--unlabelled FILE adds text of the task's domain (one example per line) to the training set,
labelled by the teacher; it counts in the soft loss only.  --augment N adds up to N synthetic
sentences per training sentence the same way (Tang et al. 2019): each word masked with
probability 0.1, else replaced by another word of its part of speech with probability 0.1 (tags
from the built-in brown-pos task when it is in the local data cache; otherwise this rule is
skipped), then, with probability 0.25, only a random n-gram (n = 1..5) kept; repeats and copies
of training sentences are dropped.  Single-sentence classification tasks only.  Without
intermediate losses the teacher's logits of the training examples are computed once and reused
every epoch.

Small transfer sets (fewer than 2,000 training examples plus --unlabelled lines): by default
(--augment auto) every kind of student gets 10 synthetic sentences per training sentence, and
(--labels-only auto) each student a labels-only twin in OUT/labels-only-seed{S}, the same student
trained on the gold labels alone (alpha 1); the result says whether distillation beat it by more
than half a point and the seeds' spread.  --augment off / on / N and --labels-only off / on choose.

Each seed's student is an ordinary fine-tuned model in OUT/student-seed{S} (results.json,
task_model.json, best.safetensors): `ptm finetune OUT/student-seed0 --eval-only`, `ptm prune` and
`ptm quantize` read it.  OUT/summary.json gives the teacher's and the students' scores, the
non-embedding parameter ratio and the retention (student / teacher); OUT/distil.png draws the
teacher's dev and test score beside each student's; OUT/README.md is the distillation's run card
and each student's README.md names it a distilled student (ptm info, ptm runs OUT).  --resume continues an
interrupted run exactly.  The students train with the teacher's fine-tuning settings; KEY=VALUE
overrides change them as for `ptm finetune` (epochs, lr, batch_size, max_seq_len, ...).
"""

EPILOG = """\
examples:
  ptm distil out/mr/pretrained-seed0 epochs=3 lr=1e-4 -o out/mr-distil --seeds 1 2 3
  ptm distil out/mr/pretrained-seed0 -o out/mr-tinybert --hidden 1 --attention 1 --layers 1,3,5
  ptm distil out/mr/pretrained-seed0 -o out/mr-labels --alpha 1                    the labels-only baseline
  ptm distil out/mr/pretrained-seed0 -o out/mr-bilstm --student bilstm lr=1e-3 epochs=5
  ptm distil out/mr/pretrained-seed0 -o out/mr-bilstm-aug --student bilstm --augment 20 lr=1e-3 epochs=5
  ptm distil runs/minilm --general --data text.txt -o runs/minilm-3 --hidden 1 --attention 1 train.max_steps=2000
  ptm distil out/mr/pretrained-seed0 -o out/mr-theseus --theseus --layers 1,3,5            6 -> 3 layers
  ptm distil out/mr/pretrained-seed0 -o out/mr-small --student transformer --student-config num_layers=2 \\
      hidden_size=192 num_heads=4 intermediate_size=768 --hidden 1 --unlabelled more-reviews.txt
"""


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer numbers such as 1,3,5, got {text!r}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("distil", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("teacher", metavar="TEACHER_RUN", help="a fine-tuned model's run directory (task_model.json)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="fine-tuning settings (e.g. epochs=3 lr=1e-4) and, prefixed student., the encoder settings of "
                        "a transformer or bilstm student (student.num_layers=3 student.hidden_size=192)")
    p.add_argument("--out", "-o", required=True, metavar="OUT", help="output directory (new, empty, or with "
                                                                       "--overwrite / --resume an earlier one)")
    s = p.add_argument_group("student")
    s.add_argument("--student", choices=("layers", "transformer", "bilstm", "pretrained"), default="layers")
    s.add_argument("--layers", type=_ints, default=None, metavar="I,J,...",
                   help="teacher layers a 'layers' student keeps (0-based; default every other, the top one kept)")
    s.add_argument("--student-from", metavar="RUN", default=None, help="the encoder of a 'pretrained' student")
    g = p.add_argument_group("task-agnostic distillation (DistilBERT; TinyBERT's general distillation)")
    g.add_argument("--general", action="store_true",
                   help="distil a pre-trained TEACHER (not a fine-tuned one) on the text of --data into a smaller "
                        "pre-trained model: an ordinary pre-training run in OUT (KEY=VALUE: train.* / objective.* "
                        "overrides), to fine-tune afterwards")
    g.add_argument("--data", nargs="+", metavar="TEXT", default=None,
                   help="--general: text files (one sentence per line) or a corpus prepared with the teacher's tokenizer")
    g.add_argument("--soft", type=float, default=0.0,
                   help="--general: weight of the teacher's soft MLM targets (DistilBERT 5; 0 for a teacher without a "
                        "pre-trained MLM head, such as all-MiniLM-L6-v2)")
    g.add_argument("--mlm", type=float, default=1.0, help="--general: weight of the student's own MLM loss (DistilBERT 2)")
    g.add_argument("--cosine", type=float, default=1.0, help="--general: weight of the hidden-state cosine loss (DistilBERT 1)")
    r = p.add_argument_group("module replacing (BERT-of-Theseus, Xu et al. 2020)")
    r.add_argument("--theseus", action="store_true",
                   help="train by progressive module replacing instead of the distillation losses: each group of "
                        "teacher layers is replaced by one student layer with a probability rising linearly")
    r.add_argument("--replace-rate", type=float, default=0.3, help="replacement probability at the start (default 0.3)")
    r.add_argument("--replace-full-at", type=float, default=0.6,
                   help="fraction of training at which every module is replaced; the rest trains the student alone "
                        "(default 0.6)")
    k = p.add_argument_group("loss")
    k.add_argument("--alpha", type=float, default=0.5, help="weight of the gold-label loss (default 0.5; 1: labels only)")
    k.add_argument("--temperature", "-T", type=float, default=2.0, help="softmax temperature T (default 2)")
    k.add_argument("--hidden", type=float, default=0.0, help="weight of TinyBERT's hidden-state MSE (default 0)")
    k.add_argument("--attention", type=float, default=0.0, help="weight of the attention-map MSE (default 0)")
    k.add_argument("--embedding", type=float, default=0.0, help="weight of the embedding-layer MSE (default 0)")
    k.add_argument("--layer-map", default="uniform", help="uniform | last | 1:2,2:4,3:6 (student:teacher)")
    k.add_argument("--projection", choices=("auto", "off"), default="auto",
                   help="learned W_h / W_e where the widths differ (auto), or none (widths must match)")
    d = p.add_argument_group("data")
    add_task_arguments(d)
    d.add_argument("--unlabelled", metavar="FILE", default=None,
                   help="text of the task's domain, one example per line, labelled by the teacher")
    d.add_argument("--unlabelled-limit", type=int, default=None, metavar="N", help="read the first N lines only")
    d.add_argument("--augment", type=parse_augment, default="auto", metavar="auto|on|off|N",
                   help="up to N synthetic sentences per training sentence (Tang et al. 2019: masking, POS-guided "
                        f"replacement, n-gram sampling), labelled by the teacher; on: {AUTO_AUGMENT}; default auto: on "
                        f"when the transfer set has fewer than {SMALL_TRANSFER_SET:,} examples, else off")
    d.add_argument("--augment-seed", type=int, default=0, metavar="S",
                   help="seed of the augmentation's draws (default 0; the same seed gives the same sentences)")
    d.add_argument("--labels-only", type=lambda t: parse_mode(t, "--labels-only"), default="auto",
                   metavar="auto|on|off",
                   help="also train each student on the gold labels alone (OUT/labels-only-seed{S}) and say whether "
                        "distillation beat it; default auto: on for a small transfer set")
    d.add_argument("--no-cache", dest="cache", action="store_false",
                   help="run the teacher on every batch instead of reusing its logits")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="S", help="one student per seed (default: 0)")
    p.add_argument("--overwrite", action="store_true", help="replace ptm's earlier output in OUT")
    p.add_argument("--resume", action="store_true", help="continue an interrupted distillation in OUT")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.__class__ = RegistryHelpParser
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import distil as workflow  # the one heavy import, when the command runs

    config, overrides = [], []
    for item in args.overrides:
        key, eq, value = item.partition("=")
        if key.strip().startswith("student."):
            if not eq:
                raise PtmError(f"student settings take KEY=VALUE, got {item!r}")
            config.append((key.strip().removeprefix("student."), workflow.parse_value(value)))
        else:
            overrides.append(item)
    if config and args.student not in ("transformer", "bilstm"):
        raise PtmError(f"student.{config[0][0]}: encoder settings apply to --student transformer or bilstm; a "
                       f"{args.student!r} student takes its shape from {'the teacher' if args.student == 'layers' else '--student-from'}")
    if args.student == "pretrained" and not args.student_from:
        raise PtmError("--student pretrained needs --student-from RUN (the encoder to start from)")
    student = workflow.StudentSpec(args.student, args.layers, tuple(config), args.student_from)
    settings = workflow.DistilSettings(args.alpha, args.temperature, args.hidden, args.attention, args.embedding,
                              args.layer_map, args.projection)
    if args.general:
        if not args.data:
            raise PtmError("--general distils on a corpus: give --data TEXT (or a corpus prepared with the teacher's tokenizer)")
        if args.labels_only != "auto":
            raise PtmError("--labels-only trains twins of a task's students; --general distils a pre-trained model on "
                           "a corpus: drop --labels-only")
        if args.augment != "auto":
            raise PtmError("--augment makes synthetic sentences of a task's training split; --general distils on a "
                           "corpus: drop --augment")
        weights = {"soft": args.soft, "mlm": args.mlm, "cosine": args.cosine, "hidden": args.hidden,
                   "attention": args.attention, "temperature": args.temperature, "layer_map": args.layer_map}
        workflow.distil_general(args.teacher, args.data, args.out, args.layers, weights, list(args.overrides),
                       resume=args.resume, overwrite=args.overwrite)
        return 0
    files, load = task_files(args), task_loader(args, workflow.task_data)
    workflow.distil(args.teacher, args.out, student, settings, overrides, list(args.seeds), load, args.unlabelled,
                    args.unlabelled_limit, args.cache, args.overwrite, args.resume, not args.quiet,
                    inputs=[*files, args.student_from],
                    replacing=(args.replace_rate, args.replace_full_at) if args.theseus else None,
                    augment=args.augment, augment_seed=args.augment_seed, labels_only=args.labels_only)
    return 0
