"""Dynamic int8 quantization (ptmkit.compress.quantize, ptm quantize): every linear layer int8 with
per-channel weight scales, errors within the bounds the scheme implies (float64 references), save ->
load bit-identical, smaller files, and clear refusals."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import fine_tuned_toy, run_cli, task_file_args, toy_sentiment
from torch import nn

from ptmkit.compress.quantize import (
    Int8Embedding,
    quantization_spec,
    quantize,
    quantized_state,
    restore,
    summary,
)
from ptmkit.encoders.awd_lstm import AWDLSTMConfig, AWDLSTMEncoder
from ptmkit.encoders.lstm import LSTMConfig, LSTMEncoder
from ptmkit.encoders.transformer import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.tasks.saved import load_task_model, save_task_model

BACKENDS = ["ao", pytest.param("torchao", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("torchao") is None, reason="torchao not installed"))]


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def encoder(sharing: str = "none", seed: int = 0) -> TransformerEncoder:
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=120, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                            max_position=32, sharing=sharing, dropout=0.0, attention_dropout=0.0)
    return TransformerEncoder(cfg).eval()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 120, (3, 16), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    return ids, mask


# ------------------------------------------------------------------------------------ numerics


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_linear_layer_errs_only_by_its_quantization_steps(backend):
    """Weights: one symmetric scale per output row, ``s_w = max|W_o| / 127.5`` (the 255 steps of
    [-128, 127]; both backends), each entry within ``s_w / 2`` of W.  Output: the int8 product equals
    the float64 product of the dequantized weights and the input up to the input's rounding,
    ``|err_o| <= sum_i |W^_oi| s_x / 2`` (int32 accumulation is exact).  s_x: ao quantizes the whole
    input over [min(x, 0), max(x, 0)] to 8 bits on a CPU with VNNI, else 7 (fbgemm's reduce_range),
    torchao each row symmetrically, ``max|x_row| / 127``.  The last row, all at the top of the
    range, times weights all at the top too, is where 8 bits would overflow int16 pair sums."""
    torch.manual_seed(0)
    lin = nn.Sequential(nn.Linear(48, 24))
    with torch.no_grad():
        lin[0].weight[0] = lin[0].weight[0].abs().max()  # a row of equal positive weights
    x = torch.randn(5, 48) * 3
    x[4] = x.max()
    spec = quantization_spec(backend)
    q = quantize(lin, spec)
    state = quantized_state(q)
    w, s_w = state["0.weight_int8"], state["0.weight_scale"].double()
    assert w.dtype == torch.int8 and s_w.shape == (24,)
    W = lin[0].weight.detach().double()
    assert torch.allclose(s_w, W.abs().amax(dim=1) / 127.5, rtol=1e-6)
    W_hat = w.double() * s_w[:, None]
    # the row's extremes sit at half a step exactly, up to the float32 rounding of s_w (x 127.5 steps)
    assert ((W_hat - W).abs() <= s_w[:, None] / 2 * (1 + 1e-4)).all()

    with torch.no_grad():
        y = q(x).double()
    x64 = x.double()
    exact = x64 @ W_hat.T + lin[0].bias.detach().double()
    if backend == "ao":
        levels = 2 ** spec["activation_bits"] - 1
        s_x = ((x64.max().clamp(min=0) - x64.min().clamp(max=0)) / levels).expand(5, 1)
    else:
        s_x = x64.abs().amax(dim=1, keepdim=True) / 127
    bound = (s_x / 2) * W_hat.abs().sum(dim=1)[None, :] + 1e-5 * (x64.abs() @ W_hat.abs().T)
    err = (y - exact).abs()
    assert (err <= bound).all(), float((err - bound).max())
    assert float(err.max()) > 0  # the input really was quantized


def test_int8_embedding_rows_are_within_half_a_step():
    torch.manual_seed(0)
    table = nn.Embedding(50, 16)
    with torch.no_grad():
        table.weight[3] = 0  # an all-zero row stays zero
    q = Int8Embedding.from_float(table)
    W = table.weight.detach().double()
    step = W.abs().amax(dim=1) / 127
    assert q.weight_int8.dtype == torch.int8
    assert torch.allclose(q.weight_scale.double(), step.clamp(min=torch.finfo(torch.float32).tiny), rtol=1e-6)
    assert ((q.weight.double() - W).abs() <= step[:, None] / 2 * (1 + 1e-6) + 1e-12).all()
    assert (q.weight[3] == 0).all()
    ids = torch.tensor([[1, 3, 49], [0, 0, 7]])
    assert torch.equal(q(ids), q.weight[ids])  # a lookup dequantizes just the rows it reads


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_linear_layer_of_the_encoder_is_quantized_and_its_output_stays_close(backend):
    """A 2-layer encoder: 4 linear layers per layer (fused qkv, out, fc1, fc2) + the pooler, all int8.
    Each layer's relative error is about a quantization step (1/127 of the range of its input and
    weights), and the post-LN stack renormalises after each sub-layer; so the hidden states keep a
    cosine above 0.999 with the float32 ones and differ by a few hundredths at most (the LayerNorm
    outputs are of unit scale)."""
    m = encoder()
    q = quantize(m, quantization_spec(backend))
    counts = summary(q)
    assert counts["linear_int8"] == 2 * 4 + 1 and counts["linear_float32"] == []
    assert summary(m)["linear_int8"] == 0  # the float32 model is left as it was
    ids, mask = batch()
    with torch.no_grad():
        y, yq = m(ids, mask).last_hidden_state, q(ids, mask).last_hidden_state
    y, yq = y[mask.bool()], yq[mask.bool()]  # the real positions (a padded batch runs packed: zeros elsewhere)
    cos = torch.nn.functional.cosine_similarity(y, yq, dim=-1)
    assert cos.min() > 0.999
    assert (y - yq).abs().max() < 0.05
    assert not torch.equal(y, yq)


# ------------------------------------------------------------------------------ save and restore


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sharing", ["none", "all"])
def test_saved_int8_tensors_restore_to_bit_identical_outputs(backend, sharing):
    spec = quantization_spec(backend, embeddings=True)
    q = quantize(encoder(sharing), spec)
    state = quantized_state(q)
    assert all(not v.is_quantized and type(v) is torch.Tensor for v in state.values())
    assert state["layers.0.attn.qkv.weight_int8"].dtype == torch.int8
    assert state["embeddings.word_embeddings.weight_int8"].shape == (120, 32)
    restored = restore(encoder(sharing, seed=5), spec, state)  # another skeleton: every weight comes from state
    ids, mask = batch()
    with torch.no_grad():
        assert torch.equal(q(ids, mask).last_hidden_state, restored(ids, mask).last_hidden_state)
    assert summary(restored)["linear_int8"] == summary(q)["linear_int8"]


def test_8_bit_activations_fall_back_to_7_on_a_cpu_without_vnni(monkeypatch):
    import ptmkit.compress.quantize as quant

    spec = {**quantization_spec("ao"), "activation_bits": 8}
    state = quantized_state(quantize(encoder(), spec))
    monkeypatch.setattr(quant, "vnni", lambda: False)
    assert quantization_spec("ao")["activation_bits"] == 7
    restored = restore(encoder(), spec, state)
    kinds = {type(m).__name__ for m in restored.modules() if quant.is_int8_linear(m)}
    assert kinds == {"Linear"}  # torch.ao's own layer, reduce_range on


def test_restore_refuses_weights_that_do_not_fit():
    spec = quantization_spec("ao")
    state = quantized_state(quantize(encoder(), spec))
    wrong = dict(state)
    wrong["layers.0.attn_norm.weight_int8"] = torch.zeros(32, dtype=torch.int8)
    with pytest.raises(PtmError, match="do not fit"):
        restore(encoder(), spec, wrong)
    with pytest.raises(PtmError, match="do not fit"):
        restore(encoder(), spec, {k: v for k, v in state.items() if k != "layers.0.ffn_norm.bias"})
    with pytest.raises(PtmError, match="scheme 'fp4' is not known"):
        restore(encoder(), {**spec, "scheme": "fp4"}, state)
    emb = quantized_state(quantize(encoder(), quantization_spec("ao", embeddings=True)))
    with pytest.raises(PtmError, match="embeddings=false"):
        restore(encoder(), spec, emb)


# --------------------------------------------------------------------------------------- refusals


def test_recurrent_encoders_already_quantized_models_and_unknown_backends_are_refused():
    lstm = LSTMEncoder(LSTMConfig(vocab_size=40, num_layers=1, hidden_size=16, projection_size=8, char_cnn=False))
    with pytest.raises(PtmError, match="the lstm encoder keeps its weights in LSTM cells"):
        quantize(nn.ModuleDict({"backbone": lstm, "head": nn.Linear(16, 2)}), quantization_spec())
    awd = AWDLSTMEncoder(AWDLSTMConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_layers=2))
    with pytest.raises(PtmError, match="the awd_lstm encoder keeps its weights in LSTM cells"):
        quantize(awd, quantization_spec(embeddings=True))
    q = quantize(encoder(), quantization_spec())
    with pytest.raises(PtmError, match="already quantized"):
        quantize(q, quantization_spec())
    with pytest.raises(PtmError, match="unknown quantization backend 'torcha'.*did you mean 'torchao'"):
        quantization_spec("torcha")
    with pytest.raises(PtmError, match="no linear layer.*--embeddings"):
        quantize(nn.Sequential(nn.Embedding(10, 4)), quantization_spec())


def test_a_missing_torchao_is_named_with_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)  # import fails as if not installed
    with pytest.raises(PtmError, match=r"pip install 'ptmkit\[quantize\]'"):
        quantize(encoder(), quantization_spec("torchao"))


# ------------------------------------------------------------------- a fine-tuned model, and the CLI


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment()
    root = tmp_path_factory.mktemp("quantize")
    fine_tuned_toy(root, task)
    files = [str(a) for a in task_file_args(task, root)]
    return task, root / "run", files


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_quantized_task_model_saves_and_loads_to_the_same_predictions(finetuned, tmp_path, backend):
    task, run, _ = finetuned
    tm = load_task_model(run, task)
    spec = quantization_spec(backend)
    q = quantize(tm.model, spec)
    save_task_model(tmp_path, q, tm.task, tm.config, tm.tokenizer, tm.cfg, compression={"quantization": spec},
                    weights=quantized_state(q))
    back = load_task_model(tmp_path, task)
    assert summary(back.model)["linear_int8"] == summary(q)["linear_int8"] == 2 * 4 + 1 + 1  # + pooler + head
    assert back.predict("test").tolist() == tm.predict("test", q).tolist()  # float64 probabilities, equal


def test_ptm_quantize_writes_a_task_model_with_scores_size_and_speed(finetuned, tmp_path, capsys):
    task, run, files = finetuned
    out = tmp_path / "int8"
    rc, err = run_cli(["quantize", run, "--int8", "--embeddings", *files, "--rounds", "1", "-o", out], capsys)
    assert rc == 0, err
    results = json.loads((out / "results.json").read_text())
    fp32 = load_task_model(run, task)
    assert results["dev"]["float32"] == pytest.approx(fp32.evaluate("dev"))
    int8 = load_task_model(out, task)
    assert results["test"]["int8"] == pytest.approx(int8.evaluate("test"))
    rc, err = run_cli(["finetune", out, "--eval-only", *files, "-o", tmp_path / "scored"], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "scored" / "results.json").read_text())["dev"] == pytest.approx(results["dev"]["int8"])
    assert abs(results["test"]["int8"]["accuracy"] - results["test"]["float32"]["accuracy"]) <= 0.05
    assert results["layers"]["linear_int8"] == 10 and results["layers"]["embeddings_int8"] == 3
    info = json.loads((out / "task_model.json").read_text())
    assert info["compression"]["quantization"]["embeddings"] is True
    assert info["compression"]["source"] == str(run)
    # every weight matrix and table int8: about a quarter of the float32 file (scales, LayerNorms, biases aside)
    assert results["size"]["ratio"] == pytest.approx(results["size"]["int8_bytes"] / results["size"]["float32_bytes"],
                                                     abs=1e-4)
    assert results["size"]["ratio"] < 0.4
    speed = results["speed"]
    assert speed["threads"] == 2 and speed["seq_len"] > 2
    for b in ("batch_1", "batch_32"):
        assert speed[b]["float32_ms"] > 0 and speed[b]["int8_ms"] > 0

    rc, err = run_cli(["quantize", out, "--int8", *files, "-o", tmp_path / "again"], capsys)
    assert rc == 2 and "already quantized" in err
    rc, err = run_cli(["quantize", run, *files, "-o", tmp_path / "none"], capsys)
    assert rc == 2 and "--int8" in err
    rc, err = run_cli(["quantize", run, "--int8", *files, "-o", out], capsys)
    assert rc == 2 and "--overwrite" in err
