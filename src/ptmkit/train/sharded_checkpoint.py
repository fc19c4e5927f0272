"""Sharded checkpoints (``torch.distributed.checkpoint``, DCP): every rank writes its own shards.

A run under ``train.strategy=fsdp`` saves::

    step-0000200/  config.json  tokenizer.json  trainer_state.pt  tied.json
                   sharded/     .metadata  __0_0.distcp  __1_0.distcp …   (model + optimizer)
                   model.safetensors                                     (the final checkpoint only)

No rank gathers the model or the optimizer to save them: each writes the shards it holds, and
DCP's metadata records where every piece of every tensor lives, keyed by parameter name.  So a
checkpoint loads at any world size (2 → 1, 1 → 2, …): the loader asks for the pieces its own
layout needs, and a single process (``ptm finetune``, ``ptm evaluate``) reads the whole.  The
optimizer state is keyed by parameter name too (not by position), which is what makes it
portable.  ``trainer_state.pt`` holds the rest (step, schedule, RNG streams, log window), as
for every run.

The run's last checkpoint also gets one ``model.safetensors`` (gathered once, at the end), so
downstream commands read it as any other run.  An intermediate checkpoint is consolidated into
one on first use by :func:`consolidate` (``tied.json`` names the weights stored once, as
``safetensors`` does for tied embeddings).
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save, save_file
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_bytes
from ptmkit.train import distributed as dist

log = logging.getLogger(__name__)

SHARDED_DIR = "sharded"
TIED_FILE = "tied.json"
MODEL_FILE = "model.safetensors"  # checkpoint.MODEL_FILE (checkpoint.py imports this module)


def _dcp():
    """``torch.distributed.checkpoint`` and its state-dict helpers, imported on first use: they
    register the ``DTensor`` operators (about 0.7 s), which no run without sharding needs."""
    import torch.distributed.checkpoint as dcp
    import torch.distributed.checkpoint.state_dict as sd

    # one process reading or writing shards is intended here (a run moved to another world size)
    warnings.filterwarnings("ignore", message=r"torch\.distributed is (disabled|unavailable)")
    return dcp, sd


def is_sharded(ck: Path) -> bool:
    """Does checkpoint ``ck`` hold DCP shards?"""
    return (Path(ck) / SHARDED_DIR / ".metadata").is_file()


def tied_groups(model: nn.Module) -> list[list[str]]:
    """Names that share one parameter (tied embeddings, shared layers), each group sorted."""
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [sorted(names) for names in by_id.values() if len(names) > 1]


def write_tied(directory: Path, model: nn.Module) -> None:
    (Path(directory) / TIED_FILE).write_text(json.dumps(tied_groups(model)) + "\n", encoding="utf-8")


def save_shards(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write ``directory/sharded``: this rank's pieces of the weights and optimizer state (collective)."""
    dcp, sd = _dcp()
    model_state, optim_state = sd.get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(Path(directory) / SHARDED_DIR),
             no_dist=not dist.is_distributed())


def load_shards(ck: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Fill ``model`` (and ``optimizer``) from checkpoint ``ck``'s shards, whatever the world size
    that wrote them (collective when distributed; ``model`` may be sharded or not)."""
    where = str(Path(ck) / SHARDED_DIR)
    no_dist = not dist.is_distributed()
    dcp, sd = _dcp()
    try:
        if optimizer is None:
            state = {"model": sd.get_model_state_dict(model)}
            dcp.load(state, checkpoint_id=where, no_dist=no_dist)
            sd.set_model_state_dict(model, state["model"])
            return
        model_state, optim_state = sd.get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optim_state}
        dcp.load(state, checkpoint_id=where, no_dist=no_dist)
        sd.set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    except (RuntimeError, KeyError, ValueError, dcp.api.CheckpointException) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]  # DCP wraps each rank's traceback
        raise PtmError(
            f"the sharded checkpoint {ck} does not fit the model built from the config (a different model config?): "
            f"{lines[-1] if lines else type(exc).__name__}"
        ) from exc


def full_state(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """The whole weights on rank 0 (in CPU memory; ``None`` on the other ranks), tied names once.

    Collective: every rank gathers one tensor at a time and rank 0 keeps it."""
    _, sd = _dcp()
    state = sd.get_model_state_dict(model, options=sd.StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not dist.current().is_main:
        return None
    return _drop_aliases(state, tied_groups(model))


def _drop_aliases(state: dict[str, torch.Tensor], groups: list[list[str]]) -> dict[str, torch.Tensor]:
    """Keep the first name (sorted) of each tied group, as ``safetensors.torch.save_model`` does."""
    drop = {name for group in groups for name in sorted(group)[1:]}
    return {k: v.contiguous() for k, v in state.items() if k not in drop}


def write_full(directory: Path, model: nn.Module) -> None:
    """Gather the weights and write ``directory/model.safetensors`` on rank 0 (collective)."""
    state = full_state(model)
    if state is not None:
        save_file(state, str(Path(directory) / MODEL_FILE))


def read_shards(ck: Path) -> dict[str, torch.Tensor]:
    """The whole weights of sharded checkpoint ``ck`` in one process (no model needed), tied names once."""
    raw = _load_all(Path(ck) / SHARDED_DIR)
    model = raw.get("model")
    if not isinstance(model, dict) or not model:
        raise PtmError(f"the sharded checkpoint {ck} holds no model weights; it is damaged")
    groups = json.loads((Path(ck) / TIED_FILE).read_text()) if (Path(ck) / TIED_FILE).is_file() else []
    return _drop_aliases({k: v for k, v in model.items() if isinstance(v, torch.Tensor)}, groups)


def _load_all(where: Path) -> dict[str, Any]:
    dcp, _ = _dcp()
    try:
        return dcp.state_dict_loader._load_state_dict_from_keys(checkpoint_id=str(where))
    except Exception as exc:  # DCP raises several kinds for missing or damaged shards
        raise PtmError(f"the sharded checkpoint in {where} cannot be read ({type(exc).__name__}: {exc}); "
                       f"it is damaged or incomplete") from exc


def consolidate(ck: Path) -> Path:
    """Write ``ck/model.safetensors`` from the shards (once; atomically) and return its path."""
    ck = Path(ck)
    target = ck / MODEL_FILE
    if target.is_file():
        return target
    atomic_write_bytes(target, save(read_shards(ck)))
    log.info("consolidated the sharded checkpoint %s into %s", ck, target.name)
    return target
