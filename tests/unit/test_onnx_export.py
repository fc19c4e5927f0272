"""``ptm export RUN --format onnx``: a tiny model of every supported family is exported, and ONNX
Runtime's hidden states on new shapes (another batch size and length, padded rows) match the
PyTorch encoder's; refusals (a GPT-style decoder, XLNet, a missing run, missing packages) are
clear errors that write nothing."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import WORDS, run_cli, tiny_checkpoint, write_corpus

from ptmkit.build import build_model, resolve_config
from ptmkit.errors import PtmError
from ptmkit.interop import onnx_export
from ptmkit.presets import load_preset
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tokenization import Tokenizer

# FFN 512: the traced probe's 32 rows x 512 reach the size from which ALBERT's GELU-tanh runs a numba
# kernel, which a tracer cannot see into (the export must take PyTorch's op there)
SHRINK = {"hidden_size": 32, "intermediate_size": 512, "num_heads": 2, "max_position": 64, "embedding_size": 16}
FAMILIES = ("bert-tiny", "roberta-tiny", "albert-tiny", "electra-tiny", "unilm-tiny", "bart-tiny", "t5-tiny")


def preset_checkpoint(root, preset: str):
    """A randomly initialised checkpoint of ``preset`` at width 32, with a tokenizer of its kind."""
    raw = load_preset(preset)
    model = raw["model"]
    model.update({key: value for key, value in SHRINK.items() if key in model})
    raw["train"]["seq_len"] = 32
    text = write_corpus(root / "text.txt", docs=8)
    kind = raw["tokenizer"]["kind"]
    tok = Tokenizer.train([text], kind=kind, vocab_size=200 if kind != "unigram" else 120, min_frequency=1,
                          extra_ids=int(raw["tokenizer"].get("extra_ids", 0)))
    config = resolve_config(raw, tok)
    torch.manual_seed(0)
    return save_pretrained(root / "ck", config, build_model(config, tok), tok)


@pytest.mark.parametrize("preset", FAMILIES)
def test_export_matches_pytorch_on_new_shapes(tmp_path, capsys, preset):
    ort = pytest.importorskip("onnxruntime")
    ck = preset_checkpoint(tmp_path, preset)
    out = tmp_path / "onnx"
    rc, err = run_cli(["export", ck, "-o", out, "--format", "onnx"], capsys)
    assert rc == 0, err
    info = json.loads((out / "onnx_export.json").read_text())
    assert info["check"]["max_abs_diff"] <= 1e-4 * max(1.0, info["check"]["max_abs_hidden"])
    assert (out / "tokenizer.json").is_file()

    # independently of the export's own check: another shape again, on the model loaded afresh
    pre = load_pretrained(ck, heads=False)
    graph = onnx_export.EncoderGraph(pre.backbone).eval()
    inputs = onnx_export.probe(graph, batch=5, length=13, padded=True, seed=7)
    with torch.no_grad():
        ref = graph(**inputs).numpy()
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == info["inputs"]
    got = session.run(None, {k: v.numpy() for k, v in inputs.items()})[0]
    assert got.shape == (5, 13, 32)
    real = inputs["attention_mask"].bool().numpy()  # PyTorch packs the padded batch: zeros at the padding
    assert abs(got - ref)[real].max() < 1e-4
    # the padding mask is in the graph: a padded row's real tokens do not see the padding
    row = {k: v[3:4, : 13 - 3] for k, v in inputs.items()}
    alone = session.run(None, {k: v.numpy() for k, v in row.items()})[0]
    assert abs(alone[0] - got[3, : 13 - 3]).max() < 1e-4


def test_a_causal_decoder_is_refused(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    ck = tiny_checkpoint(tmp_path / "gpt", [" ".join(WORDS)] * 4, causal=True)
    rc, err = run_cli(["export", ck, "-o", tmp_path / "out", "--format", "onnx"], capsys)
    assert rc == 2
    assert "causal decoder" in err and "ptm export RUN -o DIR" in err
    assert not (tmp_path / "out").exists()


def test_xlnet_is_refused(tmp_path):
    pytest.importorskip("onnxruntime")
    raw = load_preset("xlnet-tiny")
    raw["model"].update(hidden_size=32, intermediate_size=64, num_heads=2)
    text = write_corpus(tmp_path / "text.txt", docs=4)
    tok = Tokenizer.train([text], kind=raw["tokenizer"]["kind"], vocab_size=120, min_frequency=1)
    config = resolve_config(raw, tok)
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    with pytest.raises(PtmError, match="XLNet"):
        onnx_export.export_onnx(ck, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_missing_run_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    rc, err = run_cli(["export", tmp_path / "no-such-run", "-o", tmp_path / "out", "--format", "onnx"], capsys)
    assert rc == 2 and "no-such-run" in err
    assert not (tmp_path / "out").exists()


def test_an_unknown_format_names_onnx(tmp_path, capsys):
    rc, err = run_cli(["export", tmp_path, "-o", tmp_path / "out", "--format", "onx"], capsys)
    assert rc == 2 and "onnx" in err


def test_missing_packages_name_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    ck = tiny_checkpoint(tmp_path / "bert", [" ".join(WORDS)] * 4)
    rc, err = run_cli(["export", ck, "-o", tmp_path / "out", "--format", "onnx"], capsys)
    assert rc == 2
    assert "pip install 'ptmkit[onnx]'" in err and "onnxruntime" in err
    assert not (tmp_path / "out").exists()
