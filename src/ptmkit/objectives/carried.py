"""State carried from one block of a stream to the next (segment recurrence, LSTM hidden states).

An objective that ``reads_streams`` gets training batches laid out as parallel streams, each
row tagged with ``stream_ids [B]`` and ``stream_steps [B]`` (see :mod:`ptmkit.data.batches`).
:class:`StreamState` keeps, per stream, named tensors written after a block and read back for
the next block of the same stream only: state written at step ``s`` is returned for step
``s + 1``, never later or across an epoch boundary (every stream restarts at step 0).  Rows are
addressed by stream id, so gradient-accumulation micro-batches each read and write their own.

The objective exposes it as carried state (``carried_state_dict``), which the trainer saves in
the training checkpoint, so a resumed run reads exactly what the uninterrupted run would have.
"""

from __future__ import annotations

from typing import Any

import torch


class StreamState:
    """Per-stream tensors: ``values[name]`` is ``[S, *shape]`` (``shape`` fixed by the first
    write), ``step [S]`` the block each stream's state follows (-1: none yet)."""

    def __init__(self) -> None:
        self.values: dict[str, torch.Tensor] = {}
        self.step = torch.zeros(0, dtype=torch.int64)

    def read(self, ids: torch.Tensor, steps: torch.Tensor, device: Any = None) -> dict[str, torch.Tensor] | None:
        """``{name: [b, *shape]}`` for the rows ``ids`` at ``steps``, or ``None`` unless every row's
        state was written at the block just before (the rows of a batch start or continue together)."""
        ids, steps = ids.cpu(), steps.cpu()
        if not self.values or int(ids.max()) >= len(self.step) or not bool((self.step[ids] == steps - 1).all()):
            return None
        return {k: v[ids.to(v.device)].to(device) if device is not None else v[ids.to(v.device)] for k, v in self.values.items()}

    def write(self, ids: torch.Tensor, steps: torch.Tensor, values: dict[str, torch.Tensor]) -> None:
        """Store ``values`` (each ``[b, *shape]``, detached) for the rows ``ids`` written at ``steps``."""
        ids = ids.cpu()
        n = max(int(ids.max()) + 1, len(self.step))
        if n > len(self.step):
            self.step = torch.cat([self.step, torch.full((n - len(self.step),), -1, dtype=torch.int64)])
        for name, value in values.items():
            value = value.detach()
            old = self.values.get(name)
            if old is not None and old.shape[1:] != value.shape[1:]:
                raise ValueError(f"stream state {name!r} has shape {tuple(old.shape[1:])} per stream, got {tuple(value.shape[1:])}")
            if old is not None and old.device != value.device:  # restored on the CPU, training elsewhere
                self.values[name] = old = old.to(value.device)
            if old is None or old.shape[0] < n:
                new = torch.zeros(n, *value.shape[1:], dtype=value.dtype, device=value.device)
                if old is not None:
                    new[: old.shape[0]] = old.to(new.device)
                self.values[name] = old = new
            old[ids.to(old.device)] = value.to(old.device, old.dtype)
        self.step[ids] = steps.cpu()

    def state_dict(self) -> dict[str, Any]:
        return {"values": {k: v.detach().cpu().clone() for k, v in self.values.items()}, "step": self.step.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values = {k: v.clone() for k, v in state["values"].items()}
        self.step = state["step"].clone()
