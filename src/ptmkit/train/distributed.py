"""Data-parallel training under ``torchrun`` with PyTorch's own engine (``torch.distributed``).

``torchrun`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; :func:`init_distributed` reads them
and starts the process group (gloo on CPU, NCCL on CUDA).  Without them everything here is a
no-op for a single process, so the same code runs both ways.
"""

from __future__ import annotations

import atexit
import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ptmkit.errors import PtmError


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def env_info() -> DistInfo:
    """Rank and world size from the ``torchrun`` environment (single process when absent)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return DistInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
    return DistInfo()


def resolve_device(name: str, info: DistInfo | None = None) -> torch.device:
    """``auto`` -> ``cuda:LOCAL_RANK`` when CUDA is available, else ``cpu``."""
    info = info or env_info()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        name = f"cuda:{info.local_rank}"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise PtmError(f"train.device={name!r} is not a device; use auto, cpu or cuda") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise PtmError(
                f"train.device={name.split(':')[0]} but PyTorch sees no CUDA GPU (torch {torch.__version__}); "
                f"use train.device=cpu, or train.device=auto to take a GPU only when there is one"
            )
        if (device.index or 0) >= torch.cuda.device_count():
            raise PtmError(f"train.device={name} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    return device


def init_distributed(device: str = "auto", group_of_one: bool = False) -> DistInfo:
    """Start the process group if launched by ``torchrun`` (idempotent); return this process's place.

    group_of_one: start it even when ``torchrun`` launched a single process (FSDP on one GPU
    shards over a group of one: the same code path, hooks and checkpoint format as on many)."""
    info = env_info()
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not (info.enabled or (group_of_one and launched)):
        return info
    if not dist.is_initialized():
        dev = resolve_device(device, info)
        backend = "nccl" if dev.type == "cuda" else "gloo"
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(backend=backend)
        # A script that never calls cleanup() still destroys the group before the interpreter
        # finalises (gloo's worker threads otherwise abort the process at exit).
        atexit.register(cleanup, False)
    return DistInfo(dist.get_rank(), dist.get_world_size(), info.local_rank)


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def current() -> DistInfo:
    """This process's place in the running process group (single process if none)."""
    if is_distributed():
        return DistInfo(dist.get_rank(), dist.get_world_size(), env_info().local_rank)
    return DistInfo()


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over ranks in place (returned for convenience)."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """The maximum of ``tensor`` over ranks, in place (returned for convenience)."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj``, indexed by rank."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """Wrap ``model`` in ``DistributedDataParallel`` when running distributed (parameters are
    broadcast from rank 0, so every rank starts from the same weights)."""
    if not is_distributed():
        return model

    ids = [device.index] if device.type == "cuda" else None
    # Some heads may be unused by an objective (e.g. a pooler without NSP); let DDP tolerate that.
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def cleanup(succeeded: bool = True) -> None:
    """Tear the process group down.

    After a run that succeeded on every rank, the ranks first meet at a barrier and drop the
    collective work objects still referenced (DDP's reducer), so no rank tears down gloo's worker
    threads while a peer is still inside a collective or finishing its own writes (rank 0 plots
    after the last step): an unsynchronised teardown aborted a rank at exit now and then
    ("terminate called without an active exception").  After a failure, ranks may be stuck in a
    collective, so there is no barrier then (it would hang).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if succeeded:
        gc.collect()
        if dist.get_world_size() > 1:
            dist.barrier()
    dist.destroy_process_group()
