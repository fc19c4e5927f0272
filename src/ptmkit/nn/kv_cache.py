"""The key/value cache of causal self-attention, for incremental decoding.

A causal model's keys and values at positions ``0 .. t-1`` do not change when position ``t`` is
appended, so decoding keeps them and runs the model on the new positions only: each generated
token then costs one position per layer instead of a re-run of the whole prefix.

Appending by ``torch.cat`` copies the whole past into a fresh tensor on every step (``O(t)`` bytes a
step and layer, ``O(t^2)`` over a generation, and an allocation each time).  :class:`KVStore`
keeps a layer's keys and values in storage with room to spare, so a step writes only its own
positions; the cache hands out views of the filled part, so readers see plain ``[B, heads, t, d]``
tensors either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

KV = tuple[torch.Tensor, torch.Tensor]  # attention keys and values, each [B, heads, t, d]
MIN_ROOM = 64  # spare positions a store makes at least: a generation of that many steps never regrows


def select_rows(kv: list[KV | None], rows: torch.Tensor) -> list[KV | None]:
    """Per layer keys and values ``[B, heads, t, d]`` -> ``[N, heads, t, d]`` whose row ``i`` is row
    ``rows[i]`` (``rows [N]`` int64; repeats allowed: ``arange(B).repeat_interleave(k)`` gives
    every row ``k`` copies).  Layers not run yet (``None``) stay ``None``."""
    return [None if layer is None else (layer[0].index_select(0, rows), layer[1].index_select(0, rows))
            for layer in kv]


class KVStore:
    """One layer's keys and values in storage ``[B, heads, capacity, d]`` whose first ``filled``
    positions are written.  :meth:`append` writes new positions in place while they fit (grown by a
    quarter, at least :data:`MIN_ROOM` positions, when they do not: amortised O(1) copies per
    position) and never beyond ``limit`` positions (the model's context, if it has one)."""

    def __init__(self, past: KV, limit: int | None = None) -> None:
        self.limit = limit
        self.k, self.v = self._storage(past[0], past[0].shape[2])
        self.filled = 0
        self._write(past)

    def _storage(self, like: torch.Tensor, needed: int) -> KV:
        capacity = needed + max(MIN_ROOM, needed // 4)
        if self.limit is not None:
            capacity = max(needed, min(capacity, self.limit))
        B, heads, _, d = like.shape
        return like.new_empty(B, heads, capacity, d), like.new_empty(B, heads, capacity, d)

    def _write(self, new: KV) -> KV:
        t0, T = self.filled, new[0].shape[2]
        if t0 + T > self.k.shape[2]:  # full: move the filled part into larger storage once
            k, v = self._storage(self.k, t0 + T)
            k[:, :, :t0], v[:, :, :t0] = self.k[:, :, :t0], self.v[:, :, :t0]
            self.k, self.v = k, v
        self.k[:, :, t0:t0 + T], self.v[:, :, t0:t0 + T] = new
        self.filled = t0 + T
        return self.k[:, :, :self.filled], self.v[:, :, :self.filled]

    def append(self, length: int, new: KV) -> KV | None:
        """Positions ``0 .. length - 1`` (held here) followed by ``new`` (each ``[B, heads, T, d]``):
        views ``[B, heads, length + T, d]``.  ``None`` when positions after ``length`` are already
        written (an earlier cache extended a second time: its later positions belong to the first
        extension, which must not change) or the rows differ: the caller copies instead."""
        if length != self.filled or new[0].shape[0] != self.k.shape[0]:
            return None
        return self._write(new)


@dataclass
class KVSlot:
    """One layer's place in a :class:`KVCache` during a forward pass: its cached keys and values
    ``past`` (or ``None``) and the store holding them; :func:`extend` appends through it and leaves
    the store the extended keys and values live in."""

    past: KV | None
    store: KVStore | None
    limit: int | None = None

    def extend(self, new: KV) -> KV:
        if self.past is None:
            self.store = KVStore(new, self.limit)
            return self.store.k[:, :, :self.store.filled], self.store.v[:, :, :self.store.filled]
        if self.store is not None:
            out = self.store.append(self.past[0].shape[2], new)
            if out is not None:
                return out
        self.store = KVStore(self.past, self.limit)  # copy the past once into storage with room
        return self.store._write(new)


def extend(past: KV | KVSlot | None, new: KV) -> KV:
    """The keys and values of the cached positions followed by ``new`` (each ``[B, heads, T, d]``):
    through the slot's store (in place) or, for plain cached tensors, by concatenation."""
    if isinstance(past, KVSlot):
        return past.extend(new)
    if past is None:
        return new
    return torch.cat([past[0], new[0]], dim=2), torch.cat([past[1], new[1]], dim=2)


@dataclass
class KVCache:
    """kv: per layer, the self-attention keys and values ``[B, heads, t, d]`` of the ``t``
    positions seen so far (``None`` before the first call); key_mask: ``[B, t]`` bool, True
    where a cached position is a real token (``False`` at left padding), or ``None`` when every
    cached position is real.  stores: per layer the :class:`KVStore` whose storage ``kv`` views
    (``None``: none yet); limit: the most positions a store makes room for (the model's context)."""

    kv: list[KV | None]
    key_mask: torch.Tensor | None = None
    stores: list[KVStore | None] | None = field(default=None, repr=False)
    limit: int | None = None

    @classmethod
    def empty(cls, num_layers: int, limit: int | None = None) -> "KVCache":
        return cls([None] * num_layers, None, [None] * num_layers, limit)

    @property
    def length(self) -> int:
        """Number of positions cached (the next position's index in the padded batch)."""
        first = self.kv[0] if self.kv else None
        return 0 if first is None else int(first[0].shape[2])

    def slots(self) -> list[KVSlot]:
        """One :class:`KVSlot` per layer for a forward pass that extends this cache."""
        stores = self.stores if self.stores is not None else [None] * len(self.kv)
        return [KVSlot(past, store, self.limit) for past, store in zip(self.kv, stores)]

    def select(self, rows: torch.Tensor) -> "KVCache":
        """The cache of the batch rows ``rows [N]`` (int64, repeats allowed), in that order: row
        ``i`` of every layer's keys and values, and of ``key_mask``, is row ``rows[i]`` of this one
        (new tensors; the next extension copies them into a store of their own)."""
        key_mask = self.key_mask.index_select(0, rows) if self.key_mask is not None else None
        return KVCache(select_rows(self.kv, rows), key_mask, None, self.limit)
