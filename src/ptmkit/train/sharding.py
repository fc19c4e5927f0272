"""Fully sharded data parallelism (FSDP) and activation checkpointing, with PyTorch's own engine.

``train.strategy=fsdp`` shards every parameter, gradient and optimizer state over the ranks
(``torch.distributed.fsdp.fully_shard``, "FSDP2": parameters become ``DTensor`` shards, so a
rank holds ``1 / world_size`` of them and gathers one block's weights only while it runs).
The units of sharding are a model's *blocks*: the elements of every ``nn.ModuleList`` attribute
named in :data:`BLOCK_LISTS` (the Transformer, XLNet and encoder–decoder ``layers``, the LSTMs'
``forward_layers`` / ``backward_layers``), then the root takes what is left (embeddings, heads,
tied output layers).  A block that appears more than once in its list (ALBERT's cross-layer
sharing) is not a unit of its own: it stays with the root, since one set of weights serves
every depth; so is a block class with ``shard_alone = False`` (its weights are used outside its
forward, as the encoder–decoder's cross-attention projections are).  A model adds nothing to be
sharded; naming its block list so is the contract.

``train.activation_checkpointing=true`` recomputes each block's activations in the backward pass
instead of keeping them (``torch.utils.checkpoint``, non-reentrant, the RNG state replayed, so
dropout draws the same masks and the losses equal an ordinary run's): memory falls from
O(layers) to O(1) blocks of activations for about one extra forward pass of compute.
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.distributed as tdist
from torch import nn
from torch.utils.checkpoint import checkpoint

from ptmkit.errors import PtmError
from ptmkit.train import distributed as dist

log = logging.getLogger(__name__)

BLOCK_LISTS = ("layers", "forward_layers", "backward_layers")
STRATEGIES = ("ddp", "fsdp")


def _stacks(model: nn.Module):
    """Every block list of ``model``: the ``nn.ModuleList`` attributes named in :data:`BLOCK_LISTS`."""
    for module in model.modules():
        for name in BLOCK_LISTS:
            stack = getattr(module, name, None)
            if isinstance(stack, nn.ModuleList):
                yield stack


def blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of ``model`` (each once; shared blocks excluded), outermost lists first."""
    found: list[nn.Module] = []
    seen: set[int] = set()
    for stack in _stacks(model):
        ids = [id(b) for b in stack]
        for b in stack:
            shared = ids.count(id(b)) > 1
            alone = getattr(b, "shard_alone", True)
            if alone and not shared and id(b) not in seen and any(p.requires_grad for p in b.parameters()):
                seen.add(id(b))
                found.append(b)
    return found


def checkpoint_activations(model: nn.Module) -> int:
    """Make every block of ``model`` recompute its activations in the backward pass; return how many.

    The block's ``forward`` is replaced on the instance (the weights' names do not change, so
    checkpoints and exports are unaffected).  In evaluation (no grad) blocks run as usual.
    """
    done: set[int] = set()
    for stack in _stacks(model):
        for b in stack:
            if id(b) in done or getattr(b, "_ptm_checkpointed", False):
                continue
            done.add(id(b))
            b.forward = functools.partial(_checkpointed, b.forward)
            b._ptm_checkpointed = True
    if not done:
        raise PtmError(
            "train.activation_checkpointing=true, but the model has no blocks to checkpoint (an nn.ModuleList "
            f"named one of {', '.join(BLOCK_LISTS)}); set it to false for this model"
        )
    return len(done)


def _checkpointed(forward, *args, **kwargs):
    if torch.is_grad_enabled():
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return forward(*args, **kwargs)


def on_meta(model: nn.Module) -> bool:
    """Whether ``model`` was built on the meta device (shapes only, no memory)."""
    return any(t.is_meta for t in [*model.parameters(), *model.buffers()])


def shard(model: nn.Module, device: torch.device, offload: bool = False,
          mixed_precision: torch.dtype | None = None) -> nn.Module:
    """Shard ``model`` in place over the running process group (FSDP2); return it.

    Every rank ends with its shard of rank 0's weights and with rank 0's buffers (what DDP does at
    wrap time).  Ranks other than 0 may pass a model built on the meta device: only rank 0 then
    holds a whole model, and the others allocate their shards alone (``to_empty``), so a node's
    memory holds one copy of the model before training, not one per rank.

    offload: keep the sharded parameters, gradients and optimizer state in CPU memory
        (``CPUOffloadPolicy``; on CUDA each block's shard is copied to the GPU for its use).
    mixed_precision: gather and compute the parameters in this dtype (e.g. bfloat16) while the
        sharded master weights and the gradient reduction stay float32 (``MixedPrecisionPolicy``).
    """
    # imported here: it registers the DTensor operators (about 0.7 s), which only FSDP runs need
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs = {}
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    if mixed_precision is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=mixed_precision, reduce_dtype=torch.float32)
    distributed = dist.is_distributed()
    main = not distributed or dist.current().is_main
    if main and on_meta(model):
        raise PtmError("rank 0 must build the model's weights: only the other FSDP ranks may build it on the meta device")
    # rank 0's whole weights, held by reference (sharding replaces the module's parameters by shards),
    # each tensor under one name: a block shared across depths (ALBERT) is sent once
    full = {}
    if distributed and main:
        names = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
        full = {k: v for k, v in model.state_dict().items() if k in names}
    units = blocks(model)
    for b in units:
        fully_shard(b, **kwargs)
    fully_shard(model, **kwargs)
    if distributed:
        if on_meta(model):
            model.to_empty(device=torch.device("cpu") if offload else device)
        # strict=False: the names a shared block repeats are filled through their first name
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True,
                                                                   strict=False))
        with torch.no_grad():  # every buffer, kept in the state dict or not (position tables, masks)
            for b in model.buffers():
                tdist.broadcast(b, src=0)
    log.info("FSDP: %d blocks + the root sharded over %d ranks", len(units), dist.current().world_size)
    return model


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Reduce-scatter gradients after this backward (``True``) or accumulate them locally (FSDP)."""
    model.set_requires_gradient_sync(sync)


def local_value(x: torch.Tensor) -> torch.Tensor:
    """A plain tensor from a possibly distributed one (a ``DTensor`` norm is gathered in full)."""
    full = getattr(x, "full_tensor", None)
    return full() if callable(full) else x
