"""What sequence-to-sequence pre-training has learned, side by side: reconstructions of PTB test
sentences by models pre-trained for the same time on PTB train.

Each preset (default ``bart-tiny mass-tiny t5-tiny``) gets its tokenizer trained on PTB train, is
pre-trained on PTB train for ``--budget`` seconds (the schedule sized to end within it, see
``ptb_budget.py``), and then reconstructs the same ``--sentences`` PTB test sentences through its
objective's ``reconstruct(backbone, tokenizer, texts, seed=0)``: BART's greedy reconstruction of the
noised sentence, MASS's greedy prediction of the masked fragment at its positions (shown filled
into the sentence), T5's predicted spans.  Each model noises with its own objective (seed 0), so
the noised inputs differ between models; the table shows each one.  A preset that does not exist
(or whose objective has no ``reconstruct``) is skipped with a message.

The test sentences are fixed: every ``step``-th PTB test line of 8-20 words, ``step`` chosen so
that they spread over the file.

    python benchmarks/reconstructions.py --presets bart-tiny mass-tiny t5-tiny --budget 240
        [--sentences 6] [--clock wall|cpu] [--threads 1] [--out DIR] [--quick]

Prints a Markdown table; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ptb_budget import pretrain_for_budget, ptb_corpora, ptb_files, raw_preset  # noqa: E402

from ptmkit.errors import PtmError  # noqa: E402

QUICK = ["model.hidden_size=32", "model.intermediate_size=64", "model.num_heads=2", "train.batch_size=8",
         "train.seq_len=64", "tokenizer.vocab_size=500"]


def test_sentences(n: int) -> list[str]:
    lines = [ln.strip() for ln in ptb_files()["test"].read_text(encoding="utf-8").splitlines()]
    fit = [ln for ln in lines if 8 <= len(ln.split()) <= 20]
    step = max(1, len(fit) // max(1, n))
    return fit[::step][:n]


def cell(text: str) -> str:
    """Markdown-safe table cell (PTB has ``<unk>``; a ``|`` would split the cell)."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["bart-tiny", "mass-tiny", "t5-tiny"])
    ap.add_argument("--budget", type=float, required=True, help="pre-training seconds per model (see --clock)")
    ap.add_argument("--sentences", type=int, default=6)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="run directories (default: a temporary one, removed at the end)")
    ap.add_argument("--quick", action="store_true", help="tiny models (checks that every stage runs; no result)")
    ap.add_argument("overrides", nargs="*", help="SECTION.KEY=VALUE for every preset, e.g. train.lr=1e-3")
    args = ap.parse_args()

    t_start = time.perf_counter()
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="reconstructions_"))
    texts = test_sentences(args.sentences)
    overrides = (QUICK if args.quick else []) + list(args.overrides)
    cache: dict = {}
    models, skipped = {}, {}
    for preset in args.presets:
        try:
            raw = raw_preset(preset, overrides)
        except PtmError as exc:
            skipped[preset] = str(exc)
            print(f"skipping {preset}: {exc}", flush=True)
            continue
        tokenizer, corpora = ptb_corpora(raw, root, cache)
        print(f"== {preset}: pre-training on PTB train for {args.budget:.0f} s ({args.clock} clock)", flush=True)
        model, info = pretrain_for_budget(raw, overrides, tokenizer, corpora, args.budget, root / preset,
                                          args.clock, args.threads)
        reconstruct = getattr(model.objective, "reconstruct", None)
        if reconstruct is None:
            skipped[preset] = f"objective {type(model.objective).__name__} has no reconstruct"
            print(f"skipping {preset}: {skipped[preset]}", flush=True)
            continue
        rows = reconstruct(model.backbone, tokenizer, texts, seed=0)
        print(f"   {info['steps']} steps ({info['epochs']} epochs), {info['stop']}", flush=True)
        models[preset] = {**info, "reconstructions": rows}

    lines = ["| # | original | model | noised input | reconstruction |", "|---|---|---|---|---|"]
    for i, _text in enumerate(texts):
        for preset, m in models.items():
            r = m["reconstructions"][i]
            lines.append(f"| {i + 1} | {cell(r['original'])} | {preset} | {cell(r['noised'])} | {cell(r['reconstruction'])} |")
    print("\n" + "\n".join(lines) + "\n")
    if not args.out:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({
        "benchmark": "reconstructions", "budget_seconds": args.budget, "clock": args.clock, "threads": args.threads,
        "quick": args.quick, "overrides": overrides, "sentences": texts, "models": models, "skipped": skipped,
        "total_seconds_wall": round(time.perf_counter() - t_start, 1),
    }))


if __name__ == "__main__":
    sys.exit(main())
