"""StreamState: per-stream state read back only for the next block of the same stream."""

from __future__ import annotations

import pytest
import torch

from ptmkit.objectives.carried import StreamState


def test_state_is_read_for_the_next_block_only():
    s = StreamState()
    ids = torch.tensor([0, 1, 2, 3])
    assert s.read(ids, torch.zeros(4, dtype=torch.long)) is None  # nothing written yet
    h = torch.randn(4, 2, 3)
    s.write(ids[:2], torch.tensor([5, 5]), {"h": h[:2]})  # micro-batches write their own rows
    s.write(ids[2:], torch.tensor([5, 5]), {"h": h[2:]})
    torch.testing.assert_close(s.read(ids, torch.full((4,), 6))["h"], h)
    torch.testing.assert_close(s.read(torch.tensor([3, 1]), torch.full((2,), 6))["h"], h[[3, 1]])
    assert s.read(ids, torch.full((4,), 7)) is None  # a block was skipped
    assert s.read(ids, torch.zeros(4, dtype=torch.long)) is None  # a new epoch restarts the streams
    s.write(torch.tensor([6]), torch.tensor([5]), {"h": torch.ones(1, 2, 3)})  # a new stream: rows grow
    assert s.values["h"].shape == (7, 2, 3) and s.step.tolist() == [5, 5, 5, 5, -1, -1, 5]
    assert s.read(torch.tensor([4]), torch.tensor([6])) is None
    with pytest.raises(ValueError, match="shape"):
        s.write(ids, torch.zeros(4, dtype=torch.long), {"h": torch.zeros(4, 3)})


def test_state_dict_round_trip_is_exact():
    s = StreamState()
    s.write(torch.tensor([1, 0]), torch.tensor([2, 2]), {"h": torch.randn(2, 5), "c": torch.randn(2, 5)})
    t = StreamState()
    t.load_state_dict(s.state_dict())
    for name in ("h", "c"):
        assert torch.equal(t.read(torch.tensor([0, 1]), torch.tensor([3, 3]))[name], s.values[name][[0, 1]])
    assert torch.equal(t.step, s.step)
