"""Inference speed: encoding (no gradient) of ptmkit's encoders vs HF transformers and ONNX Runtime,
and cached greedy generation vs HF ``generate``.

Encoding, random weights shared by both frameworks (the HF model is built from the ptmkit one by
the export path, so both hold the same tensors; their outputs are compared before timing):

* ``bert``: BERT-base (L=12, H=768, A=12, FFN 3072, vocab 30,522), ptmkit ``TransformerEncoder``
  (with its pooler) vs HF ``BertModel`` (:func:`ptmkit.interop.hf_bert.build_hf_bert`);
* ``t5``: T5-small's encoder (6 layers, H=512, 8 heads, FFN 2048, vocab 32,100, 32 relative
  buckets), ptmkit ``EncoderDecoder.encode`` vs the encoder stack of HF
  ``T5ForConditionalGeneration`` (:func:`ptmkit.interop.hf_t5.build_hf_t5`).

Workload: ``[B, 128]`` random token ids, no padding, B in {1, 32}, eval mode under
``torch.inference_mode``, SDPA attention on both sides.  Precisions: fp32, and bf16 *weights*
(each model cast with ``.to(torch.bfloat16)``, the same on both sides: inference has no master
weights to keep, and autocast would cast every weight again on every call).  ONNX Runtime runs
the fp32 ptmkit encoder exported by ``ptm export --format onnx``'s code
(:mod:`ptmkit.interop.onnx_export`; its outputs are checked against PyTorch, the largest
difference is reported), with as many intra-op threads as torch and its spinning threads off
(they would steal the cores from the next model timed).

MFU of each encode row: the FLOPs of the call counted by :func:`ptmkit.flops.counter` (matrix
products and attention as they run; the same count for every framework) per second, over the
machine's measured matrix-product peak for the row's dtype (:func:`ptmkit.train.mfu.peak_flops`,
``2048 x 2048`` products with the same threads, measured before the models are built; ONNX Runtime
rows against the fp32 peak).  The probe is only as good as the machine is idle: on a loaded machine
it reads low and MFU high (above 100 % shows it).

Generation: a GPT-2-small-sized random model (L=12, H=768, vocab 50,257; built as in
``bench_generate.py``, whose helpers this reuses), greedy, ``--new-tokens`` tokens after
``--prompt-len``-token prompts (a batch of 8 has prompts of different lengths, left-padded), batch
1 and 8, both sides with their key/value cache; the tokens are compared before timing.

Timing: within each section every model runs in interleaved rounds (each round runs all of them,
in an order that alternates), so drifts in machine load hit all alike; each figure is the median
over rounds (:func:`ptmkit.workflows.quantize.interleaved_ms`).  The machine's load average is
printed at the start and the end: figures taken at a load of 1.5 or more on this 2-core machine
are marked as taken on a loaded machine, and the default thread count is then 1 instead of 2.

Run: ``python benchmarks/bench_inference.py [--quick]``.  The last line printed is JSON with
``encode_speedup`` (HF fp32 time / ptmkit fp32 time, BERT-base, batch 32), ``encode_bf16_vs_fp32``
(ptmkit fp32 time / ptmkit bf16 time, batch 32), ``hf_encode_bf16_vs_fp32``,
``t5_encode_speedup``, ``t5_encode_bf16_vs_fp32``, ``generate_small_b1_speedup`` and
``generate_small_b8_speedup`` (ptmkit tokens/s / HF tokens/s), ``onnx_b1_ms``, ``onnx_b32_ms``,
``onnx_vs_ptmkit_b1`` and ``onnx_vs_ptmkit_b32`` (ONNX Runtime time / ptmkit fp32 time: > 1,
ptmkit is faster), ``onnx_max_abs_diff``, ``encode`` (every encode row: ms, tokens/s, GFLOP, MFU),
``peak_gflops`` (the measured peaks MFU divides by), the CPU, threads and load.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_generate

from ptmkit.build import build_model, resolve_config
from ptmkit.flops import counter
from ptmkit.presets import load_preset
from ptmkit.pretrained import Pretrained
from ptmkit.train.mfu import peak_flops
from ptmkit.workflows.quantize import cpu_name, interleaved_ms

SEQ_LEN = 128
BATCHES = (1, 32)
QUICK_MODEL = {"hidden_size": 64, "intermediate_size": 256, "num_heads": 2, "num_layers": 2, "encoder_layers": 2,
               "decoder_layers": 2}
LOADED = 1.5  # load average at which this 2-core machine counts as loaded
PEAK_N = 2048  # the matrix-product probe of the MFU peak (longer than the Trainer's 1024: steadier)


def tokenizer(vocab_size: int, sentinels: int = 0) -> SimpleNamespace:
    ids = dict(pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
    return SimpleNamespace(vocab_size=vocab_size, sentinel_ids=tuple(range(vocab_size - 1, vocab_size - 1 - sentinels, -1)),
                           **ids)


def pretrained(preset: str, vocab_size: int, quick: bool, sentinels: int = 0) -> Pretrained:
    """A random ptmkit model of ``preset`` (eval mode, dropout off), smaller with ``quick``."""
    raw = load_preset(preset)
    if quick:
        raw["model"].update({k: v for k, v in QUICK_MODEL.items() if k in raw["model"]})
    raw["train"]["seq_len"] = SEQ_LEN
    tok = tokenizer(vocab_size, sentinels)
    config = resolve_config(raw, tok)
    torch.manual_seed(0)
    model = build_model(config, tok).eval()
    return Pretrained(config, tok, model.backbone, model.objective, None, model)


def bert_models(quick: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(ptmkit TransformerEncoder, HF BertModel) of BERT-base size with the same weights."""
    from ptmkit.interop.hf_bert import build_hf_bert

    pre = pretrained("bert-base", 30522, quick)
    pre.objective = None  # the encoder alone: HF BertModel, no MLM head
    hf, _ = build_hf_bert(pre, with_heads=False)
    hf.config._attn_implementation = "sdpa"
    return pre.backbone, hf.eval()


