"""Fine-tuning and encoding speed on real sentence batches: ptmkit packed, ptmkit padded, HF.

A fine-tuning batch is a shuffled sample of the training sentences padded to its longest one, so
much of it is padding.  ptmkit's encoders run such batches packed (:mod:`ptmkit.nn.packing`: the
position-wise layers see only the real tokens); this measures what that gives against the same
encoder running every position (``pack_padding = False``) and against HF transformers'
``BertModel`` on the same weights and batches.

Model: all-MiniLM-L6-v2 (``ptm data get minilm``: 6 layers, H 384, 12 heads), imported into ptmkit;
HF loads the same files.  Data: MR's training sentences (``ptm data get mr``) with MiniLM's
tokenizer, ``[CLS] ... [SEP]`` truncated to ``--max-len`` tokens; ``--batches`` batches of
``--batch-size`` sentences drawn at random (a fine-tuning epoch's order), each padded to its longest.

* ``train``: one fine-tuning step per call — dropout on (each framework's own), a linear classifier
  on the pooled ``[CLS]`` state, cross-entropy on MR's labels, backward, fused AdamW step; fp32, and
  bf16 autocast with ``--bf16``.
* ``encode``: one forward pass without gradients over the same batches (feature extraction of a
  corpus in its own order; ptmkit's own prediction loops sort by length, which removes most padding).

* ``--pretrain RUN``: a pre-training step (the run's own objective, its collate over random
  examples of its prepared data; backward, fused AdamW) of the run's model, packed against padded.
* ``--seq2seq``: a T5-small fine-tuning step (the ``t5-small`` preset: 6 + 6 layers, d 512, random
  weights, MiniLM's WordPiece vocabulary) on shuffled bible-modernise pairs (``ptm data get
  bible-modernise``), as ``ptm finetune`` builds them (sources and targets each padded to the
  batch's longest): encoder and decoder packed, the decoder padded (the encoder alone packed, as
  before the decoder packed), both padded, and HF ``T5ForConditionalGeneration`` with the same
  weights and ``labels`` (its loss over the full logits).
* ``--sweep``: where packing starts to pay: encode and training steps of batches of random
  tokens at fixed padding shares (the padding in as few rows as it takes; 128 positions), packed
  against padded; the threshold :data:`ptmkit.nn.packing.MIN_PADDING` comes from it.

Timing: interleaved rounds (:func:`ptmkit.workflows.quantize.interleaved_ms`: every round runs each
side for about ``--min-s`` seconds of calls over the batches in turn, in an order that alternates),
median milliseconds per call.  The load average is printed at
the start and at the end; a figure taken at a load of 1.5 or more on a 2-core machine is not a
speed result.

    python benchmarks/bench_finetune.py [--threads 2] [--rounds 5] [--bf16]

The last line is JSON: the CPU, threads, load, padding share of the batches, per section and side
ms per call and real tokens/s, ``finetune_speedup`` (HF ms / ptmkit packed ms, fp32 training),
``finetune_packing_speedup`` (ptmkit padded / packed), ``encode_shuffled_speedup`` (HF / ptmkit
packed, encode) and ``encode_packing_speedup``.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ptmkit.data.sources.base import fetch
from ptmkit.data.tasks import load_task
from ptmkit.tasks.classification import collate, encode_split
from ptmkit.train.mfu import cpu_name
from ptmkit.workflows.quantize import interleaved_ms

LOADED = 1.5


class Classifier(nn.Module):
    """An encoder's pooled state -> 2 logits (the same head on every side)."""

    def __init__(self, encoder: nn.Module, hidden: int, hf: bool) -> None:
        super().__init__()
        self.encoder, self.hf = encoder, hf
        self.head = nn.Linear(hidden, 2)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.hf:
            pooled = self.encoder(input_ids=ids, attention_mask=mask).pooler_output
        else:
            pooled = self.encoder(ids, attention_mask=mask).pooled
        return self.head(pooled)


def models(minilm: Path, work: Path) -> tuple[dict[str, nn.Module], object]:
    """MiniLM as ptmkit (packed and padded) and as HF ``BertModel``, with the same weights; and
    ptmkit's tokenizer of it."""
    import transformers

    import ptmkit
    from ptmkit.pretrained import load_pretrained

    pre = load_pretrained(ptmkit.import_hf(minilm, work / "minilm"), heads=False)
    hf = transformers.BertModel.from_pretrained(minilm, attn_implementation="sdpa")
    H = pre.backbone.config.hidden_size
    torch.manual_seed(0)
    packed = Classifier(pre.backbone, H, hf=False)
    padded = copy.deepcopy(packed)
    padded.encoder.pack_padding = False
    theirs = Classifier(hf, H, hf=True)
    theirs.head.load_state_dict(packed.head.state_dict())
    return {"ptmkit_packed": packed, "ptmkit_padded": padded, "hf": theirs}, pre.tokenizer


