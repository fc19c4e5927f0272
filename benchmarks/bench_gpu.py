"""Training speed and MFU on a GPU: BERT-base MLM and GPT-2-small CLM, ptmkit against HF
transformers on the same batches, bf16 autocast, with and without ``torch.compile``; and ptmkit's
model sharded by FSDP (run this file under ``torchrun`` with ``--fsdp``).

The models and batches are ``bench_transformer.py``'s (same tokens, same masked positions, same
fused AdamW), at the papers' sizes: BERT-base (L 12, H 768, 12 heads, FFN 3072, vocabulary
30,522) and GPT-2 small (L 12, H 768, vocabulary 50,257, 1,024 positions).  FLOPs per step are
counted on the first batch by :func:`ptmkit.flops.counter` (what runs, not 6N); MFU is against
the device's dense peak for bf16 (:mod:`ptmkit.train.mfu`: the GPU table, or a measured
matrix-product peak on CPU).  Each configuration warms up (compiling, if asked) and then times
``--steps`` steps with the device synchronised at both ends.

``--dry-run`` runs every code path at tiny sizes on the CPU (a few steps; the check of the
script itself where no GPU is at hand).  The last line printed is JSON.

Run: ``python benchmarks/bench_gpu.py [--steps 200]`` and
``torchrun --nproc_per_node 1 benchmarks/bench_gpu.py --fsdp [--steps 200]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_transformer as bt  # noqa: E402

from ptmkit.flops import counter, format_flops  # noqa: E402
from ptmkit.train import mfu, sharding  # noqa: E402

SIZES = {  # (hidden, layers, heads, ffn, vocab, positions)
    "mlm": (768, 12, 12, 3072, 30522, 512),
    "clm": (768, 12, 12, 3072, 50257, 1024),
}
TINY = (64, 2, 2, 128, 1000, 128)


def configure(workload: str, tiny: bool) -> None:
    """Set bench_transformer's model size for ``workload`` (its builders read the module's constants)."""
    bt.HIDDEN, bt.LAYERS, bt.HEADS, bt.FFN, bt.VOCAB, bt.POSITIONS = TINY if tiny else SIZES[workload]
    bt.TOKENIZER.vocab_size = bt.VOCAB


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(framework: str, workload: str, batches: list[dict], device: torch.device, steps: int, warmup: int,
            compile_: bool, fsdp: bool = False, profile_to: Path | None = None) -> dict:
    """tokens/s, FLOPs per step and MFU of ``steps`` bf16 training steps of one model.

    profile_to: after the timed steps, profile 10 more with ``torch.profiler`` and write the
    operators' table (sorted by their own device time) to this file.
    """
    model = bt.build_model(framework, workload).to(device).train()
    if fsdp:
        sharding.shard(model, device)
    # fused, as the trainer's AdamW (FSDP's DTensor shards included)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = torch.compile(model) if compile_ else model
    data = [{k: v.to(device) for k, v in b[framework].items()} for b in batches]

    def step(i: int, fwd=forward) -> float:
        batch = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = fwd(batch).loss if framework == "ptmkit" else fwd(**batch).loss
        loss.float().backward()
        opt.step()
        return float(loss.detach())

    with counter() as fc:  # eager, on the first batch: the counter sees every operation
        step(0, model)
    flops = float(fc.get_total_flops())
    for i in range(warmup):
        step(i + 1)
    sync(device)
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step(i)
    sync(device)
    seconds = time.perf_counter() - t0
    if profile_to is not None:
        write_profile(lambda i: step(steps + i), device, profile_to)
    tokens = sum(int(b[framework]["input_ids"].numel()) for b in (batches[i % len(batches)] for i in range(steps)))
    peak = mfu.peak_flops(device, torch.bfloat16, n=2048)
    return {"tokens_per_s": tokens / seconds, "flops_per_step": flops, "mfu": mfu.mfu(flops * steps / seconds, peak),
            "loss": loss, "peak_flops": peak}


def write_profile(step, device: torch.device, path: Path, steps: int = 10) -> None:
    """Profile ``steps`` calls of ``step`` and write the operators' table to ``path``.

    Under FSDP every rank profiles (the steps hold collectives); rank 0 writes.
    """
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            step(i)
        sync(device)
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(prof.key_averages().table(sort_by=key, row_limit=40))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--workloads", nargs="+", choices=tuple(SIZES), default=list(SIZES))
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    p.add_argument("--compiled-only", action="store_true", help="only the torch.compile rows")
    p.add_argument("--fsdp", action="store_true", help="ptmkit under FSDP only (launch with torchrun)")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes, a few steps, on the CPU")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="also profile 10 steps of each row and write its operator table to DIR/WORKLOAD_ROW.txt")
    args = p.parse_args()
    if args.dry_run:
        args.steps, args.warmup, args.batch_size, args.seq_len = 2, 1, 4, 32
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    if args.fsdp:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
    main_rank = not args.fsdp or torch.distributed.get_rank() == 0
    result: dict = {"device": mfu.device_name(device), "steps": args.steps, "batch_size": args.batch_size,
                    "seq_len": args.seq_len, "dry_run": args.dry_run}
    for workload in args.workloads:
        configure(workload, args.dry_run)
        batches = bt.make_batches(workload, args.batch_size, args.seq_len, 4)
        if args.fsdp:
            rows = {"ptmkit_fsdp": ("ptmkit", False, True)}
        else:
            rows = {} if args.compiled_only else {"ptmkit": ("ptmkit", False, False), "hf": ("hf", False, False)}
            if not args.no_compile:
                rows.update({"ptmkit_compiled": ("ptmkit", True, False), "hf_compiled": ("hf", True, False)})
        for name, (framework, compile_, fsdp) in rows.items():
            profile_to = args.profile / f"{workload}_{name}.txt" if args.profile else None
            r = measure(framework, workload, batches, device, args.steps, args.warmup, compile_, fsdp, profile_to)
            if main_rank:
                share = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
                print(f"{workload:4s} {name:16s} {r['tokens_per_s']:12,.0f} tokens/s  MFU {share}  "
                      f"({format_flops(r['flops_per_step'])}/step, loss {r['loss']:.3f})", flush=True)
            result[f"{workload}_{name}_tokens_per_s"] = r["tokens_per_s"]
            result[f"{workload}_{name}_mfu"] = r["mfu"]
            result["peak_bf16_flops"] = r["peak_flops"]
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if not args.fsdp and not args.compiled_only:
            result[f"{workload}_speedup"] = result[f"{workload}_ptmkit_tokens_per_s"] / result[f"{workload}_hf_tokens_per_s"]
            if not args.no_compile:
                result[f"{workload}_compiled_speedup"] = (result[f"{workload}_ptmkit_compiled_tokens_per_s"]
                                                          / result[f"{workload}_hf_compiled_tokens_per_s"])
    if args.fsdp:
        torch.distributed.destroy_process_group()
    if main_rank:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
