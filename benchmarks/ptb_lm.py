"""Left-to-right language models on the Penn Treebank at the same CPU budget: per-word perplexity.

Generalises ``elmo_ptb.py`` to every preset whose objective can score text left to right
(``objective.lm_log_probs(backbone, input_ids [B, T]) -> [B, T - 1]`` = ``log p(x_t | x_<t)``):
``awd-lstm-tiny`` (AWD-LSTM LM), ``elmo-tiny`` (its forward LM), ``gpt2-tiny`` (causal LM),
``xlnet-tiny`` (when that preset exists).  A preset that does not exist, or whose objective cannot
score left to right, is skipped with a message.

Same preparation as ``elmo_ptb.py``: the ``ptb`` recipe (Mikolov's split, 10k words, ``<unk>``),
one **word-level** tokenizer trained on PTB train (every word kept) for every preset, whatever
its own tokenizer section says, so that a token is a PTB word and the perplexities are per PTB
word and comparable (with the end-of-sentence separator counted as a word, as usual).  Same
budget logic: a few probe steps give the seconds per step (the faster of 1 and 2 torch threads
with ``--threads auto``); the number of steps is sized so that the preset's LR schedule ends
within ``--budget`` seconds (``--clock cpu``: process CPU seconds; ``wall``: elapsed), and a
callback stops a run that goes past the budget anyway.

Evaluation: the whole PTB valid and test streams (a separator after every sentence) cut into
consecutive blocks of ``--eval-len`` + 1 tokens overlapping by one (capped by a Transformer's
``max_position``); each block is scored from an empty context (zero LSTM states), so every stream
token but the first is predicted exactly once: ``ppl = exp(-mean log p)`` over ``tokens - 1``
predictions.  The published figures beside were obtained with far longer training and hidden
states carried across the whole text (a longer context than a block).

    python benchmarks/ptb_lm.py --budget 600 [--presets awd-lstm-tiny elmo-tiny gpt2-tiny xlnet-tiny]
        [--clock cpu|wall] [--threads auto|1|2] [--eval-len 70] [--out DIR]
        [SECTION.KEY=VALUE | PRESET:SECTION.KEY=VALUE ...]

Prints a Markdown table, then one JSON object as the last line.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from elmo_ptb import REFERENCE as LSTM_REFERENCE  # noqa: E402
from elmo_ptb import BudgetExceeded, make_clock, step_seconds  # noqa: E402

from ptmkit.build import build_model, resolve_config  # noqa: E402
from ptmkit.config import apply_overrides, from_dict  # noqa: E402
from ptmkit.data.batches import PretrainBatches  # noqa: E402
from ptmkit.data.corpus import Corpus  # noqa: E402
from ptmkit.data.prepare import prepare  # noqa: E402
from ptmkit.data.sources.base import fetch  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.objectives.stream import SentenceStream  # noqa: E402
from ptmkit.presets import load_preset  # noqa: E402
from ptmkit.tokenization import Tokenizer  # noqa: E402
from ptmkit.train.config import TrainConfig  # noqa: E402
from ptmkit.train.trainer import Trainer, seed_everything  # noqa: E402
from ptmkit.workflows.pretrain import init_from_corpus  # noqa: E402

DEFAULT_PRESETS = ("awd-lstm-tiny", "elmo-tiny", "gpt2-tiny", "xlnet-tiny")
WORD_TOKENIZER = {"kind": "word", "vocab_size": 16000, "lowercase": False, "min_frequency": 1}
REFERENCE = {
    "merity2018_awd_lstm": {"valid_ppl": 60.0, "test_ppl": 58.8, "size": "AWD-LSTM, 24M parameters, 3 x 1150, ASGD, 500+ epochs"},
    **LSTM_REFERENCE,
}


def split_overrides(items: list[str], presets: list[str]) -> dict[str, list[str]]:
    """``SECTION.KEY=VALUE`` applies to every preset, ``PRESET:SECTION.KEY=VALUE`` to one."""
    out: dict[str, list[str]] = {p: [] for p in presets}
    for item in items:
        head, sep, rest = item.partition(":")
        if sep and head in out and "=" in rest:
            out[head].append(rest)
        else:
            for p in presets:
                out[p].append(item)
    return out


@torch.no_grad()
def perplexity(model, corpus: Corpus, stream: SentenceStream, eval_len: int, batch_size: int = 64) -> dict[str, float]:
    """``exp(-mean log p(x_t | x_<t))`` over every stream token but the first (see the module docstring)."""
    total = stream.length(corpus)
    starts = np.arange(0, total - 1, eval_len, dtype=np.int64)
    spans = np.stack([starts, np.minimum(starts + eval_len + 1, total)], axis=1)
    full = spans[spans[:, 1] - spans[:, 0] == eval_len + 1]
    rest = spans[spans[:, 1] - spans[:, 0] != eval_len + 1]
    model.eval()
    device = next(model.parameters()).device
    log_prob, n = 0.0, 0
    for group, size in ((full, batch_size), (rest, 1)):
        for i in range(0, len(group), size):
            seq, _ = stream.read(corpus, group[i : i + size])
            ids = torch.from_numpy(seq).to(device)
            lp = model.objective.lm_log_probs(model.backbone, ids)
            log_prob += float(lp.double().sum())
            n += lp.numel()
    assert n == total - 1, (n, total)
    return {"ppl": round(math.exp(-log_prob / n), 2), "predictions": n}


def run_preset(name, overrides, tokenizer, corpora, args, clock) -> dict:
    """Train ``name`` on PTB train within the budget; its valid / test perplexities."""
    try:
        raw = apply_overrides(load_preset(name), overrides)
    except PtmError:
        return {"preset": name, "skipped": "no such preset"}
    raw["tokenizer"] = dict(WORD_TOKENIZER)
    config = resolve_config(raw, tokenizer, overrides)
    train_cfg = from_dict(TrainConfig, config["train"], "train")
    seed_everything(train_cfg.seed)
    probe_model = build_model(config, tokenizer)
    if not hasattr(probe_model.objective, "lm_log_probs"):
        return {"preset": name, "skipped": f"objective {config['objective']['name']!r} cannot score text left to right"}
    spans = probe_model.objective.example_spans(corpora["train"], train_cfg.seq_len)
    batches = PretrainBatches(corpora["train"], probe_model.objective, spans, train_cfg.seq_len, train_cfg.batch_size, train_cfg.seed)
    counts = (2, 1) if args.threads == "auto" else (int(args.threads),)
    probe = {}
    for n in counts:
        torch.set_num_threads(n)
        probe[n] = step_seconds(probe_model, batches, train_cfg, clock)
    threads = min(probe, key=probe.get)
    torch.set_num_threads(threads)
    del probe_model
    max_steps = max(1, int(args.budget / (1.1 * probe[threads])))  # a long run is slower than the probe
    spe = batches.steps_per_epoch
    print(f"\n== {name}: {args.clock} s/step by threads { {n: round(t, 3) for n, t in probe.items()} }; "
          f"{max_steps} steps of {train_cfg.batch_size} x {train_cfg.seq_len} ({max_steps / spe:.2f} epochs)", flush=True)

    settings = {"max_steps": max_steps, "warmup_steps": min(train_cfg.warmup_steps, max_steps // 10),
                "eval_every": max(1, max_steps // 4), "save_every": 0, "eval_batches": 10,
                "log_every": max(1, max_steps // 20), "num_threads": threads}
    train_cfg = from_dict(TrainConfig, {**config["train"], **settings}, "train")
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

    run_dir = args.root / name
    trainer = Trainer(model, source, train_cfg, run_dir, valid_source, {"config": config, "tokenizer": tokenizer}, callbacks=[guard])
    stop = "schedule finished"
    try:
        trainer.fit()
    except BudgetExceeded:
        stop = f"budget reached at step {trainer.step} of {max_steps}"
    train_wall, train_clock = time.perf_counter() - t0, clock() - c0

    eval_len = args.eval_len
    max_position = getattr(model.backbone.config, "max_position", None)
    if max_position is not None and getattr(model.backbone.config, "positions", "absolute") == "absolute":
        eval_len = min(eval_len, max_position - 1)
    eos = getattr(tokenizer, "eos_id", None)
    stream = SentenceStream(True, eos if eos is not None else tokenizer.sep_id, tokenizer.pad_id)
    result = {"preset": name, "objective": config["objective"]["name"],
              "parameters": sum(p.numel() for p in trainer.model.parameters()),
              "steps": trainer.step, "max_steps": max_steps, "epochs": round(trainer.step / spe, 3), "stop": stop,
              "batch_size": train_cfg.batch_size, "seq_len": train_cfg.seq_len, "eval_len": eval_len, "threads": threads,
              "train_seconds_wall": round(train_wall, 1), f"train_seconds_{args.clock}": round(train_clock, 1)}
    for split in ("valid", "test"):
        result[split] = perplexity(trainer.model, corpora[split], stream, eval_len)
    print(f"{name}: {trainer.step} steps ({stop}); PTB valid ppl {result['valid']['ppl']:.1f}, test ppl "
          f"{result['test']['ppl']:.1f}", flush=True)
    return result


def table(results: list[dict], args) -> str:
    lines = ["| model | parameters | training | valid ppl | test ppl |", "|---|---:|---|---:|---:|"]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['preset']} | | skipped: {r['skipped']} | | |")
            continue
        lines.append(f"| {r['preset']} ({r['objective']}) | {r['parameters'] / 1e6:.1f}M | {r['steps']} steps, "
                     f"{r['epochs']:.2f} epochs, {args.budget:.0f} s {args.clock} | {r['valid']['ppl']:.1f} | {r['test']['ppl']:.1f} |")
    for key, ref in REFERENCE.items():
        lines.append(f"| published: {key} | | {ref['size']} | {ref['valid_ppl']} | {ref['test_ppl']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, required=True, help="training budget per preset in seconds (see --clock)")
    ap.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS))
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--threads", default="auto", help="torch CPU threads: a number or 'auto' (the faster of 1 and 2)")
    ap.add_argument("--eval-len", type=int, default=70, help="predicted tokens per evaluation block (default 70)")
    ap.add_argument("--out", default=None, help="directory for the runs (default: a temporary one, removed at the end)")
    ap.add_argument("overrides", nargs="*", help="SECTION.KEY=VALUE (every preset) or PRESET:SECTION.KEY=VALUE")
    args = ap.parse_args()
    # `--presets a b KEY=VALUE`: argparse hands the override to --presets; give it back
    args.overrides = [p for p in args.presets if "=" in p] + list(args.overrides)
    args.presets = [p for p in args.presets if "=" not in p]

    t_start, c_start = time.perf_counter(), time.process_time()
    clock = make_clock(args.clock)
    ptb = fetch("ptb")
    files = {split: ptb / f"{split}.txt" for split in ("train", "valid", "test")}
    section = dict(WORD_TOKENIZER)
    kind, vocab_size = section.pop("kind"), section.pop("vocab_size")
    tokenizer = Tokenizer.train([files["train"]], kind=kind, vocab_size=vocab_size, **section)
    args.root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="ptb_lm_"))
    corpora = {s: prepare([f], tokenizer, args.root / f"corpus-{s}", workers=1, overwrite=True, progress=False)
               for s, f in files.items()}
    print(f"PTB: vocabulary {tokenizer.vocab_size} (words + specials); tokens with separators: "
          + ", ".join(f"{s} {c.n_tokens + len(c.sentences) - 1:,}" for s, c in corpora.items()), flush=True)

    per_preset = split_overrides(list(args.overrides), list(args.presets))
    results = []
    for name in args.presets:
        r = run_preset(name, per_preset[name], tokenizer, corpora, args, clock)
        if "skipped" in r:
            print(f"\n== {name}: skipped: {r['skipped']}", flush=True)
        results.append(r)

    print("\n" + table(results, args))
    if not args.out:
        shutil.rmtree(args.root, ignore_errors=True)
    print(json.dumps({
        "benchmark": "ptb_lm", "budget_seconds": args.budget, "clock": args.clock, "eval_len": args.eval_len,
        "vocab_size": tokenizer.vocab_size, "overrides": list(args.overrides), "results": results, "reference": REFERENCE,
        "total_seconds_wall": round(time.perf_counter() - t_start, 1),
        "total_seconds_cpu": round(time.process_time() - c_start, 1),
    }))


if __name__ == "__main__":
    sys.exit(main())
