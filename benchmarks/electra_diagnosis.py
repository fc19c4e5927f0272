"""Why does the discriminator learn or not?  electra-tiny variants on the same corpus, same steps.

Each variant is ``electra-tiny`` plus overrides, trained for ``--steps`` optimizer steps on the
same prepared text (PTB train by default; held-out: PTB valid) with the same seed:

    default        the preset
    uniform        objective.generator=uniform (replacements drawn uniformly: checks the
                   backbone, the head and the labels without a generator; AUC should near 1)
    mask25         objective.mask_prob=0.25 (and no cap on the predictions per example)
    small_gen      objective.generator_size=0.125, objective.generator_layers=1
    temperature    objective.temperature=2, decaying to 1 over the first half of the run
    no_bias_corr   train.bias_correction=false (the reference implementation's AdamW)
    no_gen_bias    objective.generator_output_bias=false (no [V] bias in which to learn unigram frequencies)

Every ``--eval-every`` steps the held-out detector metrics are logged (``rtd_auc``: ROC AUC of the
replaced-token logits, 0.5 = only the base rate; ``rtd_precision`` / ``rtd_recall`` at 0.5;
``replaced``: the base rate).  Prints one table row per variant, writes ``auc.png`` (held-out
AUC against the step, one line per variant) and ``results.json`` into ``--out``, and ends with
one JSON line.

    python benchmarks/electra_diagnosis.py --out runs/electra-diag            # the full comparison
    python benchmarks/electra_diagnosis.py --out /tmp/d --steps 4 --lines 400 --batch-size 8 \\
        --seq-len 32 --vocab-size 400 --eval-every 2 --eval-batches 2        # a smoke run, seconds
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixed_steps import prepare_text, train_variant  # noqa: E402

from ptmkit.data.sources.base import fetch  # noqa: E402

PRESET = "electra-tiny"


def variants(steps: int) -> dict[str, list[str]]:
    return {
        "default": [],
        "uniform": ["objective.generator=uniform"],
        "mask25": ["objective.mask_prob=0.25", "objective.max_predictions=null"],
        "small_gen": ["objective.generator_size=0.125", "objective.generator_layers=1"],
        "temperature": ["objective.temperature=2.0", f"objective.temperature_decay_steps={max(1, steps // 2)}"],
        "no_bias_corr": ["train.bias_correction=false"],
        "no_gen_bias": ["objective.generator_output_bias=false"],
    }


KEYS = ("rtd_auc", "rtd_precision", "rtd_recall", "replaced", "rtd_loss", "mlm_acc")


def plot(results: dict[str, dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, res in results.items():
        curve = res["eval_curve"]
        ax.plot([r["step"] for r in curve], [r["rtd_auc"] for r in curve], "o-", ms=3, label=name)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out discriminator ROC AUC")
    ax.set_title(f"{PRESET}: replaced token detection")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, help="training text (default: PTB train)")
    ap.add_argument("--eval-data", type=Path, help="held-out text (default: PTB valid)")
    ap.add_argument("--lines", type=int, default=0, help="use the first N lines of the training text (0: all)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--lr", type=float, default=None, help="default: the preset's")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    args = ap.parse_args(argv)

    table = variants(args.steps)
    names = [n for n in args.only.split(",") if n] or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        ap.error(f"unknown variants {unknown}; choose from {sorted(table)}")
    ptb = None if (args.data and args.eval_data) else fetch("ptb")
    train_text = args.data or ptb / "train.txt"
    held_text = args.eval_data or ptb / "valid.txt"
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer, train_corpus, held_out = prepare_text(PRESET, train_text, held_text, args.out / "data",
                                                     args.vocab_size, args.lines or None)
    common = [f"train.max_steps={args.steps}", f"train.batch_size={args.batch_size}", f"train.seq_len={args.seq_len}",
              f"train.eval_every={args.eval_every}", f"train.eval_batches={args.eval_batches}",
              f"train.warmup_steps={max(1, args.steps // 10)}", f"train.log_every={max(1, args.eval_every // 5)}",
              "train.device=cpu"]
    if args.lr is not None:
        common.append(f"train.lr={args.lr}")
    results: dict[str, dict] = {}
    print(f"{'variant':<14}" + "".join(f"{k:>14}" for k in KEYS) + f"{'seconds':>10}", flush=True)
    for name in names:
        records, seconds = train_variant(PRESET, common + table[name], tokenizer, train_corpus, held_out,
                                         args.out / name, threads=args.threads)
        evals = [r for r in records if r.get("split") == "eval"]
        last = evals[-1]
        results[name] = {
            "overrides": table[name], "seconds": round(seconds, 1),
            **{k: last.get(k) for k in KEYS},
            "eval_curve": [{k: r.get(k) for k in ("step", *KEYS)} for r in evals],
            "train_curve": [{k: r.get(k) for k in ("step", *KEYS)} for r in records if r.get("split") == "train"],
        }
        row = "".join(f"{last[k]:>14.4f}" if isinstance(last.get(k), float) else f"{'-':>14}" for k in KEYS)
        print(f"{name:<14}{row}{seconds:>10.1f}", flush=True)
    png = plot(results, args.out / "auc.png")
    summary = {
        "benchmark": "electra_diagnosis", "preset": PRESET, "steps": args.steps, "batch_size": args.batch_size,
        "seq_len": args.seq_len, "vocab_size": tokenizer.vocab_size, "plot": str(png),
        "variants": {n: {k: r[k] for k in ("overrides", "seconds", *KEYS)} for n, r in results.items()},
    }
    (args.out / "results.json").write_text(json.dumps({**summary, "curves": results}, indent=1))
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
