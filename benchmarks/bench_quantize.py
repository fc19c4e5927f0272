"""Dynamic int8 vs float32 encoder speed: ptmkit's Transformer and HF transformers' ``BertModel`` on the
same weights, each quantized by the same quantizer (:func:`ptmkit.compress.quantize.quantize`).

Weights: all-MiniLM-L6-v2 (L=6, H=384, A=12, I=1536, V=30522) when ``ptm data get minilm`` has put it
in ``$PTMKIT_HOME/data/minilm``, else a random BERT of MiniLM's shape.  The ptmkit encoder is
imported from the HF model (:func:`ptmkit.interop.hf_bert.import_bert`), so both hold the same
tensors; before timing, their float32 outputs are compared, and each int8 model's output is
compared with its float32 one (cosine over the token states).

Workload: ``encoder(input_ids [B, T], attention_mask)`` in eval mode under ``inference_mode``, B in
{1, 32}, T in {64, 128}, random token ids, no padding; ``--threads`` threads (default 2).  Both
frameworks use SDPA attention.  ptmkit fuses q, k and v into one ``[3H, H]`` linear layer; HF keeps
three ``[H, H]`` ones, so HF's int8 model quantizes its input three times per layer where ptmkit
does once.

Timing: every model of a setting (ptmkit and HF, float32 and each backend's int8) runs in
interleaved rounds (each round runs all of them, in an order that alternates), so drifts in machine
load hit all alike; each figure is the median over rounds of the time per call
(:func:`ptmkit.workflows.quantize.interleaved_ms`).

Size: the safetensors bytes of the int8 task tensors (:func:`ptmkit.compress.quantize.quantized_state`)
over those of the float32 ``state_dict``, linear layers only and with ``--embeddings`` tables too.

Run: ``python benchmarks/bench_quantize.py [--backends ao torchao] [--rounds 5] [--quick]``.  The last
line printed is JSON: per setting the milliseconds of each model, ``speedup_<backend>`` (float32 /
int8 time, ptmkit), ``hf_speedup_<backend>``, ``vs_hf_fp32`` and ``vs_hf_<backend>`` (HF time /
ptmkit time: > 1, ptmkit is faster); the geometric means over settings at each batch size; the
size ratios; the quantized layer counts; the CPU and thread count.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from safetensors.torch import save

from ptmkit.compress.quantize import quantization_spec, quantize, quantized_state, summary
from ptmkit.encoders.transformer import TransformerEncoder
from ptmkit.interop.hf_bert import import_bert
from ptmkit.interop.hf_common import hf
from ptmkit.paths import data_dir
from ptmkit.workflows.quantize import cpu_name, interleaved_ms

MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
              max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12)


def load_models() -> tuple[TransformerEncoder, torch.nn.Module, str]:
    """(ptmkit encoder, HF BertModel, which weights) holding the same float32 tensors, eval mode."""
    directory = data_dir() / "minilm"
    BertModel, BertConfig = hf("BertModel"), hf("BertConfig")
    if (directory / "config.json").is_file() and (directory / "model.safetensors").is_file():
        hf_model, source = BertModel.from_pretrained(str(directory), attn_implementation="sdpa"), "all-MiniLM-L6-v2"
    else:
        torch.manual_seed(0)
        config = BertConfig(**MINILM, attn_implementation="sdpa")
        hf_model, source = BertModel(config), "random BERT of MiniLM's shape"
    cfg, state, _ = import_bert(hf_model)
    ours = TransformerEncoder(cfg)
    ours.load_state_dict({k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")})
    return ours.eval(), hf_model.eval(), source


def forward(model: torch.nn.Module, is_hf: bool, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, attention_mask=mask).last_hidden_state if is_hf else model(ids, mask).last_hidden_state


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(0, 1), b.flatten(0, 1), dim=-1).min())


def size_ratio(fp32: torch.nn.Module, int8: torch.nn.Module) -> float:
    full = {k: v.contiguous().clone() for k, v in fp32.state_dict().items()}
    return len(save(quantized_state(int8))) / len(save(full))


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", nargs="+", default=None, choices=("ao", "torchao"),
                    help="quantizers to time (default: ao, and torchao when installed)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="batch 1 and 32 at T = 64 only, 3 rounds")
    args = ap.parse_args()
    backends = args.backends or ["ao"] + (["torchao"] if importlib.util.find_spec("torchao") else [])
    torch.set_num_threads(args.threads)
    rounds = 3 if args.quick else args.rounds
    settings = [(1, 64), (32, 64)] if args.quick else [(1, 64), (1, 128), (32, 64), (32, 128)]

    ours, theirs, source = load_models()
    models = {("ptmkit", "fp32"): ours, ("hf", "fp32"): theirs}
    for backend in backends:
        spec = quantization_spec(backend)
        models[("ptmkit", backend)] = quantize(ours, spec)
        models[("hf", backend)] = quantize(theirs, spec)
    g = torch.Generator().manual_seed(0)
    check_ids = torch.randint(1000, MINILM["vocab_size"], (2, 64), generator=g)
    check_mask = torch.ones_like(check_ids)
    with torch.inference_mode():
        out = {key: forward(m, key[0] == "hf", check_ids, check_mask) for key, m in models.items()}
    parity = {"fp32_max_abs_diff": float((out[("ptmkit", "fp32")] - out[("hf", "fp32")]).abs().max())}
    assert parity["fp32_max_abs_diff"] < 1e-4, parity
    for backend in backends:
        for side in ("ptmkit", "hf"):
            parity[f"{side}_{backend}_cosine_to_fp32"] = round(cosine(out[(side, backend)], out[(side, "fp32")]), 6)
        parity[f"{backend}_ptmkit_cosine_to_hf"] = round(cosine(out[("ptmkit", backend)], out[("hf", backend)]), 6)
    print(json.dumps({"weights": source, "parity": parity}), flush=True)

    rows = []
    for batch, seq in settings:
        ids = torch.randint(1000, MINILM["vocab_size"], (batch, seq), generator=g)
        mask = torch.ones_like(ids)
        calls = {f"{side}_{prec}": (lambda m=m, h=side == "hf": forward(m, h, ids, mask))
                 for (side, prec), m in models.items()}
        ms = interleaved_ms(calls, rounds)
        row = {"batch": batch, "seq": seq, **{f"{k}_ms": round(v, 3) for k, v in ms.items()},
               "vs_hf_fp32": round(ms["hf_fp32"] / ms["ptmkit_fp32"], 3)}
        for backend in backends:
            row[f"speedup_{backend}"] = round(ms["ptmkit_fp32"] / ms[f"ptmkit_{backend}"], 3)
            row[f"hf_speedup_{backend}"] = round(ms["hf_fp32"] / ms[f"hf_{backend}"], 3)
            row[f"vs_hf_{backend}"] = round(ms[f"hf_{backend}"] / ms[f"ptmkit_{backend}"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)

    result = {"weights": source, "cpu": cpu_name(), "threads": args.threads, "rounds": rounds,
              "torch": torch.__version__, "engine": torch.backends.quantized.engine, "parity": parity,
              "linear_int8": {side: summary(models[(side, backends[0])])["linear_int8"] for side in ("ptmkit", "hf")},
              "size_ratio": round(size_ratio(ours, models[("ptmkit", backends[0])]), 4),
              "size_ratio_embeddings": round(size_ratio(ours, quantize(ours, quantization_spec(backends[0], True))), 4),
              "settings": rows}
    for backend in backends:
        for batch in sorted({b for b, _ in settings}):
            sel = [r for r in rows if r["batch"] == batch]
            result[f"speedup_{backend}_b{batch}"] = round(geomean([r[f"speedup_{backend}"] for r in sel]), 3)
            result[f"hf_speedup_{backend}_b{batch}"] = round(geomean([r[f"hf_speedup_{backend}"] for r in sel]), 3)
            result[f"vs_hf_{backend}_b{batch}"] = round(geomean([r[f"vs_hf_{backend}"] for r in sel]), 3)
    result["vs_hf_fp32"] = round(geomean([r["vs_hf_fp32"] for r in rows]), 3)
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
