"""ELMo's biLM (``elmo-tiny``) on the Penn Treebank: forward, backward and mean perplexity for a CPU budget.

Fetches the ``ptb`` recipe (Mikolov's split: 10k words, ``<unk>``, one sentence per line), trains the
preset's word tokenizer on PTB train (every PTB word kept: ``min_frequency: 1``), prepares train,
valid and test with it, and trains the preset (default ``elmo-tiny``) on PTB train with the shared
Trainer.  The number of steps is sized so that the LR schedule ends within ``--budget`` seconds of
training: a few probe steps give the seconds per step (and, with ``--threads auto``, the faster of
1 and 2 torch threads: on a shared machine two threads can be far slower than one); a callback stops
the run if it goes past the budget anyway (then the schedule has not finished; ``stop`` says so).
``--clock cpu`` (default) counts the process's CPU seconds over all threads, ``--clock wall`` the
elapsed time.

The trained model is then evaluated on the whole of PTB valid and test: the sentence stream (a
separator after every sentence, as in training) cut into consecutive blocks of ``--eval-len``
tokens, each read from zero LSTM states; the forward LM predicts every stream token but the first,
the backward LM every token but the last (``tokens - 1`` predictions per direction, the separators
included, as the usual PTB perplexity counts the end-of-sentence token).  Reported: forward and
backward perplexity, ``mean_ppl`` = exp(mean of the two directions' losses) (their geometric mean)
and ``avg_ppl`` (their arithmetic mean).

For comparison the output carries the published unidirectional LSTM figures on the same split,
which were obtained with far longer training (13 / 39 epochs) and hidden states carried across the
whole text: Zaremba et al. (2014), Table 1: non-regularized LSTM ("small", 2 x 200) valid 120.7 /
test 114.5, medium regularized LSTM (2 x 650) 86.2 / 82.7; and the TensorFlow PTB tutorial's
re-runs of those two configurations: small 121.4 / 115.9, medium 86.2 / 82.1.  Only the forward
direction is the same task; the backward LM reads right to left.

The last line printed is one JSON object.

    python benchmarks/elmo_ptb.py --budget 600 [--clock cpu|wall] [--threads auto|1|2] [--eval-len 35]
        [--preset elmo-tiny] [--out DIR] [SECTION.KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides, from_dict
from ptmkit.data.batches import PretrainBatches
from ptmkit.data.corpus import Corpus
from ptmkit.data.prepare import prepare
from ptmkit.data.sources.base import fetch
from ptmkit.presets import load_preset
from ptmkit.tokenization import Tokenizer
from ptmkit.train.config import TrainConfig
from ptmkit.train.trainer import Trainer, seed_everything
from ptmkit.workflows.pretrain import init_from_corpus

REFERENCE = {
    "zaremba2014_small_nonregularized": {"valid_ppl": 120.7, "test_ppl": 114.5, "size": "2 x 200 LSTM, 13 epochs"},
    "zaremba2014_medium_regularized": {"valid_ppl": 86.2, "test_ppl": 82.7, "size": "2 x 650 LSTM, 39 epochs"},
    "tf_tutorial_small": {"valid_ppl": 121.39, "test_ppl": 115.91, "size": "Zaremba small config re-run"},
    "tf_tutorial_medium": {"valid_ppl": 86.16, "test_ppl": 82.07, "size": "Zaremba medium config re-run"},
}


class BudgetExceeded(Exception):
    pass


def make_clock(kind: str):
    return time.process_time if kind == "cpu" else time.perf_counter


def step_seconds(model, batches: PretrainBatches, cfg: TrainConfig, clock, steps: int = 3) -> float:
    """Seconds (by ``clock``) of one AdamW training step, after one warm-up step."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    model.train()
    for s in range(steps + 1):
        if s == 1:
            t0 = clock()
        model(batches(0, s)).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (clock() - t0) / steps


