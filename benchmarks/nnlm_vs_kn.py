"""Bengio et al. (2003) on Brown: NNLM vs interpolated modified Kneser-Ney trigram.

Fetches the ``brown`` recipe (first 800k words train, next 200k validation, the rest test),
builds the vocabulary from the training part (words seen >= 3 times; the rest -> <unk>),
fits the KN trigram, trains the NNLM with the shared Trainer (AdamW, linear decay over
``--epochs`` epochs, validation after every epoch, best weights kept), and reports test
perplexities of KN, the NNLM, and their mixture ``lam * P_nnlm + (1 - lam) * P_kn`` with
``lam`` chosen on validation (the paper's best Brown result mixes the NNLM with the trigram).
The last line printed is a JSON object.

    PTMKIT_HOME=/work/cache python benchmarks/nnlm_vs_kn.py [--epochs 5] [--minutes 15] [--threads auto]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

from ptmkit.data.sources.base import fetch
from ptmkit.static.kneser_ney import KneserNeyTrigram
from ptmkit.static.nnlm import (
    NNLM,
    NGramWindows,
    NNLMConfig,
    build_lm_vocab,
    default_train_config,
    encode_lm,
    train_nnlm,
)


def mix_ppl(lp_a: np.ndarray, lp_b: np.ndarray, lam: float) -> float:
    """Perplexity of ``lam * P_a + (1 - lam) * P_b`` from per-token natural-log probabilities."""
    return math.exp(-float(np.mean(np.logaddexp(np.log(lam) + lp_a, np.log1p(-lam) + lp_b))))


def step_seconds(model: NNLM, source: NGramWindows, steps: int = 4) -> float:
    """Wall-clock seconds of one AdamW training step (after one warm-up step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for s in range(steps + 1):
        if s == 1:
            t0 = time.perf_counter()
        model(source(0, s)).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps


def pick_threads(requested: str, vocab_size: int, cfg: NNLMConfig, source: NGramWindows) -> tuple[int, dict[int, float]]:
    """Seconds per training step by thread count, and the count to use.  ``auto`` times 1 and 2
    threads and keeps the faster: on a machine shared with other jobs, two OpenMP threads wait for
    each other at every barrier and can be 10x slower than one."""
    counts = (2, 1) if requested == "auto" else (int(requested),)
    probe = NNLM(vocab_size, cfg)
    times = {}
    for n in counts:
        torch.set_num_threads(n)
        times[n] = step_seconds(probe, source)
    return min(times, key=times.get), times


class PrintEval:
    """Trainer callback: print each validation perplexity as it is computed."""

    def __init__(self) -> None:
        self.seen = -1
        self.t0 = time.perf_counter()

    def __call__(self, trainer, step: int) -> None:
        ev = trainer.last_eval
        if ev and ev.get("step") == step and step != self.seen:
            self.seen = step
            from tqdm.auto import tqdm

            tqdm.write(f"  step {step}: validation ppl {ev['ppl']:.1f} ({time.perf_counter() - self.t0:.0f}s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=float, default=5.0, help="training epochs (the LR decays linearly to 0)")
    ap.add_argument("--minutes", type=float, default=15.0, help="cap on NNLM training time (wall clock; 0: none)")
    ap.add_argument("--paper", action="store_true", help="Bengio et al.'s MLP1 (n=5, m=60, h=50, direct)")
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--evals-per-epoch", type=int, default=1)
    ap.add_argument("--patience", type=int, default=2)
    ap.add_argument("--threads", default="auto", help="torch CPU threads: a number or 'auto' (the faster of 1 and 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-dir", default=None)
    args = ap.parse_args()

    t_start = time.perf_counter()
    c_start = time.process_time()
    d = fetch("brown")
    vocab = build_lm_vocab(d / "train.txt", min_count=3)
    train, valid, test = (encode_lm(d / f"{p}.txt", vocab) for p in ("train", "valid", "test"))
    print(f"vocabulary {len(vocab)} (words seen >= 3 times + <unk>, </s>); "
          f"words: train {len(train[0])}, valid {len(valid[0])}, test {len(test[0])}")

    t0 = time.perf_counter()
    kn = KneserNeyTrigram(len(vocab), vocab.eos).fit(*train)
    kn_valid_lp = kn.sentence_log_probs(*valid)
    kn_test_lp = kn.sentence_log_probs(*test)
    kn_seconds = time.perf_counter() - t0
    kn_test = math.exp(-kn_test_lp.mean())
    print(f"KN trigram: valid ppl {math.exp(-kn_valid_lp.mean()):.1f}, test ppl {kn_test:.1f} ({kn_seconds:.1f}s)")

    if args.paper:
        cfg = NNLMConfig.paper()
    else:
        cfg = NNLMConfig(order=args.order, dim=args.dim, hidden=args.hidden, direct=args.direct, dropout=args.dropout)
    source = NGramWindows(*train, vocab, cfg.order, args.batch_size, seed=args.seed)
    threads, probe = pick_threads(args.threads, len(vocab), cfg, source)
    torch.set_num_threads(threads)
    spe = source.steps_per_epoch
    max_steps = max(1, round(args.epochs * spe))
    eval_every = max(1, spe // args.evals_per_epoch)
    # Size the run so that the LR schedule ends within the budget: each validation pass (200k
    # windows, forward only) costs about 8% of an epoch of training steps, and the few probe
    # steps underestimate the time of a long run on a busy machine (hence the 1.25).
    per_step = 1.25 * probe[threads] * (1 + 0.08 * args.evals_per_epoch)
    fit = int(args.minutes * 60 / per_step) if args.minutes > 0 else max_steps
    if fit < max_steps:
        print(f"{args.epochs} epochs would take ~{max_steps * probe[threads] / 60:.0f} min at "
              f"{probe[threads] * 1000:.0f} ms/step; training {fit / spe:.2f} epochs to fit --minutes {args.minutes}")
        max_steps = max(1, fit)
    ms = {n: round(t * 1000, 1) for n, t in probe.items()}
    print(f"NNLM {cfg}: {len(source)} windows, {spe} steps/epoch of {args.batch_size}, {max_steps} steps, "
          f"{threads} thread(s) (ms/step by threads: {ms})")
    tcfg = default_train_config(args.batch_size, args.lr, max_steps, eval_every, weight_decay=args.weight_decay,
                                num_threads=threads, seed=args.seed, log_every=max(1, spe // 4))
    printer = PrintEval()
    t0 = printer.t0 = time.perf_counter()
    c0 = time.process_time()
    model, stats = train_nnlm(train, valid, vocab, cfg, tcfg, run_dir=args.run_dir, patience=args.patience,
                              max_seconds=args.minutes * 60 if args.minutes > 0 else None, callbacks=(printer,))
    nnlm_seconds = time.perf_counter() - t0
    nnlm_cpu = time.process_time() - c0
    nn_valid_lp = model.log_probs(NGramWindows(*valid, vocab, cfg.order, args.batch_size))
    nn_test_lp = model.log_probs(NGramWindows(*test, vocab, cfg.order, args.batch_size))
    assert nn_test_lp.shape == kn_test_lp.shape  # the same predictions: words and </s>
    nn_valid, nn_test = math.exp(-nn_valid_lp.mean()), math.exp(-nn_test_lp.mean())
    lams = np.round(np.linspace(0.05, 0.95, 19), 2)
    lam = float(lams[int(np.argmin([mix_ppl(nn_valid_lp, kn_valid_lp, l) for l in lams]))])
    mix_test = mix_ppl(nn_test_lp, kn_test_lp, lam)
    history = ", ".join(f"{s}: {math.exp(l):.1f}" for s, l in stats["history"])
    print(f"validation ppl by step: {history}")
    print(f"NNLM: {stats['steps']} steps ({stats['epochs']:.2f} epochs, stop: {stats['stop_reason']}, best step "
          f"{stats['best_step']}), {nnlm_seconds:.0f}s wall, {nnlm_cpu:.0f}s CPU")
    print(f"test perplexity: KN trigram {kn_test:.1f} | NNLM {nn_test:.1f} ({nn_test / kn_test - 1:+.1%} vs KN) | "
          f"mixture lambda={lam:.2f} {mix_test:.1f} ({mix_test / kn_test - 1:+.1%} vs KN)")
    total = time.perf_counter() - t_start
    print(f"total wall time {total / 60:.1f} min")
    result = {
        "benchmark": "nnlm_vs_kn_brown",
        "vocab_size": len(vocab),
        "train_words": int(len(train[0])),
        "valid_words": int(len(valid[0])),
        "test_words": int(len(test[0])),
        "test_predictions": int(kn_test_lp.shape[0]),
        "kn_trigram_valid_ppl": round(math.exp(-kn_valid_lp.mean()), 2),
        "kn_trigram_test_ppl": round(kn_test, 2),
        "nnlm_valid_ppl": round(nn_valid, 2),
        "nnlm_test_ppl": round(nn_test, 2),
        "nnlm_vs_kn_relative": round(nn_test / kn_test - 1, 4),
        "mixture_lambda": lam,
        "mixture_test_ppl": round(mix_test, 2),
        "mixture_vs_kn_relative": round(mix_test / kn_test - 1, 4),
        "nnlm_config": cfg.__dict__,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "threads": threads,
        "nnlm_steps": stats["steps"],
        "nnlm_epochs": round(stats["epochs"], 2),
        "nnlm_best_step": stats["best_step"],
        "nnlm_stop_reason": stats["stop_reason"],
        "kn_seconds": round(kn_seconds, 1),
        "nnlm_seconds": round(nnlm_seconds, 1),
        "nnlm_cpu_seconds": round(nnlm_cpu, 1),
        "total_seconds": round(total, 1),
        "total_cpu_seconds": round(time.process_time() - c_start, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
