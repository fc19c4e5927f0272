"""One logged metric of several pre-training runs against the step (or FLOPs), in one figure.

    python benchmarks/plot_metric.py RUN [RUN ...] --key rtd_auc [--split eval] [--flops-per-step F ...] \\
        [--baseline 0.5] -o auc.png

Reads each run's ``metrics.jsonl`` (the ``--split`` records that carry ``--key``), draws one line
per run (labelled by the run directory's name), an optional horizontal ``--baseline`` (e.g. 0.5
for an AUC), and prints, as the last line, one JSON object with every run's points.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def points(run: Path, key: str, split: str) -> list[tuple[int, float]]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("split") == split and key in rec:
            out[int(rec["step"])] = float(rec[key])
    return sorted(out.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--key", required=True)
    ap.add_argument("--split", default="eval", choices=["eval", "train"])
    ap.add_argument("--flops-per-step", nargs="*", type=float, default=None,
                    help="one per run: the x axis becomes training FLOPs")
    ap.add_argument("--baseline", type=float, default=None, help="a horizontal reference line")
    ap.add_argument("--title", default="")
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()
    if args.flops_per_step and len(args.flops_per_step) != len(args.runs):
        ap.error("give one --flops-per-step per run")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    result = {}
    for i, run in enumerate(args.runs):
        pts = points(run, args.key, args.split)
        if not pts:
            raise SystemExit(f"{run}: no {args.split} record with {args.key!r}")
        scale = args.flops_per_step[i] if args.flops_per_step else 1.0
        ax.plot([s * scale for s, _ in pts], [v for _, v in pts], marker=".", label=run.name)
        result[str(run)] = pts
    if args.baseline is not None:
        ax.axhline(args.baseline, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("training FLOPs" if args.flops_per_step else "step")
    ax.set_ylabel(f"{args.split} {args.key}")
    if args.title:
        ax.set_title(args.title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(json.dumps({"key": args.key, "split": args.split, "runs": result, "plot": str(args.out)}))


if __name__ == "__main__":
    main()
