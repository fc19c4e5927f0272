"""The AWD-LSTM encoder and its LM objective: the regularisers' statistics, AR/TAR against a
direct float64 computation, the preset's parameter count, left-to-right scoring."""

from __future__ import annotations

import math

import pytest
import torch

from ptmkit import registry
from ptmkit.build import build_model, resolve_config
from ptmkit.encoders.awd_lstm import AWDLSTMConfig, AWDLSTMEncoder, embedding_dropout, locked_dropout
from ptmkit.errors import PtmError
from ptmkit.presets import load_preset


class Tok:
    vocab_size = 40
    pad_id, unk_id, cls_id, sep_id, mask_id = 0, 1, 2, 3, 4
    eos_id = None


def small(**kw) -> AWDLSTMConfig:
    base = dict(vocab_size=40, embedding_size=6, hidden_size=10, num_layers=3, dropout=0.0, dropouth=0.0,
                dropouti=0.0, dropoute=0.0, wdrop=0.0)
    return AWDLSTMConfig(**{**base, **kw})


def lstm_loop(layer, x: torch.Tensor, w_hh: torch.Tensor) -> torch.Tensor:
    """A step-by-step LSTM over ``x [B, T, I]`` with the hidden-to-hidden matrix ``w_hh`` at every step."""
    B, T, _ = x.shape
    H = w_hh.shape[1]
    h = x.new_zeros(B, H)
    c = x.new_zeros(B, H)
    out = []
    for t in range(T):
        gates = x[:, t] @ layer.weight_ih_l0.t() + layer.bias_ih_l0 + h @ w_hh.t() + layer.bias_hh_l0
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
    return torch.stack(out, dim=1)


def test_registered_and_config_errors():
    assert registry.get("encoder", "awd_lstm") is AWDLSTMEncoder
    for bad in (dict(wdrop=1.0), dict(dropoute=-0.1), dict(num_layers=0), dict(tie_weights="yes")):
        with pytest.raises(PtmError):
            small(**bad)


def test_paper_size_has_24m_parameters_on_ptb():
    """3 x 1150 cells, 400-dim embeddings, tied softmax, 10k words: ~24M (Merity et al. 2018, Table 1)."""
    raw = load_preset("awd-lstm")
    tok = type("T", (Tok,), {"vocab_size": 10000})()
    model = build_model(resolve_config(raw, tok), tok)
    n = sum(p.numel() for p in model.parameters())
    assert 24.0e6 < n < 24.4e6, n
    cfg = model.backbone.config
    assert (cfg.embedding_size, cfg.hidden_size, cfg.num_layers) == (400, 1150, 3)
    assert (cfg.dropout, cfg.dropouth, cfg.dropouti, cfg.dropoute, cfg.wdrop) == (0.4, 0.25, 0.4, 0.1, 0.5)
    assert model.objective.cfg.alpha == 2.0 and model.objective.cfg.beta == 1.0
    tiny = build_model(resolve_config(load_preset("awd-lstm-tiny"), tok), tok)
    assert tiny.backbone.num_layers == 2 and tiny.backbone.output_size == 128


def test_contract_shapes_layer_index_and_tying():
    enc = AWDLSTMEncoder(small())
    ids = torch.randint(0, 40, (3, 7))
    out = enc(ids, output_hidden_states=True)
    assert out.last_hidden_state.shape == (3, 7, 6)
    assert [tuple(h.shape) for h in out.hidden_states] == [(3, 7, 6), (3, 7, 10), (3, 7, 10), (3, 7, 6)]
    assert enc.output_embeddings() is enc.embedding.weight and enc.output_size == 6
    assert enc.layer_index("embedding.weight") == 0
    assert enc.layer_index("layers.2.weight_hh_l0") == 3
    assert enc.layer_index("anything") == 4
    assert AWDLSTMEncoder(small(tie_weights=False)).output_embeddings() is None


def test_weight_drop_share_scale_and_eval():
    torch.manual_seed(0)
    layer = AWDLSTMEncoder(small(hidden_size=200, wdrop=0.5)).layers[0]
    layer.train()
    w = layer.recurrent_weight()
    dropped = w == 0
    assert abs(dropped.float().mean().item() - 0.5) < 0.02  # 4H x H = 4800 entries
    assert torch.allclose(w[~dropped], 2.0 * layer.weight_hh_l0[~dropped])
    assert not torch.equal(layer.recurrent_weight(), w)  # a new mask per forward pass
    layer.eval()
    assert layer.recurrent_weight() is layer.weight_hh_l0


