"""BERT-base MLM losses every 25 steps on a GPU: ptmkit against HF transformers, and ptmkit with one
thing changed at a time (dropout seed, fp32, SDPA's math kernel, unfused AdamW, no dropout).

``bench_gpu.py`` cycles four batches, so the loss it prints says how far a model got at memorising
them.  This script shows that path: every run first sits on a plateau at ln(number of labels in the
four batches), where the model predicts their marginal and ignores its input, and leaves it at a
step that depends on the seed and on rounding.  ``--cpu`` runs it at tiny sizes (the check of the
script itself).  The last line printed is JSON.

Run: ``python benchmarks/gpu_mlm_losses.py [--steps 200]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu as bg  # noqa: E402
import bench_transformer as bt  # noqa: E402

VARIANTS = {  # name: (framework, overrides)
    "hf bf16": ("hf", {}),
    "ptmkit bf16": ("ptmkit", {}),
    "ptmkit bf16, dropout seed 1": ("ptmkit", {"seed": 1}),
    "ptmkit fp32": ("ptmkit", {"dtype": torch.float32}),
    "ptmkit bf16, SDPA math kernel": ("ptmkit", {"math": True}),
    "ptmkit bf16, unfused AdamW": ("ptmkit", {"fused": False}),
    "ptmkit bf16, no dropout": ("ptmkit", {"dropout": 0.0}),
    "hf bf16, no dropout": ("hf", {"dropout": 0.0}),
}


def losses(framework: str, device: torch.device, steps: int, tiny: bool, dtype=torch.bfloat16, dropout: float = 0.1,
           math: bool = False, seed: int = 0, fused: bool = True, every: int = 25) -> dict[int, float]:
    """{step: loss} of ``steps`` AdamW steps (lr 1e-4) on the four cycled batches of bench_gpu.py."""
    bg.configure("mlm", tiny)
    bt.DROPOUT = dropout
    try:
        batches = bt.make_batches("mlm", 4 if tiny else 32, 32 if tiny else 128, 4)
        model = bt.build_model(framework, "mlm").to(device).train()  # seeded: the same weights every run
    finally:
        bt.DROPOUT = 0.1
    torch.manual_seed(seed)  # the dropout stream
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused and device.type == "cuda")
    data = [{k: v.to(device) for k, v in b[framework].items()} for b in batches]
    out = {}
    for i in range(steps + 1):
        batch = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        kernel = (torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH) if math
                  else contextlib.nullcontext())
        with kernel, torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype != torch.float32):
            loss = model(batch).loss if framework == "ptmkit" else model(**batch).loss
        loss.float().backward()
        opt.step()
        if i % every == 0 or i == steps:
            out[i] = float(loss.detach())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU")
    args = p.parse_args()
    tiny = args.cpu or not torch.cuda.is_available()
    device = torch.device("cpu" if tiny else "cuda")
    steps = min(args.steps, 8) if tiny else args.steps
    result: dict = {"device": bg.mfu.device_name(device), "steps": steps, "tiny": tiny}
    for name, (framework, overrides) in VARIANTS.items():
        t0 = time.perf_counter()
        curve = losses(framework, device, steps, tiny, **overrides)
        print(f"{name:30s} {time.perf_counter() - t0:5.1f} s  " + "  ".join(f"{s}:{v:.2f}" for s, v in curve.items()),
              flush=True)
        result[name] = curve
    print(json.dumps(result))


if __name__ == "__main__":
    main()
