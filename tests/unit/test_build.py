"""The one builder: configs -> encoders and objectives by name; pairing errors; loading the
encoder alone; preset inheritance."""

from __future__ import annotations

import pytest
import torch
from conftest import special_ids

from ptmkit.build import build_encoder, build_model, is_causal, resolve_config
from ptmkit.errors import PtmError
from ptmkit.presets import load_preset

TOK = special_ids(80)
SMALL = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "intermediate_size": 32, "max_position": 32}


def config(objective: str = "mlm", **model) -> dict:
    raw = load_preset("bert-tiny")
    raw["model"].update(SMALL, **model)
    raw["objective"] = {"name": objective}
    raw["train"]["seq_len"] = 32
    return resolve_config(raw, TOK)


def test_resolved_config_names_its_encoder() -> None:
    c = config()
    assert c["model"]["encoder"] == "transformer" and c["model"]["vocab_size"] == 80
    assert build_model(c, TOK).backbone.name == "transformer"
    assert not is_causal(c) and is_causal(config("clm"))


def test_unknown_encoder_suggests_the_nearest() -> None:
    with pytest.raises(PtmError, match="did you mean 'transformer'"):
        build_encoder({"encoder": "transfomer", **SMALL})
    with pytest.raises(PtmError, match="hiden_size.*did you mean 'hidden_size'"):
        build_encoder({"encoder": "transformer", "hiden_size": 8})


def test_objective_paired_with_an_encoder_it_cannot_use(monkeypatch) -> None:
    from ptmkit.objectives.mlm import MaskedLM

    monkeypatch.setattr(MaskedLM, "encoders", ("lstm",))
    with pytest.raises(PtmError, match="objective 'mlm' cannot be used with encoder 'transformer'.*'lstm'"):
        config("mlm")


def test_legacy_config_without_encoder_name() -> None:
    """Configs written before encoders had names: a Transformer, causality taken from the objective."""
    c = config("clm")
    legacy = {**c, "model": {k: v for k, v in c["model"].items() if k != "encoder"} | {"causal": True}}
    assert build_model(legacy, TOK).backbone.name == "transformer" and is_causal(legacy)


def test_load_encoder_alone_skips_the_heads(tmp_path) -> None:
    from ptmkit.pretrained import load_pretrained, save_pretrained
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("\n".join(f"a b c word{i % 7} d" for i in range(50)) + "\n")
    tok = Tokenizer.train([text], "wordpiece", 60, min_frequency=1)
    raw = load_preset("electra-tiny")
    raw["model"].update(SMALL)
    raw["train"]["seq_len"] = 32
    c = resolve_config(raw, tok)
    torch.manual_seed(0)
    model = build_model(c, tok)
    save_pretrained(tmp_path / "ck", c, model, tok)
    full = load_pretrained(tmp_path / "ck")
    enc = load_pretrained(tmp_path / "ck", heads=False)
    assert enc.objective is None and full.objective is not None
    ids = torch.tensor([tok.encode("a b c word1 d", add_special_tokens=True)])
    torch.testing.assert_close(enc.backbone(ids).last_hidden_state, full.backbone(ids).last_hidden_state)
    with pytest.raises(PtmError, match="heads=False"):
        enc.model  # noqa: B018 (the attribute access is what raises)
    # a checkpoint read as another architecture is refused with the tensors named
    import json

    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    cfg["model"]["embedding_size"] = 8
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PtmError, match="do not fit"):
        load_pretrained(tmp_path / "ck", heads=False)


def test_presets_inherit_and_replace_a_different_objective() -> None:
    tiny, base, electra = load_preset("bert-tiny"), load_preset("bert-base"), load_preset("electra-tiny")
    assert base["model"]["hidden_size"] == 768 and base["model"]["norm"] == tiny["model"]["norm"]
    assert base["tokenizer"] == tiny["tokenizer"] and base["objective"] == tiny["objective"]
    assert electra["objective"]["name"] == "electra" and electra["model"] == tiny["model"]


def test_preset_base_cycle_and_unknown(tmp_path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(f"base: {b}\nmodel: {{hidden_size: 8}}\n")
    b.write_text(f"base: {a}\n")
    with pytest.raises(PtmError, match="cycle"):
        load_preset(str(a))
    a.write_text("base: bert-tinny\n")
    with pytest.raises(PtmError, match="did you mean 'bert-tiny'"):
        load_preset(str(a))


def test_checkpoint_of_one_encoder_loaded_as_another(tmp_path) -> None:
    """A Transformer checkpoint whose config is made to name the lstm encoder is refused clearly."""
    import json

    from ptmkit.pretrained import load_pretrained, save_pretrained
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("\n".join(f"a b c word{i % 7} d" for i in range(50)) + "\n")
    tok = Tokenizer.train([text], "wordpiece", 60, min_frequency=1)
    raw = load_preset("bert-tiny")
    raw["model"].update(SMALL)
    raw["train"]["seq_len"] = 32
    c = resolve_config(raw, tok)
    save_pretrained(tmp_path / "ck", c, build_model(c, tok), tok)
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    cfg["model"] = {"encoder": "lstm", "vocab_size": cfg["model"]["vocab_size"], "hidden_size": 16, "num_layers": 1,
                    "projection_size": 16}
    cfg["objective"] = {"name": "bilm"}
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    for heads in (True, False):
        with pytest.raises(PtmError, match="cannot be loaded as the 'lstm' encoder.*(do not fit|no weights)"):
            load_pretrained(tmp_path / "ck", heads=heads)