def test_weight_drop_same_mask_at_every_time_step():
    """The fused forward equals a step-by-step LSTM that uses one dropped matrix at every step."""
    torch.manual_seed(1)
    enc = AWDLSTMEncoder(small(wdrop=0.5, num_layers=1, tie_weights=False)).train()
    ids = torch.randint(0, 40, (2, 9))
    torch.manual_seed(5)
    fused = enc(ids).last_hidden_state
    torch.manual_seed(5)
    layer = enc.layers[0]
    w = layer.recurrent_weight()  # the same draw the forward pass made
    assert (w == 0).any()
    expected = lstm_loop(layer, enc.embedding(ids), w)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    undropped = lstm_loop(layer, enc.embedding(ids), layer.weight_hh_l0)
    assert (fused - undropped).abs().max() > 1e-3
    # gradients reach the raw matrix through the mask only
    fused.sum().backward()
    assert torch.all(layer.weight_hh_l0.grad[w == 0] == 0)
    assert layer.weight_hh_l0.grad[w != 0].abs().sum() > 0


def test_locked_dropout_one_mask_per_sequence():
    torch.manual_seed(2)
    x = torch.ones(64, 12, 50)
    y = locked_dropout(x, 0.3, training=True)
    assert torch.equal(y, y[:, :1].expand_as(y))  # the same mask at every time step
    values = torch.unique(y)
    assert len(values) == 2 and values[0] == 0 and math.isclose(float(values[1]), 1.0 / 0.7, rel_tol=1e-6)
    assert abs((y[:, 0] == 0).float().mean().item() - 0.3) < 0.03
    assert torch.equal(locked_dropout(x, 0.3, training=False), x)


def test_embedding_dropout_drops_whole_rows():
    torch.manual_seed(3)
    weight = torch.randn(2000, 8)
    dropped = embedding_dropout(weight, 0.1, training=True)
    zero_rows = (dropped == 0).all(dim=1)
    assert torch.equal((dropped == 0).any(dim=1), zero_rows)  # a row is all dropped or all kept
    assert abs(zero_rows.float().mean().item() - 0.1) < 0.02
    torch.testing.assert_close(dropped[~zero_rows], weight[~zero_rows] / 0.9)
    # every occurrence of a dropped word in the batch is zero
    enc = AWDLSTMEncoder(small(dropoute=0.5)).train()
    torch.manual_seed(4)
    out = enc(torch.full((3, 5), 7), output_hidden_states=True)
    torch.manual_seed(4)
    row_kept = embedding_dropout(enc.embedding.weight, 0.5, True)[7].abs().sum() > 0
    emb = out.hidden_states[0]
    assert bool((emb.abs().sum() > 0) == row_kept)


def test_eval_is_deterministic_and_padding_is_zero():
    enc = AWDLSTMEncoder(small(dropout=0.4, dropouth=0.3, dropouti=0.5, dropoute=0.1, wdrop=0.5)).eval()
    ids = torch.randint(5, 40, (2, 6))
    a, b = enc(ids).last_hidden_state, enc(ids).last_hidden_state
    assert torch.equal(a, b)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    padded = enc(ids, attention_mask=mask)
    torch.testing.assert_close(padded.last_hidden_state[1, :3], a[1, :3])
    assert torch.all(padded.last_hidden_state[1, 3:] == 0) and torch.all(padded.extras["dropped_output"][1, 3:] == 0)


def _objective(alpha=2.0, beta=1.0, **kw):
    config = {"model": {"encoder": "awd_lstm", **{k: getattr(small(**kw), k) for k in
                                                  ("embedding_size", "hidden_size", "num_layers", "dropout", "dropouth",
                                                   "dropouti", "dropoute", "wdrop")}},
              "objective": {"name": "awd_lm", "alpha": alpha, "beta": beta}, "train": {"seq_len": 8}}
    tok = Tok()
    return build_model(resolve_config(config, tok), tok)


def test_loss_ar_tar_equal_a_direct_computation():
    torch.manual_seed(6)
    model = _objective(dropout=0.5).train()
    ids = torch.randint(5, 40, (3, 8))
    labels = torch.randint(5, 40, (3, 8))
    mask = torch.ones(3, 8, dtype=torch.long)
    mask[2, 5:] = 0
    labels[2, 5:] = -100
    batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    torch.manual_seed(9)
    step = model(batch)
    torch.manual_seed(9)
    out = model.backbone(ids, attention_mask=mask)
    raw, dropped = out.last_hidden_state.detach().double(), out.extras["dropped_output"].detach().double()
    E, b = model.backbone.embedding.weight.detach().double(), model.objective.decoder.bias.detach().double()
    ce, n, ar_sum, ar_n, tar_sum, tar_n = 0.0, 0, 0.0, 0, 0.0, 0
    D = raw.shape[-1]
    for i in range(3):
        for t in range(8):
            if mask[i, t]:
                ar_sum += float((dropped[i, t] ** 2).sum())
                ar_n += D
                if labels[i, t] != -100:
                    ce -= float(torch.log_softmax(E @ dropped[i, t] + b, dim=0)[labels[i, t]])
                    n += 1
                if t > 0 and mask[i, t - 1]:
                    tar_sum += float(((raw[i, t] - raw[i, t - 1]) ** 2).sum())
                    tar_n += D
    ce /= n
    ar, tar = 2.0 * ar_sum / ar_n, 1.0 * tar_sum / tar_n
    assert math.isclose(float(step.metrics["lm_loss"]), ce, rel_tol=1e-5)
    assert math.isclose(float(step.metrics["ar"]), ar, rel_tol=1e-5)
    assert math.isclose(float(step.metrics["tar"]), tar, rel_tol=1e-5)
    assert math.isclose(float(step.loss.detach()), ce + ar + tar, rel_tol=1e-5)
    model.eval()  # evaluation: cross-entropy only
    ev = model(batch)
    assert "ar" not in ev.metrics and float(ev.loss.detach()) == float(ev.metrics["lm_loss"])