def perplexities(model, corpus: Corpus, eval_len: int, batch_size: int) -> dict[str, float]:
    """Forward / backward perplexity over the whole stream of ``corpus`` (see the module docstring)."""
    obj = model.objective
    total = obj.stream.length(corpus)
    starts = np.arange(0, total - 1, eval_len, dtype=np.int64)
    spans = np.stack([starts, np.minimum(starts + eval_len + 1, total)], axis=1)
    sums = {"forward": 0.0, "backward": 0.0}
    n = 0
    rng = np.random.default_rng(0)  # the biLM's batches use no randomness
    model.eval()
    with torch.no_grad():
        for i in range(0, len(spans), batch_size):
            out = model(obj.collate(corpus, spans[i : i + batch_size], rng))
            for d in sums:
                sums[d] += float(out.metrics[f"{d}_loss"]) * out.n_predictions
            n += out.n_predictions
    assert n == total - 1, (n, total)
    fwd, bwd = sums["forward"] / n, sums["backward"] / n
    return {
        "forward_ppl": round(math.exp(fwd), 2),
        "backward_ppl": round(math.exp(bwd), 2),
        "mean_ppl": round(math.exp(0.5 * (fwd + bwd)), 2),
        "avg_ppl": round(0.5 * (math.exp(fwd) + math.exp(bwd)), 2),
        "predictions": n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, required=True, help="training budget in seconds (see --clock)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: process CPU seconds over all threads (default); wall: elapsed seconds")
    ap.add_argument("--threads", default="auto", help="torch CPU threads: a number or 'auto' (the faster of 1 and 2)")
    ap.add_argument("--eval-len", type=int, default=None, help="tokens per evaluation block (default: train.seq_len)")
    ap.add_argument("--preset", default="elmo-tiny")
    ap.add_argument("--out", default=None, help="run directory (default: a temporary one, removed at the end)")
    ap.add_argument("overrides", nargs="*", help="SECTION.KEY=VALUE, e.g. train.lr=3e-3")
    args = ap.parse_args()

    t_start, c_start = time.perf_counter(), time.process_time()
    clock = make_clock(args.clock)
    ptb = fetch("ptb")
    files = {split: ptb / f"{split}.txt" for split in ("train", "valid", "test")}
    raw = apply_overrides(load_preset(args.preset), list(args.overrides))
    tok_section = dict(raw.get("tokenizer") or {})
    kind, vocab_size = tok_section.pop("kind", "word"), tok_section.pop("vocab_size", 16000)
    tokenizer = Tokenizer.train([files["train"]], kind=kind, vocab_size=vocab_size, **tok_section)
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="elmo_ptb_"))
    corpora = {}
    for split, f in files.items():
        corpora[split] = prepare([f], tokenizer, root / f"corpus-{split}", workers=1, overwrite=True, progress=False)
    config = resolve_config(raw, tokenizer, list(args.overrides))
    train_cfg = from_dict(TrainConfig, config["train"], "train")
    eval_len = args.eval_len or train_cfg.seq_len
    print(f"PTB: vocabulary {tokenizer.vocab_size} ({kind} tokens + specials); tokens with separators: "
          + ", ".join(f"{s} {c.n_tokens + len(c.sentences) - 1:,}" for s, c in corpora.items()),
          flush=True)

    # -- size the run: seconds per step by thread count --------------------------------------
    seed_everything(train_cfg.seed)
    probe_model = build_model(config, tokenizer)
    spans = probe_model.objective.example_spans(corpora["train"], train_cfg.seq_len)
    batches = PretrainBatches(corpora["train"], probe_model.objective, spans, train_cfg.seq_len,
                              train_cfg.batch_size, train_cfg.seed)
    counts = (2, 1) if args.threads == "auto" else (int(args.threads),)
    probe = {}
    for n in counts:
        torch.set_num_threads(n)
        probe[n] = step_seconds(probe_model, batches, train_cfg, clock)
    threads = min(probe, key=probe.get)
    torch.set_num_threads(threads)
    del probe_model
    per_step = 1.1 * probe[threads]  # a long run on a shared machine is slower than the probe
    max_steps = max(1, int(args.budget / per_step))
    spe = batches.steps_per_epoch
    print(f"{args.clock} s/step by threads: { {n: round(t, 3) for n, t in probe.items()} }; {threads} thread(s); "
          f"{max_steps} steps of {train_cfg.batch_size} x {train_cfg.seq_len} ({max_steps / spe:.2f} epochs) "
          f"for a {args.budget:.0f} s {args.clock} budget", flush=True)

    # -- train --------------------------------------------------------------------------------
    eval_every = max(1, max_steps // 4)
    run_settings = {"max_steps": max_steps, "warmup_steps": min(train_cfg.warmup_steps, max_steps // 10),
                    "eval_every": eval_every, "save_every": 0, "eval_batches": 10,
                    "log_every": max(1, max_steps // 20), "num_threads": threads}
    train_cfg = from_dict(TrainConfig, {**config["train"], **run_settings}, "train")
    seed_everything(train_cfg.seed)
    model = build_model(config, tokenizer)
    obj = model.objective
    train_spans = obj.example_spans(corpora["train"], train_cfg.seq_len)
    valid_spans = obj.example_spans(corpora["valid"], train_cfg.seq_len)
    init_from_corpus(model.backbone, obj, corpora["train"], train_spans, train_cfg)
    common = dict(seq_len=train_cfg.seq_len, batch_size=train_cfg.batch_size, seed=train_cfg.seed)
    source = PretrainBatches(corpora["train"], obj, train_spans, **common)
    valid_source = PretrainBatches(corpora["valid"], obj, valid_spans, **common)
    t0, c0 = time.perf_counter(), clock()

    def guard(trainer, step):
        if clock() - c0 > 1.05 * args.budget:
            raise BudgetExceeded

    trainer = Trainer(model, source, train_cfg, root / "run", valid_source, {"config": config, "tokenizer": tokenizer},
                      callbacks=[guard])
    stop = "schedule finished"
    try:
        trainer.fit()
    except BudgetExceeded:
        stop = f"budget reached at step {trainer.step} of {max_steps}"
    train_wall, train_clock = time.perf_counter() - t0, clock() - c0
    print(f"trained {trainer.step} steps ({trainer.step / spe:.2f} epochs) in {train_wall:.0f} s wall, "
          f"{train_clock:.0f} s {args.clock}; {stop}", flush=True)

    # -- evaluate -----------------------------------------------------------------------------
    result = {"benchmark": "elmo_ptb", "preset": args.preset, "overrides": list(args.overrides)}
    for split in ("valid", "test"):
        result[split] = perplexities(trainer.model, corpora[split], eval_len, 64)
        r = result[split]
        print(f"PTB {split}: forward ppl {r['forward_ppl']:.1f}, backward ppl {r['backward_ppl']:.1f}, "
              f"mean (exp of the mean loss) {r['mean_ppl']:.1f} over {r['predictions']:,} predictions per direction",
              flush=True)
    print("published unidirectional LSTMs (test): Zaremba et al. 2014 small 114.5, medium 82.7; "
          "TensorFlow tutorial re-runs small 115.9, medium 82.1", flush=True)
    n_params = sum(p.numel() for p in trainer.model.parameters())
    result.update({
        "parameters": n_params,
        "vocab_size": tokenizer.vocab_size,
        "steps": trainer.step,
        "max_steps": max_steps,
        "epochs": round(trainer.step / spe, 3),
        "stop": stop,
        "batch_size": train_cfg.batch_size,
        "seq_len": train_cfg.seq_len,
        "eval_len": eval_len,
        "lr": train_cfg.lr,
        "threads": threads,
        "clock": args.clock,
        "budget_seconds": args.budget,
        "probe_seconds_per_step": {str(n): round(t, 4) for n, t in probe.items()},
        "train_seconds_wall": round(train_wall, 1),
        f"train_seconds_{args.clock}": round(train_clock, 1),
        "total_seconds_wall": round(time.perf_counter() - t_start, 1),
        "total_seconds_cpu": round(time.process_time() - c_start, 1),
        "reference": REFERENCE,
    })
    if not args.out:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
