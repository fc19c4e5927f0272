"""``train.compile``: a BERT step traced by ``torch.compile`` computes what the eager step computes,
and the CPU-only code paths (the numba dropout, the host-side vocabulary check) step aside inside a
traced graph.  The ``aot_eager`` backend traces as ``inductor`` does (Dynamo, AOTAutograd) without
compiling C++, so these tests take seconds."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import special_ids

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.nn import dropout as dropout_module
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.mlm import MaskedLM, MLMConfig

VOCAB = 60


def tiny_mlm(p: float = 0.0) -> PretrainModel:
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position=32, dropout=p, attention_dropout=p, pooler=False)
    encoder = TransformerEncoder(cfg)
    return PretrainModel(encoder, MaskedLM(MLMConfig(nsp=False), encoder, special_ids(VOCAB)))


def mlm_batch(model: PretrainModel, seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(4, 16)).astype(np.int64)
    attention = np.ones_like(ids)
    attention[1, 12:] = 0  # one padded row: the compiled graph must take the mask too
    positions, labels = model.objective.mask_tokens(ids, attention, rng)
    labels[2, -1] = -100  # an unused slot: the compiled path runs it through the head and ignores it
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return {"input_ids": t(ids), "attention_mask": t(attention), "token_type_ids": t(np.zeros_like(ids)),
            "mlm_positions": t(positions), "mlm_labels": t(labels)}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_mlm_step_equals_the_eager_step():
    """Eager on a CPU gathers the labelled slots; compiled, every slot goes through the head with
    the unused ones ignored: the same loss, accuracy, prediction count and gradients."""
    eager = tiny_mlm()
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, backend="aot_eager")
    batch = mlm_batch(eager)
    outs = [model(batch) for model in (eager, compiled)]
    for out in outs:
        out.loss.backward()
    (a, b) = outs
    predicted = int((batch["mlm_labels"] != -100).sum())
    assert torch.allclose(a.loss, b.loss, rtol=1e-6) and int(a.n_predictions) == int(b.n_predictions) == predicted
    assert torch.allclose(a.metrics["mlm_acc"], b.metrics["mlm_acc"])
    for (name, a), b in zip(eager.named_parameters(), twin.parameters()):
        assert a.grad is not None and torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7), name


def test_dropout_inside_a_compiled_graph_is_torchs(monkeypatch):
    """The numba mask would break the graph at every dropout: traced, dropout is F.dropout."""

    def refuse(*args):
        raise AssertionError("the numba dropout ran inside a compiled graph")

    monkeypatch.setattr(dropout_module._HashDropout, "apply", refuse)
    model = tiny_mlm(p=0.1)
    loss = torch.compile(model, backend="aot_eager")(mlm_batch(model)).loss
    loss.backward()
    assert torch.isfinite(loss)
    x = torch.ones(20_000)
    kept = torch.compile(lambda t: dropout_module.dropout(t, 0.25), backend="aot_eager")(x)
    assert abs(float((kept == 0).float().mean()) - 0.25) < 0.02 and torch.allclose(kept[kept != 0], torch.tensor(4 / 3))


def test_compiled_encoder_still_refuses_an_id_outside_the_vocabulary():
    model = tiny_mlm()
    encoder = torch.compile(model.backbone, backend="aot_eager")
    ids = torch.full((2, 8), 7)
    encoder(ids)  # in range: runs
    ids[1, 3] = VOCAB + 5
    with pytest.raises(RuntimeError, match="outside the model's vocabulary"):
        encoder(ids)
