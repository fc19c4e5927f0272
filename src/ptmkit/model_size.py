"""How big would an encoder be?  Estimated before it is built, so that a config with a slip
(``model.num_layers=100000``, ``model.hidden_size=1000000``) fails at once with its size instead of
allocating for minutes or running out of memory.

The estimate builds the encoder on PyTorch's ``meta`` device (shapes only, nothing allocated) with
each layer count (an int field named ``*_layers``) at 2, then each at 3 in turn, and extrapolates
linearly: past its first and last layer, a stack grows by the same amount per layer (zero when
layers are shared).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ptmkit.errors import PtmError

log = logging.getLogger(__name__)

# More layers than this in one stack is a slip: the deepest Transformers trained have about a
# thousand in all (DeepNet, 2022), and building 100k tiny layers took minutes.
MAX_LAYERS = 1024
BYTES_PER_PARAMETER = 4  # float32, as the encoder is built


def layer_fields(cfg: Any) -> list[str]:
    """The config's layer counts: int fields whose name ends with ``layers``."""
    return [f.name for f in dataclasses.fields(cfg)
            if f.name.endswith("layers") and isinstance(getattr(cfg, f.name), int) and not isinstance(getattr(cfg, f.name), bool)]


# In-place ops that change a tensor's shape: run even on the meta device.
_RESHAPING = {"resize_", "resize_as_", "set_", "as_strided_", "unsqueeze_", "squeeze_", "t_", "transpose_",
              "swapdims_", "swapaxes_"}


class _NoInPlace(TorchFunctionMode):
    """Skips the other in-place tensor ops (``normal_``, ``uniform_``, ``zero_``, ...) on meta
    tensors: they change no shape, and on the meta device the first of them imports torch._dynamo
    (2 s on every command that builds a model)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by keyword
        if name.endswith("_") and not name.endswith("__") and name not in _RESHAPING \
                and isinstance(target, torch.Tensor) and target.is_meta:
            return target
        return func(*args, **kwargs)


def _count(cls: type, cfg: Any) -> int:
    with torch.device("meta"), _NoInPlace():
        module = cls(cfg)
    return sum(p.numel() for p in module.parameters())


def estimate_parameters(cls: type, cfg: Any) -> int | None:
    """The number of parameters ``cls(cfg)`` would have, or None when the encoder cannot be built on
    the meta device (the estimate is then skipped)."""
    fields = [f for f in layer_fields(cfg) if getattr(cfg, f) > 2]
    try:
        # two layers per stack, then one more: the first and the last layer may differ from the
        # middle ones (AWD-LSTM's last layer projects back to the embedding width)
        base_cfg = dataclasses.replace(cfg, **{f: 2 for f in fields})
        base = _count(cls, base_cfg)
        total = base
        for f in fields:
            per_layer = _count(cls, dataclasses.replace(base_cfg, **{f: 3})) - base
            total += per_layer * (getattr(cfg, f) - 2)
    except Exception as exc:  # noqa: BLE001 - an estimate only; the real build reports real errors
        log.debug("no size estimate for %s: %s", cls.__name__, exc)
        return None
    return total


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _bytes(n: float) -> str:
    """``3.4e9`` -> ``'3.4 GB'``."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 1e6:.3g} MB"


def check_size(name: str, cls: type, cfg: Any, prefix: str = "model") -> None:
    """Raise :class:`PtmError` before ``cls(cfg)`` is built when a layer count exceeds
    :data:`MAX_LAYERS` or the float32 parameters alone would not fit in the available memory;
    the message gives the estimated parameter count and size."""
    deep = [f for f in layer_fields(cfg) if getattr(cfg, f) > MAX_LAYERS]
    params = estimate_parameters(cls, cfg)
    size = "" if params is None else f" (about {params:.3g} parameters, {_bytes(params * BYTES_PER_PARAMETER)} in float32)"
    if deep:
        f = deep[0]
        raise PtmError(
            f"{prefix}.{f}={getattr(cfg, f)} is beyond the sanity limit of {MAX_LAYERS} layers for the {name} "
            f"encoder{size}; is it a typo?"
        )
    if params is None:
        return
    free = available_memory()
    if free is not None and params * BYTES_PER_PARAMETER > free:
        sizes = ", ".join(f"{prefix}.{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg)
                          if f.name.endswith(("_size", "layers", "vocab_size", "max_position", "dim"))
                          and isinstance(getattr(cfg, f.name), int))
        raise PtmError(
            f"the {name} encoder would have about {params:.3g} parameters: {_bytes(params * BYTES_PER_PARAMETER)} in "
            f"float32 for the weights alone, more than the {_bytes(free)} of memory available ({sizes}); choose "
            f"smaller sizes"
        )


__all__ = ["MAX_LAYERS", "available_memory", "check_size", "estimate_parameters", "layer_fields"]
