"""``ptm analyse`` on models pre-trained by ptmkit itself: what a small MLM, a causal LM and a biLSTM
learn from the same text in the same CPU budget, beside their random-init twins.

Models, each pre-trained on the first ``--megabytes`` of ``english-mix`` (its own tokenizer trained on
that text), for the optimizer steps :data:`MODELS` gives or ``--seconds`` of training, whichever comes
first:

* ``bert-mini``: the ``bert-mini`` preset (4 layers, H 256, 4 heads, MLM + NSP);
* ``bert-mini-rel``: the same with T5's relative position bias instead of learned absolute
  positions (``model.positions=relative``): it leaves MLM's first plateau sooner (docs/analysis.md);
* ``gpt-mini``: ``gpt2-tiny`` widened to bert-mini's shape (4 layers, H 256, 4 heads, CLM);
* ``elmo-tiny``: the ``elmo-tiny`` preset (character CNN, 2 x 2 LSTM layers, biLM).

Then one ``ptm analyse`` over the three and their random-init twins on the first 2,000 Brown
sentences: contextuality (Ethayarajh 2019), POS probes with controls and, on the silver English
trees (``en-spacy-trees``), relation-label and structural probes; and the attention analysis of the
two Transformers.  Every stage reads back what a finished run wrote and resumes an interrupted
pre-training.

    python benchmarks/analysis_home.py [--out runs/analysis] [--seconds 600] [--models bert-mini] [--max-steps N]

Prints per-layer anisotropy, anisotropy-adjusted self-similarity and MEV, the probes' best layers
and centers of gravity, and, as the last line, one JSON object; the reports are in OUT/analysis and
OUT/attention.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compression import english_slice, ptm  # noqa: E402  (the same runner and corpus slice)

from ptmkit.train.mfu import cpu_name  # noqa: E402

BERT_MINI = ["bert-mini", "train.batch_size=64", "train.seq_len=128", "train.lr=1e-3", "train.warmup_steps=30",
             "train.max_steps=300"]
MODELS = {  # preset, settings, optimizer steps (about --seconds each on 2 Zen 4 cores)
    "bert-mini": BERT_MINI,
    "bert-mini-rel": [*BERT_MINI, "model.positions=relative"],
    "gpt-mini": ["gpt2-tiny", "model.hidden_size=256", "model.num_layers=4", "model.num_heads=4",
                 "model.intermediate_size=1024", "train.batch_size=64", "train.seq_len=128", "train.lr=1e-3",
                 "train.warmup_steps=30", "train.max_steps=300"],
    "elmo-tiny": ["elmo-tiny", "train.batch_size=64", "train.seq_len=35", "train.lr=2e-3", "train.warmup_steps=30",
                  "train.max_steps=600"],
}
LABELS = {"bert-mini": "BERT-mini", "bert-mini-rel": "BERT-mini-rel", "gpt-mini": "GPT-mini", "elmo-tiny": "ELMo-tiny"}


def finished(run: Path) -> dict | None:
    """The last training record of a run that stopped (its step budget or its time budget), else None."""
    marker = run / "pretrain_done.json"
    return json.loads(marker.read_text()) if marker.is_file() else None


def pretrain(out: Path, name: str, data: Path, seconds: float, steps: int | None = None) -> Path:
    run = out / name
    if finished(run) is None:
        start = time.perf_counter()
        preset, *overrides = MODELS[name]
        if steps:  # another step budget than MODELS' own
            overrides = [o for o in overrides if not o.startswith("train.max_steps=")] + [f"train.max_steps={steps}"]
        ptm("pretrain", preset, "--data", data, "-o", run, *overrides, f"train.max_seconds={seconds}",
            "train.precision=bf16", "train.num_threads=2", "train.save_every=100",
            "train.eval_every=100", "--quiet", *(["--resume"] if (run / "checkpoints").is_dir() else []))
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        train = [r for r in records if r.get("split") == "train"]
        evals = [r for r in records if r.get("split") == "eval"]
        summary = {"steps": train[-1]["step"], "elapsed_s": train[-1].get("elapsed"),
                   "wall_s": time.perf_counter() - start, "eval": evals[-1] if evals else None}
        (run / "pretrain_done.json").write_text(json.dumps(summary, indent=2) + "\n")
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/analysis")
    ap.add_argument("--megabytes", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=600.0, help="time cap of each pre-training")
    ap.add_argument("--max-steps", type=int, default=None, help="optimizer steps of each pre-training (default: MODELS')")
    ap.add_argument("--models", default="bert-mini,gpt-mini,elmo-tiny", help=f"some of {', '.join(MODELS)}")
    ap.add_argument("--stages", default="pretrain,analyse,attention")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from ptmkit.data.sources.base import fetch

    names = args.models.split(",")
    data = english_slice(out, args.megabytes, f"english-mix-{args.megabytes:g}mb.txt")
    runs = {n: pretrain(out, n, data, args.seconds, args.max_steps) for n in names} if "pretrain" in args.stages else \
        {n: out / n for n in names}
    brown = fetch("brown") / "train.txt"
    labels = [x for n in names for x in ("--label", LABELS[n])]
    common = ["--corpus", brown, "--random-twins", "--probe-sentences", "500,200", "--threads", 2, "--quiet"]
    if "analyse" in args.stages and not (out / "analysis" / "analysis.json").is_file():
        ptm("analyse", *runs.values(), *labels, *common, "--what", "contextuality,probe", "--trees", "en-spacy-trees",
            "--max-sentences", 2000, "--static-layers", 1, "-o", out / "analysis",
            *(["--overwrite"] if (out / "analysis").exists() else []))
    transformers = [n for n in names if not n.startswith("elmo")]
    if "attention" in args.stages and transformers and not (out / "attention" / "analysis.json").is_file():
        ptm("analyse", *[runs[n] for n in transformers], *[x for n in transformers for x in ("--label", LABELS[n])],
            *common, "--what", "attention", "--trees", "en-spacy-trees", "--attention-sentences", 200,
            "-o", out / "attention", *(["--overwrite"] if (out / "attention").exists() else []))
    res: dict = {"cpu": cpu_name(), "threads": 2, "corpus_mb": args.megabytes, "max_steps": args.max_steps,
                 "pretraining": {n: finished(out / n) for n in names}}
    path = out / "analysis" / "analysis.json"
    if path.is_file():
        res["models"] = {name: summarise(m) for name, m in json.loads(path.read_text())["models"].items()}
    for name, m in (res.get("models") or {}).items():
        c = m.get("contextuality") or {}
        print(f"{name}: anisotropy {fmt(c.get('anisotropy'))}; adjusted self-similarity "
              f"{fmt(c.get('adjusted_self_similarity'))}; MEV {fmt(c.get('mev'))}")
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res))


def summarise(m: dict) -> dict:
    """The per-layer contextuality curves and, per probe task, the best layer and the center of gravity."""
    c = m.get("contextuality") or {}
    out = {"contextuality": {k: c.get(k) for k in ("anisotropy", "self_similarity", "intra_sentence", "mev")}}
    out["contextuality"]["adjusted_self_similarity"] = (c.get("adjusted") or {}).get("self_similarity")
    probes = {}
    for task, p in (m.get("probe") or {}).items():
        if isinstance(p, dict) and "layers" in p:
            probes[task] = {k: v for k, v in p.items() if k != "layers"}
    out["probe"] = probes
    return out


def fmt(xs: list | None) -> str:
    return " ".join(f"{x:.3f}" for x in xs) if xs else "-"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