def batches(tokenizer, n: int, size: int, max_len: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``n`` random batches of MR training sentences, encoded and padded as ``ptm finetune`` does."""
    split = load_task("mr").train
    inputs = encode_split(split, tokenizer, max_len, causal=False)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = collate(inputs, rng.choice(len(split), size, replace=False), tokenizer.pad_id, split.labels, False)
        out.append((b["input_ids"], b["attention_mask"], b["labels"]))
    return out


def timed(calls: dict, data: list, args, grad: bool) -> dict[str, float]:
    """Median ms per call over ``args.rounds`` interleaved rounds (:func:`interleaved_ms`, each call
    repeated for about ``args.min_s`` seconds a round); each side's calls walk through ``data`` in turn."""
    def cycling(call):
        batches = itertools.cycle(data)
        return lambda: call(next(batches))
    return interleaved_ms({name: cycling(call) for name, call in calls.items()}, args.rounds, min_s=args.min_s, grad=grad)


def train_call(model: nn.Module, bf16: bool, loss=None):
    """One optimizer step per call on a batch; ``loss(model, batch)`` (default: the classifier's
    cross-entropy on ``(ids, mask, labels)``)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    loss = loss or (lambda m, b: nn.functional.cross_entropy(m(b[0], b[1]).float(), b[2]))

    def step(batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            value = loss(model, batch)
        value.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def encode_call(model: nn.Module):
    model.eval()
    return lambda batch: model(batch[0], batch[1])


def padded_batch(share: float, B: int, T: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ids ``[B, T]`` with ``share`` of the positions padding, in as few rows as it takes."""
    ids = torch.randint(1000, vocab, (B, T), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(B, T, dtype=torch.long)
    pads = round(share * B * T)
    for r in range(B):  # at most T - 1 a row: every row keeps a token
        k = min(pads, T - 1)
        mask[r, T - k:] = 0
        pads -= k
    return ids * mask, mask, torch.zeros(B, dtype=torch.long)


def sweep(model: nn.Module, shares: list[float], args) -> dict:
    """Packed / padded time ratios of encode and training calls at fixed padding shares (packing
    forced at every share: :data:`MIN_PADDING` set to 0 meanwhile)."""
    from ptmkit.nn import packing

    out = {}
    threshold, packing.MIN_PADDING = packing.MIN_PADDING, 0.0
    try:
        B, T = args.batch_size, 128
        vocab = model.encoder.config.vocab_size
        for share in shares:
            data = [padded_batch(share, B, T, vocab)]
            row = {}
            for kind in ("encode", "train"):
                sides = {}
                for packed in (True, False):
                    m = copy.deepcopy(model)
                    m.encoder.pack_padding = packed
                    sides["packed" if packed else "padded"] = encode_call(m) if kind == "encode" else train_call(m, False)
                ms = timed(sides, data, args, grad=kind == "train")
                row[kind] = round(ms["padded"] / ms["packed"], 3)
            out[str(share)] = row
            print(f"padding {share:.0%}: padded / packed encode {row['encode']:.3f}x, train {row['train']:.3f}x", flush=True)
    finally:
        packing.MIN_PADDING = threshold
    return out


def pretrain_section(run: Path, args) -> dict:
    """Packed / padded pre-training steps of ``run``'s model on its own data and objective."""
    from ptmkit.data.corpus import Corpus
    from ptmkit.pretrained import load_pretrained

    pre = load_pretrained(run)
    corpus = Corpus.open(run / "data")
    cfg = pre.config["train"]
    spans = pre.objective.example_spans(corpus, cfg["seq_len"])
    rng = np.random.default_rng(0)
    data = [pre.objective.collate(corpus, spans[rng.choice(len(spans), cfg["batch_size"], replace=False)], rng)
            for _ in range(args.batches)]
    if "attention_mask" not in data[0]:  # e.g. a causal LM's contiguous text: no padding to skip
        print(f"pre-training {run.name}: its batches have no padding mask, nothing to pack", flush=True)
        return {"run": str(run), "padding_share": 0.0}
    masks = [b["attention_mask"] for b in data]
    share = 1 - sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)
    calls = {}
    for packed in (True, False):
        model = copy.deepcopy(pre.model)
        model.backbone.pack_padding = packed
        calls["packed" if packed else "padded"] = train_call(model, cfg.get("precision") == "bf16",
                                                             loss=lambda m, b: m(b).loss)
    ms = timed(calls, data, args, grad=True)
    print(f"pre-training {run.name} ({cfg['batch_size']} x <= {cfg['seq_len']}, {100 * share:.0f} % padding, "
          f"{cfg.get('precision', 'fp32')}): packed {ms['packed']:.1f} ms, padded {ms['padded']:.1f} ms, "
          f"padded / packed {ms['padded'] / ms['packed']:.2f}x", flush=True)
    return {"run": str(run), "padding_share": round(share, 4), "ms": {k: round(v, 2) for k, v in ms.items()},
            "packing_speedup": round(ms["padded"] / ms["packed"], 3)}


def seq2seq_section(args) -> dict:
    """T5-small fine-tuning steps on bible-modernise pairs: packed, decoder padded, padded, HF."""
    from ptmkit.build import build_encoder
    from ptmkit.interop.hf_t5 import build_hf_t5
    from ptmkit.nn.targets import IGNORE_INDEX
    from ptmkit.presets import load_preset
    from ptmkit.tasks.seq2seq import Seq2SeqModel, collate_pairs, encode_pairs

    with tempfile.TemporaryDirectory() as tmp:
        _, tokenizer = models(fetch("minilm"), Path(tmp))
    section = dict(load_preset("t5-small")["model"], vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    backbone = build_encoder(section, tokenizer)
    split = load_task("bible-modernise").train
    pairs = encode_pairs(split, tokenizer, args.max_len, args.max_len)
    rng = np.random.default_rng(0)
    data = [collate_pairs(pairs, rng.choice(len(pairs), args.batch_size, replace=False), tokenizer.pad_id,
                          backbone.config.decoder_start_token_id) for _ in range(args.batches)]
    src = sum(int(b["attention_mask"].sum()) for b in data) / sum(b["attention_mask"].numel() for b in data)
    tgt = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in data) / sum(b["labels"].numel() for b in data)
    sides = {}
    for name, encoder, decoder in (("packed", True, True), ("decoder_padded", True, False), ("padded", False, False)):
        model = Seq2SeqModel(copy.deepcopy(backbone))
        model.backbone.pack_padding = encoder
        if not decoder:  # the decoder is told nothing of its padding: it runs every position
            model.backbone.decode = _unmasked(model.backbone.decode)
        sides[name] = train_call(model, False, loss=lambda m, b: m(b).loss)
    hf = build_hf_t5(SimpleNamespace(backbone=backbone, tokenizer=tokenizer, objective=None))
    def hf_loss(m, b):  # HF's own loss over its full logits
        return m(**{k: b[k] for k in ("input_ids", "attention_mask", "decoder_input_ids", "labels")}).loss

    with torch.inference_mode():  # the same function on both sides (dropout off)
        ours, theirs = Seq2SeqModel(backbone).eval()(data[0]).loss, hf_loss(hf.eval(), data[0])
    sides["hf"] = train_call(hf, False, loss=hf_loss)
    ms = timed(sides, data, args, grad=True)
    res = {"model": "t5-small (random init)", "loss_diff_vs_hf": round(float(abs(ours - theirs)), 7),
           "batch_size": args.batch_size, "source_padding": round(1 - src, 4), "target_padding": round(1 - tgt, 4),
           "ms": {k: round(v, 2) for k, v in ms.items()},
           "seq2seq_speedup": round(ms["hf"] / ms["packed"], 3),
           "decoder_packing_speedup": round(ms["decoder_padded"] / ms["packed"], 3),
           "packing_speedup": round(ms["padded"] / ms["packed"], 3)}
    print(f"T5-small fine-tuning on bible-modernise ({args.batch_size} pairs a batch; {100 * (1 - src):.0f} % of the "
          f"source and {100 * (1 - tgt):.0f} % of the target positions padding): "
          + ", ".join(f"{k} {v:.0f} ms" for k, v in ms.items())
          + f"; HF / packed {res['seq2seq_speedup']:.2f}x, decoder padded / packed {res['decoder_packing_speedup']:.2f}x",
          flush=True)
    return res


def _unmasked(decode):
    """``decode`` without its ``decoder_attention_mask``: with right padding and causal attention the
    real positions get the same values, and the decoder runs every position."""
    def call(*args, **kwargs):
        if len(args) > 3:
            args = (*args[:3], None, *args[4:])
        kwargs.pop("decoder_attention_mask", None)
        return decode(*args, **kwargs)
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None, help="default: 2, or 1 on a loaded machine")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-s", type=float, default=2.0, help="seconds of calls per side per round")
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--bf16", action="store_true", help="also the bf16-autocast training step")
    ap.add_argument("--sweep", action="store_true", help="packed vs padded at fixed padding shares (see above)")
    ap.add_argument("--sweep-only", action="store_true", help="the sweep alone")
    ap.add_argument("--pretrain", type=Path, default=None, help="a pre-training run: its step packed vs padded, alone")
    ap.add_argument("--seq2seq", action="store_true", help="T5-small fine-tuning on bible-modernise, alone (see above)")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    threads = args.threads or (1 if load_start >= LOADED else 2)
    torch.set_num_threads(threads)
    print(f"load average {load_start:.2f} at the start; {threads} thread(s); {cpu_name()}", flush=True)
    if args.seq2seq:
        res = {"cpu": cpu_name(), "threads": threads, "seq2seq": seq2seq_section(args),
               "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2)}
        print(json.dumps(res))
        return
    if args.pretrain is not None:
        res = {"cpu": cpu_name(), "threads": threads, "pretrain": pretrain_section(args.pretrain, args),
               "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2)}
        print(json.dumps(res))
        return
    with tempfile.TemporaryDirectory() as tmp:
        sides, tokenizer = models(fetch("minilm"), Path(tmp))
    data = batches(tokenizer, args.batches, args.batch_size, args.max_len, seed=0)
    real = sum(int(m.sum()) for _, m, _ in data)
    total = sum(m.numel() for _, m, _ in data)
    res: dict = {"cpu": cpu_name(), "threads": threads, "batch_size": args.batch_size, "batches": args.batches,
                 "padding_share": round(1 - real / total, 4), "mean_real_tokens": round(real / len(data), 1),
                 "mean_padded_tokens": round(total / len(data), 1)}
    print(f"{len(data)} batches of {args.batch_size} MR sentences: {res['mean_real_tokens']:.0f} real tokens of "
          f"{res['mean_padded_tokens']:.0f} positions a batch ({100 * res['padding_share']:.0f} % padding)", flush=True)
    ids, mask, _ = data[0]
    with torch.inference_mode():  # the three sides compute the same function
        outs = {name: m.eval()(ids, mask) for name, m in sides.items()}
    res["max_abs_logit_diff_vs_hf"] = round(float((outs["ptmkit_packed"] - outs["hf"]).abs().max()), 7)
    sections = {"encode": {n: encode_call(m) for n, m in sides.items()}}
    sections["train_fp32"] = {n: train_call(copy.deepcopy(m), bf16=False) for n, m in sides.items()}
    if args.bf16:
        sections["train_bf16"] = {n: train_call(copy.deepcopy(m), bf16=True) for n, m in sides.items()}
    if args.sweep or args.sweep_only:
        res["sweep"] = sweep(sides["ptmkit_packed"], [0.02, 0.05, 0.1, 0.2], args)
    if args.sweep_only:
        print(json.dumps(res))
        return
    tokens_per_call = real / len(data)
    for section, calls in sections.items():
        ms = timed(calls, data, args, grad=section != "encode")
        res[section] = {n: {"ms": round(t, 2), "real_tokens_per_s": round(tokens_per_call / (t / 1000), 1)} for n, t in ms.items()}
        line = ", ".join(f"{n} {t:.1f} ms" for n, t in ms.items())
        print(f"{section}: {line}; HF / packed {ms['hf'] / ms['ptmkit_packed']:.2f}x, "
              f"padded / packed {ms['ptmkit_padded'] / ms['ptmkit_packed']:.2f}x", flush=True)
        prefix = {"encode": "encode_shuffled", "train_fp32": "finetune", "train_bf16": "finetune_bf16"}[section]
        res[f"{prefix}_speedup"] = round(ms["hf"] / ms["ptmkit_packed"], 3)
        res[f"{prefix}_packing_speedup"] = round(ms["ptmkit_padded"] / ms["ptmkit_packed"], 3)
    res["load_start"], res["load_end"] = round(load_start, 2), round(os.getloadavg()[0], 2)
    res["loaded"] = res["load_start"] >= LOADED
    print(f"load average {res['load_end']:.2f} at the end")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
