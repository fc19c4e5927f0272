"""MASS's fragment length: does masking half of each sentence (Song et al. 2019, section 4.2 /
Figure 5: ``k ~ 50 %`` of the sentence is best) pre-train better than less or more?

``mass-tiny`` is pre-trained on PTB train at each ``--ratios`` value of ``objective.span_ratio``
with the same compute: the same ``--budget`` seconds each (the schedule sized to end within it,
see ``ptb_budget.py``; a longer fragment makes each step a little dearer, so it gets fewer steps),
once per pre-training seed (``--seeds N``: seeds 1..N).  Every model is then measured on two
tasks that do not depend on the ratio it was trained at:

(i) fragment perplexity on the whole of PTB test at FIXED evaluation ratios (``--eval-ratios``,
    default 0.25, 0.5 and 0.75: a training x evaluation matrix): every test sentence has one
    fragment of ``round(r * m)`` tokens masked, all of them ``[MASK]`` (no random or kept tokens,
    so nothing of the answer is visible), at the same places for every model (drawn from
    ``--eval-seed``); the decoder predicts it at its positions; perplexity = exp(mean token
    cross-entropy over all fragment tokens).  Every model uses the same tokenizer (the preset's
    BPE trained on PTB train), so the perplexities are per the same tokens.

(ii) MR sentiment classification from the ENCODER alone: the pre-trained encoder half (its
    embeddings and layers; the decoder is dropped) with mean pooling and a linear head, fine-tuned
    on ``--mr-train-size`` MR training sentences (a fixed subset), ``--mr-seeds`` fine-tuning seeds,
    the peak LR chosen on MR dev from ``--mr-lrs``, scored on MR test.  The same encoder never
    pre-trained (``untrained``) is the reference row.

    python benchmarks/mass_span_fraction.py --ratios 0.25 0.5 0.75 --budget 240 --seeds 2
        [--eval-ratios 0.25 0.5 0.75] [--mr-train-size 500] [--mr-seeds 1 2] [--mr-lrs 3e-4 1e-3]
        [--no-mr] [--clock wall|cpu] [--threads 1] [--out DIR] [--quick] [SECTION.KEY=VALUE ...]

Prints a Markdown table (mean ± sd over pre-training seeds; MR over every pre-training x
fine-tuning seed); the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ptb_budget import pretrain_for_budget, ptb_corpora, raw_preset  # noqa: E402

from ptmkit.build import build_model, resolve_config  # noqa: E402
from ptmkit.encoders.base import Encoder, EncoderOutput  # noqa: E402
from ptmkit.objectives.mass import MASS, MASSConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

QUICK = ["model.hidden_size=32", "model.intermediate_size=64", "model.num_heads=2", "train.batch_size=8",
         "train.seq_len=64", "tokenizer.vocab_size=500"]


class EncoderHalf(Encoder):
    """The encoder half of a pre-trained ``encoder_decoder`` as a plain encoder (the decoder is
    removed): ``forward`` = :meth:`EncoderDecoder.encode`, depth = the encoder's layers."""

    name = "encoder_decoder_encoder"

    def __init__(self, full: Any) -> None:
        super().__init__(full.config)
        full = copy.deepcopy(full)
        del full.decoder
        self.full = full

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, attn_mask=None,
                causal: bool = False, output_hidden_states: bool = False, **_: Any) -> EncoderOutput:
        return self.full.encode(input_ids, attention_mask, attn_mask, causal, output_hidden_states)

    def input_embeddings(self):
        return self.full.word_embeddings

    @property
    def output_size(self) -> int:
        return self.config.hidden_size

    @property
    def num_layers(self) -> int:
        return self.config.encoder_layers

    def layer_index(self, name: str) -> int:
        return min(self.full.layer_index(name.removeprefix("full.")), self.num_layers + 1)


