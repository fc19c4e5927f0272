"""Peak memory per rank of BERT-base MLM training under FSDP against DDP (2 CPU processes, gloo).

Each strategy runs in its own ``torchrun --nproc_per_node 2`` launch of this file: every rank
builds BERT-base (``bench_transformer``'s MLM workload at L 12, H 768, vocabulary 30,522) with
AdamW, wraps it (DDP) or shards it (:func:`ptmkit.train.sharding.shard`, FSDP2), and trains
``--steps`` steps on its rows of a global batch.  glibc's mmap threshold is fixed at 64 KiB
(``MALLOC_MMAP_THRESHOLD_``), so each tensor buffer is its own mapping and the resident set
follows the live tensors.  Reported per rank: ``peak_mb`` = peak RSS (``VmHWM``) minus the RSS
before the model was built, and ``state_mb`` = the bytes of parameters, gradients and AdamW
moments the rank holds after the last step.  Under DDP every rank holds all of them; under FSDP
its shard (half, on 2 ranks), plus one layer's gathered weights at a time.  Under FSDP rank 0 builds
the whole model and hands each rank its shard; rank 1 builds it on the ``meta`` device (shapes, no
memory), as ``ptm pretrain`` does, so only rank 0's peak includes the whole model at build time.

Run: ``python benchmarks/bench_fsdp_memory.py``; the last line printed is JSON with
``ddp_peak_mb``, ``fsdp_peak_mb`` (the larger of the two ranks), ``fsdp_vs_ddp_peak`` and the per-rank
peaks ``*_peak_mb_by_rank`` and ``*_built_mb_by_rank`` (RSS once the model is built, before training).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def worker(strategy: str, steps: int, batch_size: int, seq_len: int) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(HERE))
    import bench_transformer as bt

    from ptmkit.train import sharding

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    bt.HIDDEN, bt.LAYERS, bt.HEADS, bt.FFN, bt.VOCAB, bt.POSITIONS = 768, 12, 12, 3072, 30522, 512
    bt.TOKENIZER.vocab_size = bt.VOCAB
    batches = bt.make_batches("mlm", batch_size, seq_len, steps)
    rows = slice(rank * batch_size // world, (rank + 1) * batch_size // world)
    data = [{k: v[rows] for k, v in b["ptmkit"].items()} for b in batches]
    base = rss_kib("VmRSS")
    # under FSDP the ranks other than 0 build the model on the meta device, as ptm pretrain does
    with torch.device("meta") if strategy == "fsdp" and rank else contextlib.nullcontext():
        model = bt.build_model("ptmkit", "mlm").train()
    built = (rss_kib("VmRSS") - base) / 1024
    if strategy == "fsdp":
        sharding.shard(model, torch.device("cpu"))
        forward = model
    else:
        forward = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for batch in data:
        opt.zero_grad(set_to_none=False)
        forward(batch).loss.backward()
        opt.step()

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    held = sum(local(p).numel() * local(p).element_size() for p in model.parameters())
    grads = sum(local(p.grad).numel() * local(p.grad).element_size() for p in model.parameters() if p.grad is not None)
    moments = sum(local(v).numel() * local(v).element_size() for s in opt.state.values() for k, v in s.items()
                  if k in ("exp_avg", "exp_avg_sq"))
    out = {"rank": rank, "peak_mb": (rss_kib("VmHWM") - base) / 1024, "state_mb": (held + grads + moments) / 2**20,
           "built_mb": built}
    gathered = [None] * world
    dist.all_gather_object(gathered, out)
    if rank == 0:
        print("RESULT " + json.dumps(gathered), flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8, help="global batch (split over the 2 ranks)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--worker", choices=("ddp", "fsdp"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.batch_size, args.seq_len)
        return
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536")
    result: dict = {"model": "bert-base MLM", "ranks": 2, "batch_size": args.batch_size, "seq_len": args.seq_len}
    for strategy in ("ddp", "fsdp"):
        proc = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--standalone", __file__, "--worker", strategy,
                               "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                               "--seq-len", str(args.seq_len)], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(proc.stdout[-2000:] + proc.stderr[-4000:])
        ranks = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
        for r in ranks:
            print(f"{strategy:4s} rank {r['rank']}: peak {r['peak_mb']:8.0f} MB above start-up, "
                  f"parameters + gradients + AdamW state held {r['state_mb']:7.0f} MB, "
                  f"{r['built_mb']:5.0f} MB once the model was built")
        result[f"{strategy}_peak_mb"] = max(r["peak_mb"] for r in ranks)
        result[f"{strategy}_peak_mb_by_rank"] = [round(r["peak_mb"]) for r in sorted(ranks, key=lambda r: r["rank"])]
        result[f"{strategy}_built_mb_by_rank"] = [round(r["built_mb"]) for r in sorted(ranks, key=lambda r: r["rank"])]
        result[f"{strategy}_state_mb"] = max(r["state_mb"] for r in ranks)
    result["fsdp_vs_ddp_peak"] = result["fsdp_peak_mb"] / result["ddp_peak_mb"]
    result["fsdp_vs_ddp_state"] = result["fsdp_state_mb"] / result["ddp_state_mb"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