def test_lm_log_probs_left_to_right():
    torch.manual_seed(7)
    model = _objective(dropout=0.4, dropouth=0.3, dropouti=0.4, dropoute=0.1, wdrop=0.5).eval()
    ids = torch.randint(5, 40, (2, 9))
    lp = model.objective.lm_log_probs(model.backbone, ids)
    assert lp.shape == (2, 8) and torch.all(lp <= 0)
    # the cross-entropy of the LM on the same tokens is the mean negative log-probability
    step = model({"input_ids": ids[:, :-1], "labels": ids[:, 1:]})
    assert math.isclose(float(step.metrics["lm_loss"]), float(-lp.detach().mean()), rel_tol=1e-5)
    # x_t's score does not depend on later tokens
    changed = ids.clone()
    changed[:, 6:] = 5
    lp2 = model.objective.lm_log_probs(model.backbone, changed)
    torch.testing.assert_close(lp2[:, :5], lp[:, :5])


def test_objective_refuses_untied_and_other_encoders():
    with pytest.raises(PtmError, match="tie_weights"):
        tok = Tok()
        config = {"model": {"encoder": "awd_lstm", "embedding_size": 6, "hidden_size": 10, "tie_weights": False},
                  "objective": {"name": "awd_lm"}, "train": {}}
        build_model(resolve_config(config, tok), tok)
    with pytest.raises(PtmError, match="cannot be used with encoder"):
        resolve_config({"model": {"encoder": "lstm"}, "objective": {"name": "awd_lm"}, "train": {}}, Tok())


def test_states_carried_from_block_to_block_of_a_stream():
    """Block 2 of each stream, read from the states block 1 ended with, scores as the two blocks
    read in one pass; a block that does not continue its stream (or evaluation) starts from zeros."""
    torch.manual_seed(8)
    model = _objective().train()  # every dropout 0: the passes are comparable
    assert model.objective.reads_streams and model.objective.carries_state
    B, T = 3, 6
    ids = torch.randint(5, 40, (B, 2 * T + 1))

    def block(k, step):
        return {"input_ids": ids[:, k * T : (k + 1) * T], "labels": ids[:, k * T + 1 : (k + 1) * T + 1],
                "stream_ids": torch.arange(B), "stream_steps": torch.full((B,), step)}

    def ce(h, labels):
        E, b = model.backbone.embedding.weight, model.objective.decoder.bias
        return float(torch.nn.functional.cross_entropy((h @ E.t() + b).flatten(0, 1), labels.flatten()))

    with torch.no_grad():
        model(block(0, 0))
        carried = float(model(block(1, 1)).metrics["lm_loss"])
        whole = model.backbone(ids[:, : 2 * T]).last_hidden_state
        assert math.isclose(carried, ce(whole[:, T:], ids[:, T + 1 : 2 * T + 1]), rel_tol=1e-5)
        fresh = ce(model.backbone(ids[:, T : 2 * T]).last_hidden_state, ids[:, T + 1 : 2 * T + 1])
        assert abs(carried - fresh) > 1e-4
        assert math.isclose(float(model(block(1, 5)).metrics["lm_loss"]), fresh, rel_tol=1e-5)  # not a continuation
        model.eval()
        assert math.isclose(float(model(block(1, 1)).metrics["lm_loss"]), fresh, rel_tol=1e-5)
    # the state goes into the training checkpoint, not the weights
    state = model.objective.carried_state_dict()
    assert set(state["values"]) == {"h0", "c0", "h1", "c1", "h2", "c2"} and state["values"]["h2"].shape == (B, 6)
    assert not any("states" in k for k in model.state_dict())
    # without carrying: shuffled blocks, each from zero states
    from ptmkit.objectives.awd_lm import AWDLanguageModel, AWDLMConfig

    plain = AWDLanguageModel(AWDLMConfig(carry_state=False), model.backbone, Tok())
    assert not plain.reads_streams and not plain.carries_state