@torch.no_grad()
def fragment_perplexity(model, tokenizer, corpus, ratio: float, seq_len: int, seed: int, batch_size: int = 128,
                        limit: int | None = None) -> dict:
    """Perplexity of the decoder's fragment predictions over every example of ``corpus`` (the
    first ``limit``) at ``ratio`` (fragments all [MASK], placed by ``seed``; the same for every model)."""
    ev = MASS(MASSConfig(span_ratio=ratio), model.backbone, tokenizer)  # builds the batches only
    spans = ev.example_spans(corpus, seq_len)[:limit]
    rng = np.random.default_rng(seed)
    keys = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_position_ids", "labels")
    total, n = 0.0, 0
    model.eval()
    device = next(model.parameters()).device
    for i in range(0, len(spans), batch_size):
        x, lengths = MASS.gather(corpus, spans[i : i + batch_size])
        arrays = ev.build(x, lengths, rng, corruption=False)
        batch = {k: torch.from_numpy(np.ascontiguousarray(arrays[k])).to(device) for k in keys}
        out = model.objective(model.backbone, batch)
        total += float(out.loss) * out.n_predictions
        n += out.n_predictions
    return {"ppl": math.exp(total / n), "predictions": n}


def mr_accuracy(pre: Pretrained, task, out: Path, cfg, seeds: list[int], lrs: list[float]) -> list[dict]:
    from ptmkit.workflows.finetune import run_seeds

    runs = run_seeds(pre, task, out, cfg, ["pretrained"], seeds, lrs=lrs, progress=False)
    return [{"seed": r["seed"], "test_accuracy": r["test"]["accuracy"], "dev_accuracy": r["dev"]["accuracy"],
             "lr": r["config"]["lr"]} for r in runs]


