"""``ptm generate``: continue a prompt with a causal LM (GPT) or rewrite it with an encoder–decoder (BART)."""

from __future__ import annotations

import argparse

HELP = "generate text with a pre-trained causal LM (clm) or encoder–decoder (bart, t5; unilm)"

DESCRIPTION = """\
Generate text with a pre-trained model.

RUN_OR_CKPT is a run directory (its latest checkpoint is used) or a checkpoint directory of a
model that can generate: one pre-trained with the clm objective (GPT, GPT-2), which continues
PROMPT, or with the bart objective, which rewrites PROMPT (its denoising task: a text with
[MASK]s comes back filled in), or with t5 (span corruption: PROMPT's sentinels come back with
the spans they stand for), or with unilm (after seq2seq fine-tuning: it writes PROMPT's
target).  Generation stops at the end-of-sentence token ([SEP]) or after --max-new-tokens tokens.
Each PROMPT is printed with its generated text; several prompts are decoded in one batch (with
--greedy or --num-beams, each gets the text it would get alone).

decoding (each new token is chosen from the model's next-token distribution):
  --greedy           the most likely token every time (deterministic; ignores the sampling
                     options below)
  --temperature T    T > 0; the logits are divided by T before sampling: T < 1 makes the
                     distribution sharper (safer text), T > 1 flatter (more varied text)
  --top-k K          K >= 0; sample only among the K most likely tokens (0 = no limit)
  --top-p P          0 < P <= 1; nucleus sampling: sample only among the most likely tokens
                     whose probabilities add up to P (1 = no limit)
  --seed S           seed of the sampling generator: the same seed gives the same text

beam search (deterministic; the sampling options above must keep their defaults):
  --num-beams K      K > 1 keeps the K most likely partial texts (beams) per prompt at every
                     step instead of one, and returns the best finished one; 1 = no beam search
  --length-penalty A a finished text scores (sum of its token log-probabilities) / length^A:
                     A > 0 favours longer texts, A < 0 shorter ones, 0 = the plain sum
                     (default 1, as in HF transformers)
  --early-stopping E when a prompt stops searching: true = as soon as K texts have finished;
                     false = when no unfinished beam can beat the worst finished text at its
                     current length (default); never = ... nor at the longest allowed length
  --num-return-sequences R
                     print the R <= K best texts of each prompt, best first, one line each

  --no-repeat-ngram-size N
                     N > 0: never write a token that would repeat a sequence of N tokens
                     already in the text (a clm's prompt included); works with every decoding
                     (greedy, sampling, beams); 0 = off

The prompt and the generated tokens must fit in the model's context (model.max_position):
a prompt of n tokens leaves room for max_position - n new ones, and a longer request is an
error that gives both numbers.
"""

EPILOG = """\
examples:
  ptm generate runs/gpt "the cat" --max-new-tokens 20 --greedy
  ptm generate runs/gpt "the cat" "a dog" --max-new-tokens 30 --top-p 0.9 --temperature 0.8 --seed 1
  ptm generate runs/bart "the cat [MASK] on the mat ." --greedy
  ptm generate runs/bart "the cat [MASK] on the mat ." --num-beams 4 --no-repeat-ngram-size 3
  ptm generate runs/gpt "the cat" --num-beams 5 --length-penalty 0.6 --early-stopping true
in Python: ptmkit.generate("runs/gpt", ["the cat"], max_new_tokens=20, top_k=40)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate", help=HELP, description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", metavar="RUN_OR_CKPT", help="run directory or checkpoint directory")
    p.add_argument("prompts", metavar="PROMPT", nargs="+", help="text to continue (clm) or rewrite (bart)")
    p.add_argument("--max-new-tokens", "-n", type=int, default=32, metavar="N",
                   help="generate at most N tokens per prompt (default: 32)")
    p.add_argument("--greedy", action="store_true", help="take the most likely token (no sampling)")
    p.add_argument("--temperature", "-t", type=float, default=1.0, metavar="T",
                   help="divide the logits by T > 0 before sampling (default: 1)")
    p.add_argument("--top-k", type=int, default=0, metavar="K",
                   help="sample among the K most likely tokens; 0 = all (default: 0)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P",
                   help="nucleus sampling: the most likely tokens of total probability P in (0, 1] (default: 1)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="sampling seed (default: 0)")
    p.add_argument("--num-beams", type=int, default=1, metavar="K",
                   help="beam search with K beams per prompt; 1 = no beam search (default: 1)")
    p.add_argument("--length-penalty", type=float, default=1.0, metavar="A",
                   help="beam search: score = sum of log-probabilities / length^A; A > 0 favours longer texts "
                        "(default: 1)")
    p.add_argument("--early-stopping", type=_early_stopping, default=False, metavar="{true,false,never}",
                   help="beam search: stop a prompt once K texts finished (true), once no beam can beat the "
                        "finished ones (false, default), or later still (never)")
    p.add_argument("--num-return-sequences", type=int, default=1, metavar="R",
                   help="beam search: print the R <= K best texts per prompt (default: 1)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=0, metavar="N",
                   help="never repeat a sequence of N tokens already in the text; 0 = off (default: 0)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")
    p.set_defaults(func=run)


def _early_stopping(value: str) -> bool | str:
    choices = {"true": True, "false": False, "never": "never"}
    if value.lower() not in choices:
        raise argparse.ArgumentTypeError(f"expected true, false or never, got {value!r}")
    return choices[value.lower()]


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows import generate as workflow  # the one heavy import, when the command runs

    search = dict(num_beams=args.num_beams, length_penalty=args.length_penalty, early_stopping=args.early_stopping,
                  no_repeat_ngram_size=args.no_repeat_ngram_size, num_return_sequences=args.num_return_sequences)
    # Check everything the user typed before loading the model.
    workflow.GenerationConfig(args.max_new_tokens, args.greedy, args.temperature, args.top_k, args.top_p, args.seed, **search)
    device = workflow.resolve_device(args.device)
    kind = workflow.generation_kind(workflow.load_config(args.source))
    texts = workflow.generate(args.source, list(args.prompts), args.max_new_tokens, greedy=args.greedy,
                     temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                     device=device, **search)
    arrow = ">>" if kind == workflow.CAUSAL_LM else "=>"
    for prompt, out in zip(args.prompts, texts):
        for text in ([out] if isinstance(out, str) else out):  # several per prompt: best first
            print(f"{prompt} {arrow} {text}")
    return 0
