"""Keeping freed tensor memory in the heap between steps (ptmkit.train.heap)."""

import os
import subprocess
import sys

import pytest

from ptmkit.train import heap

_FAULTS = r"""
import resource, sys, torch
if sys.argv[1] == "keep":
    from ptmkit.train.heap import keep_freed_memory
    assert keep_freed_memory()
def step():  # a step's worth of activations: allocated, written, freed
    xs = [torch.ones(1 << 20) for _ in range(40)]  # 40 x 4 MB
    del xs
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def _faults_per_step(mode: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_tensors_are_not_faulted_in_again():
    default, kept = _faults_per_step("default"), _faults_per_step("keep")
    # 160 MB a step: glibc's default trims and re-faults thousands of pages of it; kept, a tenth or less
    assert default > 2_000
    assert kept < 0.25 * default


def test_user_settings_win(monkeypatch):
    monkeypatch.setattr(heap, "_applied", None)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert heap.keep_freed_memory() is False
    monkeypatch.setattr(heap, "_applied", None)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libjemalloc.so.2")
    assert heap.keep_freed_memory() is False