def mean_sd(values: list[float]) -> dict[str, Any]:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "sd": float(a.std(ddof=1)) if len(a) > 1 else 0.0, "values": a.tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ratios", nargs="+", type=float, default=[0.25, 0.5, 0.75], help="training span_ratio values")
    ap.add_argument("--budget", type=float, required=True, help="pre-training seconds per model (see --clock)")
    ap.add_argument("--seeds", type=int, default=1, help="pre-training seeds per ratio (1..N)")
    ap.add_argument("--eval-ratios", nargs="+", type=float, default=[0.25, 0.5, 0.75])
    ap.add_argument("--eval-seed", type=int, default=0)
    ap.add_argument("--mr-train-size", type=int, default=500)
    ap.add_argument("--mr-seeds", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--mr-lrs", nargs="+", type=float, default=[3e-4, 1e-3])
    ap.add_argument("--mr-epochs", type=int, default=10)
    ap.add_argument("--no-mr", action="store_true", help="skip the MR fine-tuning (ii)")
    ap.add_argument("--preset", default="mass-tiny")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="run directories (default: a temporary one, removed at the end)")
    ap.add_argument("--quick", action="store_true", help="tiny models and MR runs (checks every stage; no result)")
    ap.add_argument("overrides", nargs="*", help="SECTION.KEY=VALUE for every model, e.g. train.lr=1e-3")
    args = ap.parse_args()

    from ptmkit.data.tasks import load_task
    from ptmkit.tasks.finetune import FinetuneConfig

    t_start = time.perf_counter()
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="mass_span_fraction_"))
    overrides = (QUICK if args.quick else []) + list(args.overrides)
    raw = raw_preset(args.preset, overrides)
    tokenizer, corpora = ptb_corpora(raw, root)
    limit = 200 if args.quick else None  # quick: the first 200 PTB test sentences exercise the evaluation
    ft_cfg = FinetuneConfig(epochs=1 if args.quick else args.mr_epochs, lr=args.mr_lrs[0], batch_size=16, max_seq_len=64,
                            warmup=0.1, pooling="mean", num_threads=args.threads)
    task = None if args.no_mr else load_task("mr").with_train_size(32 if args.quick else args.mr_train_size, seed=0)

    def evaluate(model, config, tag: str) -> dict[str, Any]:
        seq_len = config["train"]["seq_len"]
        res = {"ppl": {str(r): fragment_perplexity(model, tokenizer, corpora["test"], r, seq_len, args.eval_seed,
                                                   limit=limit)["ppl"]
                       for r in args.eval_ratios}}
        if task is not None:
            pre = Pretrained(config=config, tokenizer=tokenizer, backbone=EncoderHalf(model.backbone), objective=None)
            res["mr"] = mr_accuracy(pre, task, root / "mr" / tag, ft_cfg, list(args.mr_seeds), list(args.mr_lrs))
        return res

    runs: list[dict[str, Any]] = []
    for seed in range(1, args.seeds + 1):  # seeds outermost: a partial run still compares the ratios
        for ratio in args.ratios:
            over = overrides + [f"objective.span_ratio={ratio}"]
            r_raw = raw_preset(args.preset, over)
            print(f"== span_ratio {ratio}, seed {seed}: pre-training for {args.budget:.0f} s ({args.clock})", flush=True)
            model, info = pretrain_for_budget(r_raw, over, tokenizer, corpora, args.budget,
                                              root / f"ratio-{ratio:g}-seed{seed}", args.clock, args.threads, seed=seed)
            config = resolve_config(r_raw, tokenizer, over)
            res = evaluate(model, config, f"ratio-{ratio:g}-seed{seed}")
            print(f"   {info['steps']} steps, {info['stop']}; ppl " + ", ".join(f"@{k} {v:.1f}" for k, v in res["ppl"].items())
                  + ("" if "mr" not in res else "; MR test acc " + " ".join(f"{m['test_accuracy']:.3f}" for m in res["mr"])),
                  flush=True)
            runs.append({"ratio": ratio, "seed": seed, **info, **res})
    baseline = None
    if task is not None:  # the encoder before any pre-training
        config = resolve_config(raw, tokenizer, overrides)
        torch.manual_seed(1)
        fresh = build_model(config, tokenizer)
        baseline = evaluate(fresh, config, "untrained")
        print("== untrained encoder: MR test acc " + " ".join(f"{m['test_accuracy']:.3f}" for m in baseline["mr"]), flush=True)

    summary: dict[str, Any] = {}
    for ratio in args.ratios:
        rows = [r for r in runs if r["ratio"] == ratio]
        entry = {"steps": [r["steps"] for r in rows],
                 "ppl": {str(e): mean_sd([r["ppl"][str(e)] for r in rows]) for e in args.eval_ratios}}
        if task is not None:
            entry["mr_test_accuracy"] = mean_sd([m["test_accuracy"] for r in rows for m in r["mr"]])
        summary[str(ratio)] = entry
    if baseline is not None:
        summary["untrained"] = {"steps": [0], "ppl": {str(e): mean_sd([baseline["ppl"][str(e)]]) for e in args.eval_ratios},
                                "mr_test_accuracy": mean_sd([m["test_accuracy"] for m in baseline["mr"]])}

    head = ["training span_ratio", "steps"] + [f"PTB test fragment ppl @ {e:g}" for e in args.eval_ratios]
    if task is not None:
        head.append(f"MR test acc ({len(task.train)} train)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, e in summary.items():
        cells = [name, "/".join(str(s) for s in e["steps"])]
        cells += [f"{e['ppl'][str(r)]['mean']:.1f} ± {e['ppl'][str(r)]['sd']:.1f}" for r in args.eval_ratios]
        if task is not None:
            cells.append(f"{e['mr_test_accuracy']['mean']:.3f} ± {e['mr_test_accuracy']['sd']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    print("\n" + "\n".join(lines) + "\n")
    if not args.out:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({
        "benchmark": "mass_span_fraction", "preset": args.preset, "ratios": args.ratios, "eval_ratios": args.eval_ratios,
        "budget_seconds": args.budget, "clock": args.clock, "threads": args.threads, "seeds": args.seeds,
        "mr": None if task is None else {"train_size": len(task.train), "seeds": args.mr_seeds, "lrs": args.mr_lrs,
                                         "epochs": ft_cfg.epochs},
        "quick": args.quick, "overrides": overrides, "summary": summary, "runs": runs,
        "total_seconds_wall": round(time.perf_counter() - t_start, 1),
    }))


if __name__ == "__main__":
    sys.exit(main())
