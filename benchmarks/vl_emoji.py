"""Vision–language pre-training on the emoji set: retrieval of unseen concepts against training
compute, for CLIP's contrastive objective and its two baselines (Radford et al. 2021, Fig. 2:
contrastive ~4x more efficient than bag-of-words prediction, which was ~3x more efficient than a
caption language model, in zero-shot accuracy per image seen).

For every run given (``ptm pretrain clip-tiny | bow-tiny | caption-lm-tiny ... --data emoji``, with
checkpoints kept: ``train.keep_checkpoints=9 train.save_every=125``), every checkpoint is scored on
the *dev* concepts (never trained on; the test concepts stay for the final table of
``ptm evaluate --suite vl``): R@10 over the dev concepts' English names, image -> text, text ->
image and their mean (the curve: a generative score's image -> text ranking also carries each
text's prior probability, which text -> image does not), image -> text R@1, and zero-shot
category accuracy, in the trained style.  The x axes are images seen and training FLOPs
(the Trainer's count per step, ``compute.json``).  The efficiency ratio of A over B is the share
of B's images (or FLOPs) at which A first reaches B's final R@10 (interpolated on the checkpoints).

    python benchmarks/vl_emoji.py LABEL=RUN ... [--out DIR] [--split dev]

Prints a Markdown table and, as the last line, one JSON object; writes ``compute_curve.json`` and
``compute_curve.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from matplotlib.ticker import NullFormatter

from ptmkit.train import checkpoint as ckpt
from ptmkit.vision.build import ImageTextDataConfig
from ptmkit.vision.data import load_image_text
from ptmkit.vision.load import load_vl
from ptmkit.workflows import report
from ptmkit.workflows.vl_eval import retrieval, zero_shot


def curve(run_dir: Path, split: str) -> list[dict]:
    """One point per checkpoint: step, images seen, FLOPs, dev R@1 / R@10 (i->t) and category accuracy."""
    compute = json.loads((run_dir / "compute.json").read_text())
    points = []
    for step, ck in ckpt.checkpoint_steps(run_dir):
        run = load_vl(ck)
        cfg = run.config["data"]
        data = load_image_text("emoji", cfg["styles"][:1], "en", image_size=run.model.image.image_size)
        r = retrieval(run, data, split, cfg["styles"][0], ImageTextDataConfig().max_len)
        z = zero_shot(run, data, split, cfg["styles"][0], "categories", ImageTextDataConfig().max_len)
        points.append({"step": step, "images": step * run.config["train"]["batch_size"],
                       "flops": step * compute["flops_per_step"], "R@1": r["i2t"]["R@1"], "i2t_R@10": r["i2t"]["R@10"],
                       "t2i_R@10": r["t2i"]["R@10"], "R@10": (r["i2t"]["R@10"] + r["t2i"]["R@10"]) / 2,
                       "chance_R@10": r["chance_i2t"]["R@10"], "category": z["accuracy"]})
    return points


def reach(points: list[dict], target: float, axis: str) -> float | None:
    """The ``axis`` value (images or FLOPs) where R@10 first reaches ``target``, linearly interpolated."""
    prev = {axis: 0.0, "R@10": points[0]["chance_R@10"]}
    for p in points:
        if p["R@10"] >= target:
            if p["R@10"] == prev["R@10"]:
                return p[axis]
            return prev[axis] + (target - prev["R@10"]) / (p["R@10"] - prev["R@10"]) * (p[axis] - prev[axis])
        prev = p
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    ap.add_argument("--out", default="runs/vl-compute")
    ap.add_argument("--split", default="dev")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    curves = {label: curve(Path(path), args.split) for label, path in (r.split("=", 1) for r in args.runs)}
    ratios = {}
    for a in curves:
        for b in curves:
            if a != b:
                target = curves[b][-1]["R@10"]
                for axis in ("images", "flops"):
                    got = reach(curves[a], target, axis)
                    ratios[f"{a}/{b}/{axis}"] = None if got is None else curves[b][-1][axis] / got
    rows = [[label, str(p["step"]), f"{p['images']:,}", f"{p['flops']:.2e}", f"{p['R@1']:.3f}", f"{p['i2t_R@10']:.3f}",
             f"{p['t2i_R@10']:.3f}", f"{p['R@10']:.3f}", f"{p['chance_R@10']:.3f}", f"{p['category']:.3f}"]
            for label, pts in curves.items() for p in pts]
    print("\n".join(report.markdown_table(["run", "step", "images", "FLOPs", "i→t R@1", "i→t R@10", "t→i R@10",
                                           "mean R@10", "chance R@10", "category acc"], rows)))
    fig = report.figure(11, 4.5)
    for k, axis in enumerate(("images", "flops")):
        ax = fig.add_subplot(1, 2, k + 1)
        for (label, pts), colour in zip(curves.items(), report.colours(len(curves))):
            ax.plot([p[axis] for p in pts], [p["R@10"] for p in pts], "o-", color=colour, label=label)
        ax.axhline(next(iter(curves.values()))[0]["chance_R@10"], color="black", lw=1, ls=":", label="chance")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: minor ones overlap
        ax.set_xlabel("images seen" if axis == "images" else "training FLOPs")
        ax.set_ylabel(f"{args.split} R@10 (i→t, t→i mean)")
        ax.set_title("unseen concepts, trained style", fontsize=9)
        ax.legend(fontsize=7)
    report.save(fig, out / "compute_curve.png")
    result = {"split": args.split, "curves": curves, "efficiency": ratios}
    (out / "compute_curve.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"split": args.split, "final_R@10": {k: v[-1]["R@10"] for k, v in curves.items()},
                      "efficiency": {k: (None if v is None else round(v, 2)) for k, v in ratios.items()}}))


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