def t5_models(quick: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(ptmkit EncoderDecoder, HF T5 encoder stack) of T5-small size with the same weights."""
    from ptmkit.interop.hf_t5 import build_hf_t5

    pre = pretrained("t5-small", 32100, quick, sentinels=100)
    hf = build_hf_t5(pre)
    hf.config._attn_implementation = "sdpa"
    return pre.backbone, hf.encoder.eval()


def encode_call(model: torch.nn.Module, side: str, family: str, ids: torch.Tensor, mask: torch.Tensor):
    """A no-argument call of one encoder forward; returns the last hidden states."""
    if side == "ptmkit":
        if family == "t5":
            return lambda: model.encode(ids, mask).last_hidden_state
        return lambda: model(ids, attention_mask=mask).last_hidden_state
    return lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state


def onnx_encoder(backbone: torch.nn.Module, threads: int, directory: Path) -> tuple[object, float]:
    """The ONNX Runtime session of ``backbone``'s fp32 export, and the export's largest |ONNX - PyTorch|."""
    import onnxruntime as ort

    from ptmkit.interop import onnx_export

    graph = onnx_export.EncoderGraph(backbone).eval()
    path = directory / "model.onnx"
    onnx_export.trace_to_onnx(graph, path)
    check = onnx_export.compare(graph, path, ort)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session, check["max_abs_diff"]


def flops_of(call) -> float:
    with torch.inference_mode(), counter() as fc:
        call()
    return float(fc.get_total_flops())


def encode_section(family: str, ours: torch.nn.Module, theirs: torch.nn.Module, args, with_onnx: bool) -> dict:
    """Every encode row of one family: ``{"b{B}_{side}_{dtype}": {...}}`` and the ONNX check."""
    vocab = ours.config.vocab_size
    seq = args.seq_len
    models = {("ptmkit", "fp32"): ours, ("hf", "fp32"): theirs,
              ("ptmkit", "bf16"): copy.deepcopy(ours).to(torch.bfloat16),
              ("hf", "bf16"): copy.deepcopy(theirs).to(torch.bfloat16)}
    g = torch.Generator().manual_seed(0)
    out: dict = {"rows": {}}
    session = None
    if with_onnx:
        tmp = tempfile.TemporaryDirectory()
        session, out["onnx_max_abs_diff"] = onnx_encoder(ours, args.threads, Path(tmp.name))
    for batch in args.batches:
        ids = torch.randint(5, vocab, (batch, seq), generator=g)
        mask = torch.ones_like(ids)
        calls = {f"{side}_{dtype}": encode_call(m, side, family, ids, mask) for (side, dtype), m in models.items()}
        with torch.inference_mode():
            ref, got = calls["ptmkit_fp32"](), calls["hf_fp32"]()
        out[f"b{batch}_ptmkit_vs_hf_max_abs_diff"] = float((ref - got).abs().max())
        if session is not None:
            feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
            if any(i.name == "token_type_ids" for i in session.get_inputs()):
                feed["token_type_ids"] = torch.zeros_like(ids).numpy()
            calls["onnxruntime_fp32"] = lambda feed=feed: session.run(["last_hidden_state"], feed)
        flops = {dtype: flops_of(calls[f"ptmkit_{dtype}"]) for dtype in ("fp32", "bf16")}
        ms = interleaved_ms(calls, args.rounds, min_s=args.min_s)
        for name, t in ms.items():
            dtype = name.rsplit("_", 1)[1]
            peak = peak_flops("cpu", torch.bfloat16 if dtype == "bf16" else torch.float32, n=PEAK_N)
            rate = flops[dtype] / (t / 1000)
            out["rows"][f"b{batch}_{name}"] = {"ms": round(t, 2), "tokens_per_s": round(batch * seq / (t / 1000), 1),
                                               "gflop": round(flops[dtype] / 1e9, 2),
                                               "mfu": round(rate / peak, 4) if peak else None}
    if with_onnx:
        tmp.cleanup()
    return out


def generate_section(args) -> dict:
    size = "tiny" if args.quick else "small"
    ours, hf = bench_generate.build(size)
    out = {}
    for batch in (1, 8):
        rows = bench_generate.prompts(batch, args.prompt_len, bench_generate.SIZES[size]["vocab_size"])
        n = args.new_tokens
        same = torch.equal(bench_generate.run_ptmkit(ours, rows, n), bench_generate.run_hf(hf, rows, n))
        ms = interleaved_ms({"ptmkit": lambda: bench_generate.run_ptmkit(ours, rows, n),
                             "hf": lambda: bench_generate.run_hf(hf, rows, n)}, args.gen_rounds, min_s=0.0)
        tps = {k: batch * n / (v / 1000) for k, v in ms.items()}
        out[f"b{batch}"] = {"ptmkit_tokens_per_s": round(tps["ptmkit"], 1), "hf_tokens_per_s": round(tps["hf"], 1),
                            "speedup": round(tps["ptmkit"] / tps["hf"], 3), "same_tokens": same}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny models, short sequences, 2 rounds: a check that it runs")
    p.add_argument("--threads", type=int, default=None, help="default: 2 on a quiet machine, 1 when loaded")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--gen-rounds", type=int, default=3)
    p.add_argument("--min-s", type=float, default=0.2, help="each encode figure repeats its call for about this long")
    p.add_argument("--seq-len", type=int, default=SEQ_LEN)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--sections", nargs="+", choices=("bert", "t5", "generate"), default=["bert", "t5", "generate"])
    args = p.parse_args()
    load_start = os.getloadavg()[0]
    if args.threads is None:
        args.threads = 2 if load_start < LOADED else 1
    args.batches = BATCHES
    if args.quick:
        args.rounds, args.gen_rounds, args.min_s, args.seq_len = 2, 2, 0.0, 16
        args.prompt_len, args.new_tokens, args.batches = 8, 4, (1, 4)
    torch.set_num_threads(args.threads)
    import transformers

    cpu = cpu_name()
    print(f"CPU: {cpu}; {args.threads} threads; load average {load_start:.2f} at the start", flush=True)
    result: dict = {"cpu": cpu, "threads": args.threads, "load_start": round(load_start, 2),
                    "torch": torch.__version__, "transformers": transformers.__version__}
    encode: dict = {}
    if {"bert", "t5"} & set(args.sections):  # the MFU peaks first, before the models fill the memory and caches
        for dtype in (torch.float32, torch.bfloat16):
            peak_flops("cpu", dtype, n=PEAK_N)
    if "bert" in args.sections:
        encode["bert"] = encode_section("bert", *bert_models(args.quick), args, with_onnx=True)
    if "t5" in args.sections:
        encode["t5"] = encode_section("t5", *t5_models(args.quick), args, with_onnx=False)
    big = max(args.batches)
    for family, sec in encode.items():
        rows = sec["rows"]
        for name, r in rows.items():
            mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "-"
            print(f"{family:5s} {name:24s} {r['ms']:10.2f} ms  {r['tokens_per_s']:10.1f} tok/s  MFU {mfu}", flush=True)
        prefix = "" if family == "bert" else f"{family}_"
        ms = {k: v["ms"] for k, v in rows.items()}
        result[f"{prefix}encode_speedup"] = round(ms[f"b{big}_hf_fp32"] / ms[f"b{big}_ptmkit_fp32"], 3)
        result[f"{prefix}encode_speedup_b1"] = round(ms["b1_hf_fp32"] / ms["b1_ptmkit_fp32"], 3)
        result[f"{prefix}encode_bf16_vs_fp32"] = round(ms[f"b{big}_ptmkit_fp32"] / ms[f"b{big}_ptmkit_bf16"], 3)
        result[f"{prefix}hf_encode_bf16_vs_fp32"] = round(ms[f"b{big}_hf_fp32"] / ms[f"b{big}_hf_bf16"], 3)
        result[f"{prefix}encode_bf16_vs_hf_bf16"] = round(ms[f"b{big}_hf_bf16"] / ms[f"b{big}_ptmkit_bf16"], 3)
        if "onnx_max_abs_diff" in sec:
            for b in args.batches:
                result[f"onnx_b{b}_ms"] = ms[f"b{b}_onnxruntime_fp32"]
                result[f"onnx_vs_ptmkit_b{b}"] = round(ms[f"b{b}_onnxruntime_fp32"] / ms[f"b{b}_ptmkit_fp32"], 3)
            result["onnx_max_abs_diff"] = sec["onnx_max_abs_diff"]
    if "generate" in args.sections:
        gen = generate_section(args)
        for batch, g in gen.items():
            print(f"generate {batch:3s} ptmkit {g['ptmkit_tokens_per_s']:8.1f} tok/s  HF {g['hf_tokens_per_s']:8.1f} tok/s  "
                  f"x{g['speedup']}" + ("" if g["same_tokens"] else "  (the tokens differ)"), flush=True)
            result[f"generate_small_{batch}_speedup"] = g["speedup"]
        result["generate"] = gen
    if encode:  # the denominators of the MFU columns, measured once per dtype in this process
        result["peak_gflops"] = {name: round(peak_flops("cpu", dtype, n=PEAK_N) / 1e9, 1)
                                 for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
        print(f"measured matrix-product peak: {result['peak_gflops']['fp32']} GFLOP/s fp32, "
              f"{result['peak_gflops']['bf16']} GFLOP/s bf16")
    load_end = os.getloadavg()[0]
    result["load_end"] = round(load_end, 2)
    result["loaded"] = max(load_start, load_end) >= LOADED
    result["encode"] = encode
    result["config"] = {"seq_len": args.seq_len, "batches": list(args.batches), "rounds": args.rounds,
                        "gen_rounds": args.gen_rounds, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
                        "quick": args.quick, "bf16": "bf16 weights (model.to(torch.bfloat16)) on both sides"}
    print(f"load average {load_end:.2f} at the end" + ("; figures taken on a loaded machine" if result["loaded"] else ""))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
