"""A torch device the user named on the command line (``--device``), checked before any work:
an unknown name, or a GPU this PyTorch build or machine does not have, is a :class:`PtmError`
that says what is available (PyTorch's own errors are an assertion or a list of twenty device
types, raised only once a model is being moved)."""

from __future__ import annotations

import torch

from ptmkit.errors import PtmError

# What ptm runs on; other torch device types (meta, xla, ...) cannot run a model here.
KINDS = ("cpu", "cuda", "mps")


def available() -> str:
    """The devices usable here, for messages: ``'cpu'``, ``'cpu, cuda (cuda:0..cuda:3)'``, ..."""
    names = ["cpu"]
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        names.append("cuda" + (f" (cuda:0..cuda:{n - 1})" if n > 1 else ""))
    if torch.backends.mps.is_available():
        names.append("mps")
    return ", ".join(names)


def resolve_device(name: str, flag: str = "--device") -> torch.device:
    """``name`` (``cpu``, ``cuda``, ``cuda:N``, ``mps``) as a ``torch.device`` usable here."""
    try:
        device = torch.device(str(name).strip())
    except RuntimeError:
        raise PtmError(f"{flag} {name!r} is not a device; use one of: {available()}") from None
    if device.type not in KINDS:
        raise PtmError(f"{flag} {name!r}: ptm runs on cpu, cuda or mps; available here: {available()}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build of PyTorch" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise PtmError(f"{flag} {name} but this is {build} (torch {torch.__version__}); use {flag} cpu")
        if (device.index or 0) >= torch.cuda.device_count():
            raise PtmError(f"{flag} {name} but only {torch.cuda.device_count()} CUDA device(s) are visible; "
                           f"available here: {available()}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise PtmError(f"{flag} {name} but PyTorch has no MPS (Apple GPU) support here; available here: {available()}")
    return device


__all__ = ["available", "resolve_device"]
