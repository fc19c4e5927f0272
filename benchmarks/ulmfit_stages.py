"""ULMFiT's three stages (Howard & Ruder 2018) on MR with few labels: what each stage adds.

The AWD-LSTM (``awd-lstm-tiny``) and MR (movie-review polarity) with ``--train-size`` labelled
training sentences (a fixed subset), ``--seeds`` seeds, the peak LR of every run chosen on MR dev
from ``--lrs``, scored on the 1,005-sentence MR test split:

* ``random``: no pre-training: the same architecture and tokenizer from a random
  initialisation, fine-tuned plainly (last-token pooling, a linear head, linear warmup/decay,
  every layer at the same LR from the start);
* ``lm1``: stage 1 only: the general-domain LM (``--general``: PTB train and the Brown corpus by
  default, or ``english-mix``), fine-tuned plainly;
* ``lm12``: stages 1 + 2: the general-domain LM fine-tuned on MR's *unlabelled training* text
  (``unlabeled_train.txt``: the training split's sentences, never dev or test) with
  ``ptm pretrain --init-from`` (discriminative LRs and the slanted triangular schedule, as ULMFiT's
  LM fine-tuning), then fine-tuned plainly;
* ``lm12-ulmfit``: stages 1 + 2 + 3: the same LM fine-tuned with all of ULMFiT's classifier tricks
  (``--recipe ulmfit``: concat pooling, a 50-unit hidden layer, LR / 2.6 per layer down, slanted
  triangular LRs, gradual unfreezing, Adam betas 0.7 / 0.99).

The word tokenizer is trained once on the general text plus MR's unlabelled training text (a
vocabulary only: stage 1 trains on the general text alone, so MR-only words keep their random
embeddings until stage 2, as new words do in ULMFiT's target-task LM fine-tuning).  Stage 1 and
stage 2 are sized to their time budgets (``--stage1-seconds``, ``--stage2-seconds``, wall clock)
by a few probe steps, with ``train.max_seconds`` as a hard stop; finished pre-training runs in
``--out`` are reused (delete them to re-measure).

    python benchmarks/ulmfit_stages.py [--out runs/ulmfit-stages] [--general ptb brown]
        [--stage1-seconds 1800] [--stage2-seconds 300] [--seeds 1 2 3] [--train-size 500]
        [--lrs 1e-3 3e-3 1e-2] [--epochs 10] [--quick]

Prints a Markdown table and, as the last line, one JSON object; writes ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PRESET = "awd-lstm-tiny"
LABELS = {
    "random": "(a) no pre-training (random init), plain fine-tuning",
    "lm1": "(b) stage 1: general-domain LM, plain fine-tuning",
    "lm12": "(c) stages 1+2: + LM fine-tuned on MR's unlabelled train text, plain fine-tuning",
    "lm12-ulmfit": "(d) stages 1+2+3: + ULMFiT classifier fine-tuning (all tricks)",
}


def general_files(names: list[str]) -> list[Path]:
    from ptmkit.data.sources.base import fetch

    files = {"ptb": ("ptb", "train.txt"), "brown": ("brown", "train.txt"), "english-mix": ("english-mix", "english-mix.txt")}
    out = []
    for name in names:
        if name not in files:
            raise SystemExit(f"--general: unknown corpus {name!r}; choose from {', '.join(files)}")
        recipe, file = files[name]
        out.append(fetch(recipe) / file)
    return out


def sized_steps(config: dict, corpus, tokenizer, seconds: float, init_from: Path | None = None) -> tuple[int, float]:
    """Optimizer steps that fit ``seconds`` of wall time (probe of a few steps, +10 % margin)."""
    from elmo_ptb import step_seconds

    from ptmkit.build import build_model
    from ptmkit.config import from_dict
    from ptmkit.data.batches import PretrainBatches
    from ptmkit.train.config import TrainConfig

    train_cfg = from_dict(TrainConfig, config["train"], "train")
    model = build_model(config, tokenizer)
    spans = model.objective.example_spans(corpus, train_cfg.seq_len)
    batches = PretrainBatches(corpus, model.objective, spans, train_cfg.seq_len, train_cfg.batch_size, train_cfg.seed)
    per_step = step_seconds(model, batches, train_cfg, time.perf_counter)
    return max(1, int(seconds / (1.1 * per_step))), per_step


def pretrain_stage(name: str, out: Path, data, overrides: list[str], seconds: float, init_from: Path | None, quick: bool):
    """Run one pre-training stage unless ``out/name`` holds it; ``(run_dir, info)``."""
    from ptmkit.build import resolve_config
    from ptmkit.config import apply_overrides
    from ptmkit.data.corpus import Corpus
    from ptmkit.data.prepare import prepare
    from ptmkit.presets import load_preset
    from ptmkit.workflows.pretrain import continued_start, pretrain

    run_dir = out / name
    stamp = run_dir / "stage.json"
    if stamp.is_file():
        return run_dir, json.loads(stamp.read_text())
    if init_from is not None:
        start = continued_start(PRESET, init_from, overrides)
        tokenizer, raw = start.tokenizer, start.raw
        # the text prepared once with the run's tokenizer: the probe reads it, the run trains on it
        probe_corpus = prepare([Path(p) for p in data], tokenizer, out / f"corpus-{name}", workers=1, overwrite=True,
                               progress=False)
        data = probe_corpus.path
        over = [*overrides, f"model.vocab_size={raw['model']['vocab_size']}"]
    else:
        probe_corpus = Corpus.open(data)
        tokenizer = probe_corpus.load_tokenizer()
        raw = apply_overrides(load_preset(PRESET), overrides)
        over = overrides
    steps, per_step = sized_steps(resolve_config(raw, tokenizer, over), probe_corpus, tokenizer, seconds)
    print(f"\n== {name}: {per_step:.3f} s/step -> {steps} steps for {seconds:.0f} s", flush=True)
    t0 = time.perf_counter()
    final = [*overrides, f"train.max_steps={steps}", f"train.max_seconds={seconds * 1.05:.0f}",
             f"train.log_every={max(1, steps // 20)}", f"train.eval_every={max(1, steps // 4)}", "train.save_every=0"]
    pretrain(PRESET, data, run_dir, final, init_from=init_from, overwrite=run_dir.exists(), verbose=not quick)
    from ptmkit.train.trainer import read_metrics

    records = list(read_metrics(run_dir / "metrics.jsonl"))
    evals = [r for r in records if r.get("split") == "eval"]
    info = {"seconds": round(time.perf_counter() - t0, 1), "steps": max((r.get("step", 0) for r in records), default=0),
            "planned_steps": steps, "eval_loss": evals[-1].get("loss") if evals else None}
    stamp.write_text(json.dumps(info))
    return run_dir, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/ulmfit-stages")
    ap.add_argument("--general", nargs="+", default=["ptb", "brown"], help="general-domain corpora: ptb, brown, english-mix")
    ap.add_argument("--stage1-seconds", type=float, default=1800.0)
    ap.add_argument("--stage2-seconds", type=float, default=300.0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--train-size", type=int, default=500)
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 3e-3, 1e-2])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny settings that exercise every stage (no meaningful result)")
    args = ap.parse_args()

    import torch

    from ptmkit.data.prepare import prepare
    from ptmkit.data.sources.base import fetch
    from ptmkit.data.tasks import load_task
    from ptmkit.pretrained import load_pretrained
    from ptmkit.tasks.finetune import FinetuneConfig, recipe_config
    from ptmkit.tokenization import Tokenizer
    from ptmkit.workflows.finetune import run_seeds
    from ptmkit.workflows.report import summarize_inits as summarize

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mr = fetch("mr")
    general = general_files(args.general)
    mr_text = mr / "unlabeled_train.txt"
    shrink: list[str] = []
    if args.quick:  # the head of every file, a small model, short stages
        from ptmkit.workflows.demo import head_copies

        general = head_copies(general, 3000, out / "text-general")
        mr_text = head_copies([mr_text], 1000, out / "text-mr")[0]
        shrink = ["model.embedding_size=32", "model.hidden_size=64", "train.batch_size=8", "train.seq_len=32"]
        args.seeds, args.lrs, args.epochs, args.train_size = args.seeds[:1], args.lrs[-1:], 2, 100
        args.stage1_seconds, args.stage2_seconds = min(args.stage1_seconds, 3.0), min(args.stage2_seconds, 2.0)

    task = load_task("mr").with_train_size(args.train_size, seed=0)

    # -- the tokenizer (general + MR train text) and the general corpus --------------------------
    corpus_dir = out / "corpus-general"
    if not (corpus_dir / "meta.json").is_file():
        tokenizer = Tokenizer.train([*general, mr_text], kind="word", vocab_size=30000, lowercase=True, min_frequency=2)
        prepare(general, tokenizer, corpus_dir, workers=1, overwrite=True, progress=not args.quick)

    # -- stage 1: general-domain LM; stage 2: LM fine-tuning on MR's unlabelled train text ---------
    lm1, info1 = pretrain_stage("lm-general", out, corpus_dir, shrink, args.stage1_seconds, None, args.quick)
    stage2 = [*shrink, "train.schedule=slanted_triangular", "train.warmup_steps=0", "train.layer_decay=0.385",
              "train.lr=3e-3", "train.eval_fraction=0.05"]
    lm12, info2 = pretrain_stage("lm-mr", out, [mr_text], stage2, args.stage2_seconds, lm1, args.quick)

    # -- stage 3: classifier fine-tuning --------------------------------------------------------
    plain = FinetuneConfig(epochs=args.epochs, batch_size=32)
    ulmfit = recipe_config("ulmfit", epochs=args.epochs, batch_size=32)
    pre1, pre12 = load_pretrained(lm1, heads=False), load_pretrained(lm12, heads=False)
    conditions = {
        "random": (pre1, plain, "random"),
        "lm1": (pre1, plain, "pretrained"),
        "lm12": (pre12, plain, "pretrained"),
        "lm12-ulmfit": (pre12, ulmfit, "pretrained"),
    }
    results, times = [], {}
    for name, (model, cfg, init) in conditions.items():
        t0 = time.perf_counter()
        print(f"\n== {name}: {LABELS[name]} ==", flush=True)
        runs = run_seeds(model, task, out / "finetune" / name, cfg, [init], list(args.seeds), lrs=list(args.lrs),
                         resume=True, progress=not args.quick)
        results += [{**r, "init": name} for r in runs]
        times[name] = round(time.perf_counter() - t0, 1)

    summary = summarize(results)
    lines = ["| condition | MR test accuracy (mean ± sd) | per seed | dev accuracy |", "|---|---:|---|---:|"]
    for name, s in summary.items():
        acc = s["test_accuracy"]
        seeds = " ".join(f"{v:.3f}" for v in acc["values"])
        lines.append(f"| {LABELS[name]} | {acc['mean']:.4f} ± {acc['sd']:.4f} | {seeds} | {s['dev_accuracy']['mean']:.4f} |")
    print(f"\nMR, {len(task.train)} labelled training sentences, {len(args.seeds)} seed(s), LR chosen on dev from "
          f"{args.lrs}; stage 1 {info1['steps']} steps / {info1['seconds']:.0f} s on {'+'.join(args.general)}, stage 2 "
          f"{info2['steps']} steps / {info2['seconds']:.0f} s on MR's unlabelled train text\n")
    print("\n".join(lines))
    result = {
        "benchmark": "ulmfit_stages", "preset": PRESET, "train_size": len(task.train), "seeds": args.seeds, "lrs": args.lrs,
        "epochs": args.epochs, "general": args.general, "stage1": info1, "stage2": info2, "finetune_seconds": times,
        "results": {n: {"test_accuracy_mean": s["test_accuracy"]["mean"], "test_accuracy_sd": s["test_accuracy"]["sd"],
                        "dev_accuracy_mean": s["dev_accuracy"]["mean"]} for n, s in summary.items()},
        "quick": args.quick, "total_seconds_wall": round(time.perf_counter() - t_start, 1),
    }
    (out / "results.json").write_text(json.dumps({**result, "summary": summary, "runs": results}, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
