"""Model FLOPs utilisation (MFU): achieved FLOP/s over the device's dense peak for the dtype.

MFU (Chowdhery et al. 2022, PaLM) is only as honest as its denominator.  On a GPU the peak is
the vendor's *dense* figure for the training dtype (:data:`GPU_PEAKS`; H100 SXM bf16 is
989 TFLOP/s, not the 1,979 quoted with 2:4 sparsity).  A CPU has no such table: its peak
depends on the core count, the vector units (AVX-512, AMX) and the threads torch uses, so it is
*measured* once per process by a matrix-product probe (:func:`measure_matmul_peak`) with the
threads and dtype training will use.  The numerator counts the operations that actually run
(:mod:`ptmkit.flops`), not the 6·N formula.
"""

from __future__ import annotations

import functools
import logging
import platform
import time
from pathlib import Path

import torch

from ptmkit.nn import fast_linear

log = logging.getLogger(__name__)

# Dense (non-sparse) peak FLOP/s per GPU model for bf16/fp16 tensor cores, tf32 and fp32.
# Matched against ``torch.cuda.get_device_name`` by the first key contained in it (most specific first).
GPU_PEAKS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12},
    "H100 PCIe": {"bf16": 756e12, "fp16": 756e12, "tf32": 378e12, "fp32": 51e12},
    "H100 NVL": {"bf16": 835e12, "fp16": 835e12, "tf32": 418e12, "fp32": 60e12},
    "H100": {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12},  # SXM
    "A100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
    "L40S": {"bf16": 362e12, "fp16": 362e12, "tf32": 183e12, "fp32": 91.6e12},
    "L4": {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12},
    "A10": {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12},
    "RTX 4090": {"bf16": 165e12, "fp16": 165e12, "tf32": 82.6e12, "fp32": 82.6e12},
    "V100": {"fp16": 125e12, "fp32": 15.7e12},
    "T4": {"fp16": 65e12, "fp32": 8.1e12},
}

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def gpu_peak(name: str, dtype: torch.dtype, tf32: bool | None = None) -> float | None:
    """The table's dense peak for GPU ``name`` (as CUDA reports it) and ``dtype``; None if unknown.
    float32 products run on the TF32 tensor cores when ``tf32`` (default: as torch is set)."""
    key = _DTYPE_NAMES.get(dtype)
    if tf32 is None:
        tf32 = torch.backends.cuda.matmul.allow_tf32
    for model, peaks in GPU_PEAKS.items():
        if model in name:
            if key == "fp32" and tf32:
                return peaks.get("tf32", peaks.get("fp32"))
            return peaks.get(key) if key else None
    return None


def measure_matmul_peak(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", n: int = 1024,
                        seconds: float = 0.25) -> float:
    """FLOP/s of ``n x n @ n x n`` products in ``dtype`` on ``device`` with torch's current threads.

    The best of several timed rounds of about ``seconds / 5`` each (after a warm-up), so a
    background hiccup lowers no figure: a peak is the most the machine did, not the mean.  On a
    CPU both of PyTorch's routes are timed, ``torch.mm`` (MKL for float32) and oneDNN's (what
    ``ptmkit.nn.fast_linear`` takes), and the faster one is the peak: on AMD Zen 4 MKL's float32
    product ran at 0.8x oneDNN's on an idle machine and at half of it on a loaded one, where the
    model's own layers then exceeded it.
    """
    device = torch.device(device)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    routes = [torch.mm]
    if device.type == "cpu":
        routes.append(fast_linear.linear)  # x @ weight.T: the same FLOPs
    with torch.no_grad():
        return max(_rate(route, a, b, device, seconds) for route in routes)


def _rate(product, a: torch.Tensor, b: torch.Tensor, device: torch.device, seconds: float) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    product(a, b)  # warm-up: thread pool, kernel selection, packing buffers
    sync()
    t0 = time.perf_counter()
    product(a, b)
    sync()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, int(seconds / 5 / one))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            product(a, b)
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / best


@functools.lru_cache(maxsize=None)
def _cpu_peak(dtype: torch.dtype, threads: int, n: int) -> float:
    return measure_matmul_peak(dtype, "cpu", n=n)


def checked_peak(peak: float, achieved: float, device: torch.device | str, dtype: torch.dtype = torch.float32) -> float:
    """The peak to divide by, given that a run just did ``achieved`` FLOP/s.  On a CPU a rate above
    the measured peak means the start-up probe ran while the machine was busy: the peak is measured
    again (a warning says so) and is at least ``achieved``, so MFU never reads above 100 %.  A
    GPU's peak is the card's table value and stays."""
    if achieved <= peak or torch.device(device).type != "cpu":
        return peak
    _cpu_peak.cache_clear()
    again = max(peak_flops(device, dtype) or 0.0, achieved)
    log.warning("CPU peak probed at start-up (%.0f GFLOP/s) was low (the machine was busy); steps ran at %.0f GFLOP/s: "
                "MFU now against %.0f GFLOP/s, measured again", peak / 1e9, achieved / 1e9, again / 1e9)
    return again


def peak_flops(device: torch.device | str, dtype: torch.dtype = torch.float32, n: int = 1024) -> float | None:
    """The dense peak FLOP/s MFU is measured against: the table for a known GPU, the measured
    rate of ``n x n`` matrix products on a CPU (once per process, dtype, thread count and ``n``;
    the Trainer's start-up probe uses 1024, a fraction of a second; benchmarks 2048), None otherwise.
    A CPU's probe is only as good as the machine is idle: another busy process lowers it."""
    device = torch.device(device)
    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), dtype)
    if device.type == "cpu":
        return _cpu_peak(dtype, torch.get_num_threads(), n)
    return None


def training_dtype(precision: str) -> torch.dtype:
    """The dtype the matrix products of a ``train.precision`` run use."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (and on Linux its family / model numbers, which tell its generation
    where a virtual machine reports only a brand)."""
    fields: dict[str, str] = {}
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    name = fields.get("model name", platform.processor() or platform.machine())
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"{cpu_name()}, {torch.get_num_threads()} threads"
    return str(device)


def mfu(flops_per_s: float, peak: float | None) -> float | None:
    """Achieved over peak FLOP/s, or None without a peak."""
    return flops_per_s / peak if peak else None
