"""Bengio et al. (2003) on Brown: NNLM vs interpolated modified Kneser-Ney trigram.

Fetches the ``brown`` recipe (first 800k words train, next 200k validation, the rest test),
builds the vocabulary from the training part (words seen >= 3 times; the rest -> <unk>),
fits the KN trigram, trains the NNLM with the shared Trainer (early stopping on validation),
and reports test perplexities of KN, the NNLM, and their mixture
``lam * P_nnlm + (1 - lam) * P_kn`` with ``lam`` chosen on validation (the paper's best Brown
result mixes the NNLM with the trigram).  The last line printed is a JSON object.

    PTMKIT_HOME=/work/cache python benchmarks/nnlm_vs_kn.py [--minutes 15] [--paper]
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
from ptmkit.static.nnlm import NGramWindows, NNLMConfig, build_lm_vocab, encode_lm, train_nnlm
from ptmkit.train.config import TrainConfig


def mix_ppl(lp_a: np.ndarray, lp_b: np.ndarray, lam: float) -> float:
    return math.exp(-float(np.mean(np.log(lam * np.exp(lp_a) + (1 - lam) * np.exp(lp_b)))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=14.0, help="NNLM training budget (wall clock)")
    ap.add_argument("--paper", action="store_true", help="Bengio et al.'s MLP1 (n=5, m=60, h=50, direct)")
    ap.add_argument("--order", type=int, default=None)
    ap.add_argument("--dim", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--run-dir", default=None)
    args = ap.parse_args()

    t_start = time.perf_counter()
    d = fetch("brown")
    vocab = build_lm_vocab(d / "train.txt", min_count=3)
    train, valid, test = (encode_lm(d / f"{p}.txt", vocab) for p in ("train", "valid", "test"))
    print(f"vocabulary {len(vocab)} (words seen >= 3 times + <unk>, </s>); train {len(train[0])} words")

    t0 = time.perf_counter()
    kn = KneserNeyTrigram(len(vocab), vocab.eos).fit(*train)
    kn_valid_lp = kn.sentence_log_probs(*valid)
    kn_test_lp = kn.sentence_log_probs(*test)
    kn_seconds = time.perf_counter() - t0
    kn_test = math.exp(-kn_test_lp.mean())
    print(f"KN trigram: valid ppl {math.exp(-kn_valid_lp.mean()):.1f}, test ppl {kn_test:.1f} ({kn_seconds:.1f}s)")

    cfg = NNLMConfig.paper() if args.paper else NNLMConfig()
    over = {k: v for k, v in {"order": args.order, "dim": args.dim, "hidden": args.hidden}.items() if v is not None}
    cfg = NNLMConfig(**{**cfg.__dict__, **over})
    # Measure the step time, then size the run (max_steps) to the wall-clock budget.
    from ptmkit.static.nnlm import NNLM

    probe_src = NGramWindows(*train, vocab, cfg.order, args.batch_size)
    probe = NNLM(len(vocab), cfg)
    opt = torch.optim.AdamW(probe.parameters(), lr=args.lr)
    tp = time.perf_counter()
    for s in range(20):
        out = probe(probe_src(0, s))
        out.loss.backward()
        opt.step()
        opt.zero_grad()
    step_s = (time.perf_counter() - tp) / 20
    steps_per_epoch = probe_src.steps_per_epoch
    eval_every = max(100, steps_per_epoch // 2)
    # A validation pass (200k words, forward only) costs about 1/12 of an epoch of training steps;
    # with two per epoch the budget buys about budget / (1.2 * step time) steps.
    max_steps = int(args.minutes * 60 / (1.2 * step_s))
    max_steps = max(eval_every, max_steps)
    print(f"NNLM {cfg}: {step_s * 1000:.1f} ms/step, {steps_per_epoch} steps/epoch -> {max_steps} steps")
    tcfg = TrainConfig(batch_size=args.batch_size, lr=args.lr, max_steps=max_steps, eval_every=eval_every,
                       eval_batches=10**6, schedule="linear", warmup_steps=200, weight_decay=0.0,
                       clip_norm=1.0, device=args.device, log_every=200)
    t0 = time.perf_counter()
    model, stats = train_nnlm(train, valid, vocab, cfg, tcfg, run_dir=args.run_dir, patience=2)
    nnlm_seconds = time.perf_counter() - t0
    nn_valid_lp = model.log_probs(NGramWindows(*valid, vocab, cfg.order, args.batch_size))
    nn_test_lp = model.log_probs(NGramWindows(*test, vocab, cfg.order, args.batch_size))
    assert nn_test_lp.shape == kn_test_lp.shape
    nn_test = math.exp(-nn_test_lp.mean())
    lams = np.linspace(0.05, 0.95, 19)
    lam = float(lams[int(np.argmin([mix_ppl(nn_valid_lp, kn_valid_lp, l) for l in lams]))])
    mix_test = mix_ppl(nn_test_lp, kn_test_lp, lam)
    print(f"NNLM: valid ppl {math.exp(-nn_valid_lp.mean()):.1f}, test ppl {nn_test:.1f} ({nnlm_seconds:.0f}s)")
    print(f"mixture (lambda={lam:.2f} on validation): test ppl {mix_test:.1f}")
    result = {
        "benchmark": "nnlm_vs_kn_brown",
        "vocab_size": len(vocab),
        "train_words": int(len(train[0])),
        "test_predictions": int(kn_test_lp.shape[0]),
        "kn_trigram_test_ppl": round(kn_test, 2),
        "nnlm_test_ppl": round(nn_test, 2),
        "mixture_test_ppl": round(mix_test, 2),
        "mixture_lambda": lam,
        "nnlm_vs_kn_relative": round(nn_test / kn_test - 1, 4),
        "mixture_vs_kn_relative": round(mix_test / kn_test - 1, 4),
        "nnlm_config": cfg.__dict__,
        "nnlm_steps": stats["steps"],
        "nnlm_epochs": round(stats["epochs"], 2),
        "nnlm_best_step": stats["best_step"],
        "nnlm_seconds": round(nnlm_seconds, 1),
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
