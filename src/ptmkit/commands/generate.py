"""``ptm generate``: continue a prompt with a causal LM (GPT) or rewrite it with an encoder–decoder (BART)."""

from __future__ import annotations

import argparse

HELP = "generate text with a pre-trained causal LM (clm) or encoder–decoder (bart)"

DESCRIPTION = """\
Generate text with a pre-trained model.

RUN_OR_CKPT is a run directory (its latest checkpoint is used) or a checkpoint directory of a
model that can generate: one pre-trained with the clm objective (GPT, GPT-2), which continues
PROMPT, or with the bart objective, which rewrites PROMPT (its denoising task: a text with
[MASK]s comes back filled in), or with unilm (after seq2seq fine-tuning: it writes PROMPT's target).  Generation stops at the end-of-sentence token ([SEP]) or after
--max-new-tokens tokens.  Each PROMPT is printed with its generated text; several prompts are
decoded in one batch (with --greedy, each gets the text it would get alone).

decoding (each new token is chosen from the model's next-token distribution):
  --greedy           the most likely token every time (deterministic; ignores the options below)
  --temperature T    T > 0; the logits are divided by T before sampling: T < 1 makes the
                     distribution sharper (safer text), T > 1 flatter (more varied text)
  --top-k K          K >= 0; sample only among the K most likely tokens (0 = no limit)
  --top-p P          0 < P <= 1; nucleus sampling: sample only among the most likely tokens
                     whose probabilities add up to P (1 = no limit)
  --seed S           seed of the sampling generator: the same seed gives the same text

The prompt and the generated tokens must fit in the model's context (model.max_position):
a prompt of n tokens leaves room for max_position - n new ones, and a longer request is an
error that gives both numbers.
"""

EPILOG = """\
examples:
  ptm generate runs/gpt "the cat" --max-new-tokens 20 --greedy
  ptm generate runs/gpt "the cat" "a dog" --max-new-tokens 30 --top-p 0.9 --temperature 0.8 --seed 1
  ptm generate runs/bart "the cat [MASK] on the mat ." --greedy
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
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.generation import CAUSAL_LM, GenerationConfig, generate, generation_kind, load_config

    # Check everything the user typed before loading the model.
    GenerationConfig(args.max_new_tokens, args.greedy, args.temperature, args.top_k, args.top_p, args.seed)
    kind = generation_kind(load_config(args.source))
    texts = generate(args.source, list(args.prompts), args.max_new_tokens, greedy=args.greedy,
                     temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                     device=args.device)
    for prompt, text in zip(args.prompts, texts):
        if kind == CAUSAL_LM:
            print(f"{prompt} >> {text}")
        else:
            print(f"{prompt} => {text}")
    return 0
