"""ptmkit's CPU kernels against the PyTorch code they replace, interleaved in one process.

Each pair runs the same operation both ways, alternating call by call (``--repeats`` times, after
one warm-up call each), and reports the median milliseconds of each side and their ratio
(PyTorch / kernel, so > 1 means the kernel is faster).  Shapes are those of
``bench_transformer.py``'s causal LM (batch 32 x 128, hidden 256, FFN 1024, vocabulary 8,000):

- ``gelu_tanh_{fwd,bwd}_{fp32,bf16}``: ``F.gelu(approximate="tanh")`` and its backward against
  ``ptmkit.nn.pointwise``'s kernels, one ``[4096, 1024]`` tensor;
- ``loss_tile_bf16``: one ``[524, 8000]`` bf16 tile of ``linear_ce``: PyTorch's route (cast to
  fp32, log-softmax, NLL, exp, cast back) against ``softmax_nll_`` in place;
- ``mlm_ce_fwd_bwd_bf16``: the MLM head's ``[608, 8000]`` softmax cross-entropy, forward and
  backward, PyTorch's (``F.cross_entropy`` on the fp32 cast) against ``softmax_cross_entropy``;
- ``linear_ce_{fp32,bf16}``: the causal LM's whole loss, ``[4096, 256]`` x ``[8000, 256]``,
  forward + backward, as ``linear_cross_entropy`` computes it (no PyTorch counterpart here:
  the plain ``F.cross_entropy(F.linear(...))`` materialises the logits), reported alone.

The kernels run on one thread and PyTorch on ``--threads`` (default 2), as in a training step.
Measure on an idle machine.  The last line printed is JSON.

    python benchmarks/bench_cpu_kernels.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from ptmkit.nn import pointwise, softmax_ce
from ptmkit.nn.linear_ce import linear_cross_entropy


def _pair(torch_fn: Callable[[], object], kernel_fn: Callable[[], object], repeats: int) -> dict:
    times: dict[str, list[float]] = {"torch": [], "kernel": []}
    torch_fn(), kernel_fn()
    for i in range(repeats):
        order = (("torch", torch_fn), ("kernel", kernel_fn)) if i % 2 == 0 else (("kernel", kernel_fn), ("torch", torch_fn))
        for name, fn in order:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    t, k = statistics.median(times["torch"]), statistics.median(times["kernel"])
    return {"torch_ms": round(t * 1e3, 3), "kernel_ms": round(k * 1e3, 3), "ratio": round(t / k, 3)}


def _alone(fn: Callable[[], object], repeats: int) -> dict:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"ms": round(statistics.median(times) * 1e3, 3)}


def gelu_pairs(repeats: int) -> dict:
    out = {}
    g = torch.Generator().manual_seed(0)
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x = (torch.randn(4096, 1024, generator=g) * 2).to(dtype)
        grad = torch.randn(4096, 1024, generator=g).to(dtype)
        kernel_out = torch.empty_like(x)
        flat = pointwise._numpy_flat
        out[f"gelu_tanh_fwd_{name}"] = _pair(
            lambda: F.gelu(x, approximate="tanh"),
            lambda: pointwise._gelu_tanh_forward(flat(x), flat(kernel_out)), repeats)
        out[f"gelu_tanh_bwd_{name}"] = _pair(
            lambda: torch.ops.aten.gelu_backward(grad, x, approximate="tanh"),
            lambda: pointwise._gelu_tanh_backward(flat(x), flat(grad), flat(kernel_out)), repeats)
    return out


def loss_tile_pair(repeats: int) -> dict:
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(524, 8000, generator=g) * 3).bfloat16()
    target = torch.randint(0, 8000, (524,), generator=g)
    tile, buf = logits.clone(), torch.empty(524, 8000)

    def torch_route():
        tile.copy_(logits)
        logp = torch.log_softmax(buf.copy_(tile), 1, out=buf)
        nll = -logp.gather(1, target[:, None]).squeeze(1)
        tile.copy_(logp.exp_())
        return nll

    def kernel_route():
        tile.copy_(logits)
        return softmax_ce.softmax_nll_(tile, target)

    return {"loss_tile_bf16": _pair(torch_route, kernel_route, repeats)}


def mlm_backward_pair(repeats: int) -> dict:
    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(608, 8000, generator=g) * 3).bfloat16()
    target = torch.randint(0, 8000, (608,), generator=g)

    def torch_route():
        x = logits.clone().requires_grad_()
        F.cross_entropy(x.float(), target).backward()

    def kernel_route():
        x = logits.clone().requires_grad_()
        softmax_ce.softmax_cross_entropy(x, target)[0].backward()

    return {"mlm_ce_fwd_bwd_bf16": _pair(torch_route, kernel_route, repeats)}


def linear_ce_alone(repeats: int) -> dict:
    g = torch.Generator().manual_seed(3)
    h = torch.randn(4096, 256, generator=g, requires_grad=True)
    w = (torch.randn(8000, 256, generator=g) * 0.05).requires_grad_()
    target = torch.randint(0, 8000, (4096,), generator=g)
    out = {}
    for name, bf16 in (("fp32", False), ("bf16", True)):
        def step(bf16=bf16):
            h.grad = w.grad = None
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = linear_cross_entropy(h, w, None, target)
            loss.backward()
        out[f"linear_ce_{name}"] = _alone(step, max(3, repeats // 3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=21, help="timed calls per side (alternating)")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result = {"threads": args.threads, "torch": torch.__version__}
    for part in (gelu_pairs, loss_tile_pair, mlm_backward_pair, linear_ce_alone):
        for key, value in part(args.repeats).items():
            result[key] = value
            print(f"{key}: {value}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
