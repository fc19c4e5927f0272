"""``train.compile``: a BERT step traced by ``torch.compile`` computes what the eager step computes,
and the CPU-only code paths (the numba dropout, the host-side vocabulary check) step aside inside a
traced graph.  The ``aot_eager`` backend traces as ``inductor`` does (Dynamo, AOTAutograd) without
compiling C++, so these tests take seconds."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import TINY_MLM_VOCAB, mlm_batch, special_ids, tiny_mlm

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.nn import dropout as dropout_module
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.clm import CausalLM, CLMConfig


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
    compiled = torch.compile(twin, backend="aot_eager", fullgraph=True)  # one graph: no host read-back
    batch = mlm_batch(eager)
    outs = [model(batch) for model in (eager, compiled)]
    for out in outs:
        out.loss.backward()
    (a, b) = outs
    predicted = int((batch["mlm_labels"] != -100).sum())
    assert torch.allclose(a.loss, b.loss, rtol=1e-6) and int(a.n_predictions) == int(b.n_predictions) == predicted
    assert int(a.n_tokens) == int(b.n_tokens) == int(batch["attention_mask"].sum())
    assert torch.allclose(a.metrics["mlm_acc"], b.metrics["mlm_acc"])
    for (name, a), b in zip(eager.named_parameters(), twin.parameters()):
        assert a.grad is not None and torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7), name


def test_compiled_causal_lm_step_with_padding_is_one_graph_and_equals_eager():
    """A causal LM batch with padding (a corpus's last, shorter block): the ignored targets stay in
    the loss's tiles with weight 0 and the counts stay tensors, so the step is one graph."""
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=TINY_MLM_VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position=32, type_vocab_size=0, norm="pre", pooler=False, dropout=0.0,
                            attention_dropout=0.0)
    encoder = TransformerEncoder(cfg)
    eager = PretrainModel(encoder, CausalLM(CLMConfig(), encoder, special_ids(TINY_MLM_VOCAB)))
    twin = copy.deepcopy(eager)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, TINY_MLM_VOCAB, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 7:] = 0
    labels = torch.randint(5, TINY_MLM_VOCAB, (3, 12), generator=g).masked_fill(mask == 0, -100)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    a = eager(batch)
    b = torch.compile(twin, backend="aot_eager", fullgraph=True)(batch)
    a.loss.backward()
    b.loss.backward()
    assert torch.allclose(a.loss, b.loss, rtol=1e-6)
    assert int(a.n_predictions) == int(b.n_predictions) == 31 and int(a.n_tokens) == int(b.n_tokens) == 31
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-7), name


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
    ids[1, 3] = TINY_MLM_VOCAB + 5
    with pytest.raises(RuntimeError, match="outside the model's vocabulary"):
        encoder(ids)
