"""train.activation_checkpointing=true recomputes each layer in the backward pass and changes
nothing else: with dropout on, the losses and the weights equal an ordinary run's exactly (the
recomputation replays the RNG state, so it draws the same dropout masks)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ptmkit.errors import PtmError
from ptmkit.train import sharding
from ptmkit.train.trainer import read_metrics
from ptmkit.workflows.pretrain import pretrain


@pytest.mark.parametrize("preset", ["bert-tiny", "t5-tiny"])
def test_checkpointed_layers_train_exactly_as_kept_ones(tmp_path, preset):
    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house red big small and then saw it".split()
    text = tmp_path / "corpus.txt"
    text.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "\n" for _ in range(120)))
    common = ["train.batch_size=8", "train.seq_len=16", "train.max_steps=4", "train.log_every=1", "train.eval_batches=1",
              "train.num_threads=1", "train.device=cpu", "model.dropout=0.1"]
    runs = {}
    for flag in ("false", "true"):
        out = tmp_path / flag
        pretrain(preset, text, out, [*common, f"train.activation_checkpointing={flag}"], verbose=False)
        runs[flag] = out
    plain, checkpointed = (read_metrics(runs[f] / "metrics.jsonl", "train") for f in ("false", "true"))
    assert [r["loss"] for r in plain] == [r["loss"] for r in checkpointed] and len(plain) == 4
    a = load_file(runs["false"] / "checkpoints" / "step-0000004" / "model.safetensors")
    b = load_file(runs["true"] / "checkpoints" / "step-0000004" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_blocks_are_the_layers_each_once():
    from torch import nn

    class Shared(nn.Module):  # ALBERT's cross-layer sharing: one block at every depth
        def __init__(self):
            super().__init__()
            block = nn.Linear(4, 4)
            self.layers = nn.ModuleList([block] * 3)

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
            self.head = nn.Linear(4, 2)

    assert sharding.blocks(Shared()) == []  # stays with the root unit
    stack = Stack()
    assert sharding.blocks(stack) == list(stack.layers)
    assert sharding.checkpoint_activations(stack) == 2
    x = torch.randn(3, 4, requires_grad=True)
    y = stack.layers[0](x)
    assert np.isfinite(y.sum().item())
    with pytest.raises(PtmError, match="no blocks to checkpoint"):
        sharding.checkpoint_activations(nn.Sequential(nn.Linear(2, 2)))
