"""Does bf16 training on CPU follow the fp32 loss curve?  bert-mini, fp32 vs bf16 vs another fp32 seed.

Three runs of the ``bert-mini`` preset (MLM + NSP) on the same prepared text (PTB train by default;
held-out: PTB valid) for ``--steps`` steps each:

    fp32        train.precision=fp32, train.seed=S
    bf16        train.precision=bf16, train.seed=S   (CPU autocast; fp32 weights and AdamW state)
    fp32_seed2  train.precision=fp32, train.seed=S+1 (the run-to-run noise to compare against)

The bf16 run shares everything with the first fp32 run (initial weights, batches, masks, dropout
draws), so their difference is the effect of the arithmetic alone.  Reported: the mean and
maximum absolute difference of the logged training loss (``train.log_every`` windows) between
bf16 and fp32, the same for the two fp32 seeds, over the whole run and over its last quarter,
the final held-out losses, and the wall time of each run (bf16 is faster only on CPUs with bf16
matrix instructions).  ``bf16_curve.png`` plots the three curves and the two differences;
``results.json`` and a final JSON line hold the numbers.

    python benchmarks/bf16_curve.py --out runs/bf16-curve                          # the full run
    python benchmarks/bf16_curve.py --out /tmp/b --steps 6 --lines 300 --batch-size 4 --seq-len 32 \\
        --vocab-size 300 --log-every 2                                             # a smoke run, seconds
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixed_steps import prepare_text, train_variant  # noqa: E402

from ptmkit.data.sources.base import fetch  # noqa: E402

PRESET = "bert-mini"


def curve(records: list[dict], split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    rows = [r for r in records if r.get("split") == split and "loss" in r]
    return np.array([r["step"] for r in rows]), np.array([r["loss"] for r in rows])


def differences(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Mean / max |a - b| over the whole curve and over its last quarter."""
    d = np.abs(a - b)
    tail = d[len(d) - max(1, len(d) // 4):]
    return {"mean_abs": float(d.mean()), "max_abs": float(d.max()), "last_quarter_mean_abs": float(tail.mean())}


def plot(curves: dict[str, tuple[np.ndarray, np.ndarray]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for name, (steps, loss) in curves.items():
        top.plot(steps, loss, label=name, lw=1.2)
    top.set_ylabel("training loss (MLM + NSP)")
    top.set_title(f"{PRESET}: fp32 vs bf16 autocast on CPU")
    top.legend()
    top.grid(alpha=0.3)
    steps, base = curves["fp32"]
    bottom.plot(steps, curves["bf16"][1] - base, label="bf16 - fp32 (same seed)")
    bottom.plot(steps, curves["fp32_seed2"][1] - base, label="fp32 seed 2 - fp32 (noise)", alpha=0.8)
    bottom.axhline(0.0, color="grey", lw=0.8)
    bottom.set_xlabel("step")
    bottom.set_ylabel("loss difference")
    bottom.legend()
    bottom.grid(alpha=0.3)
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
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    ptb = None if (args.data and args.eval_data) else fetch("ptb")
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer, train_corpus, held_out = prepare_text(PRESET, args.data or ptb / "train.txt",
                                                     args.eval_data or ptb / "valid.txt", args.out / "data",
                                                     args.vocab_size, args.lines or None)
    common = [f"train.max_steps={args.steps}", f"train.batch_size={args.batch_size}", f"train.seq_len={args.seq_len}",
              f"train.log_every={args.log_every}", "train.eval_every=0", f"train.eval_batches={args.eval_batches}",
              f"train.warmup_steps={max(1, args.steps // 10)}", "train.device=cpu"]
    runs = {"fp32": ["train.precision=fp32", f"train.seed={args.seed}"],
            "bf16": ["train.precision=bf16", f"train.seed={args.seed}"],
            "fp32_seed2": ["train.precision=fp32", f"train.seed={args.seed + 1}"]}
    curves, finals, seconds = {}, {}, {}
    for name, extra in runs.items():
        records, secs = train_variant(PRESET, common + extra, tokenizer, train_corpus, held_out, args.out / name,
                                      threads=args.threads)
        curves[name] = curve(records)
        evals = [r for r in records if r.get("split") == "eval"]
        finals[name] = evals[-1]["loss"] if evals else None
        seconds[name] = round(secs, 1)
        print(f"{name:<11} final train loss {curves[name][1][-1]:.4f}  held-out loss {finals[name]:.4f}  {secs:.1f} s",
              flush=True)
    png = plot(curves, args.out / "bf16_curve.png")
    summary = {
        "benchmark": "bf16_curve", "preset": PRESET, "steps": args.steps, "batch_size": args.batch_size,
        "seq_len": args.seq_len, "threads": args.threads, "plot": str(png),
        "bf16_vs_fp32": differences(curves["bf16"][1], curves["fp32"][1]),
        "fp32_seed_noise": differences(curves["fp32_seed2"][1], curves["fp32"][1]),
        "final_eval_loss": finals, "seconds": seconds,
        "bf16_time_ratio": round(seconds["bf16"] / seconds["fp32"], 3),
    }
    for name, value in (("bf16 - fp32", summary["bf16_vs_fp32"]), ("seed noise", summary["fp32_seed_noise"])):
        print(f"{name:<11} mean |diff| {value['mean_abs']:.4f}  max {value['max_abs']:.4f}  "
              f"last quarter {value['last_quarter_mean_abs']:.4f}", flush=True)
    (args.out / "results.json").write_text(json.dumps({**summary, "curves": {
        n: {"step": s.tolist(), "loss": v.tolist()} for n, (s, v) in curves.items()}}, indent=1))
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
