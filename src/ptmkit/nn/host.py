"""When a value may be read back to Python.

Reading a tensor's value on the host (``int(t)``, ``bool(t)``, ``t.nonzero()``) is cheap for a CPU
tensor, but on a GPU it waits for every queued kernel (the queue drains and the GPU idles while
Python launches the next ones), and inside ``torch.compile`` it breaks the graph.  Code that can
keep a count or a mask on the device instead asks :func:`host_reads_cheap` which way to go.
"""

from __future__ import annotations

import torch


def host_reads_cheap(t: torch.Tensor) -> bool:
    """True for a CPU tensor outside a compiled graph: reading its values back costs little."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def count(t: torch.Tensor) -> int | torch.Tensor:
    """A 0-d integer tensor as a Python int where :func:`host_reads_cheap`, else the tensor itself
    (a count that a caller reads later, e.g. the trainer with the loss)."""
    return int(t) if host_reads_cheap(t) else t


__all__ = ["count", "host_reads_cheap"]
