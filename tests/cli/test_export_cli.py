"""``ptm export`` and ``ptm import`` end to end on tiny checkpoints."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from transformers import AutoTokenizer, BertForPreTraining, GPT2LMHeadModel  # noqa: E402

from ptmkit.cli import main  # noqa: E402
from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.clm import CausalLM, CLMConfig  # noqa: E402
from ptmkit.objectives.mlm import MaskedLM, MLMConfig  # noqa: E402
from ptmkit.pretrained import load_pretrained, save_pretrained  # noqa: E402
from ptmkit.tokenization import Tokenizer  # noqa: E402

TEXT = """\
the cat sat on the mat .
a dog barked at the cat and the cat ran away .
language models learn from raw text without labels .
the quick brown fox jumps over the lazy dog .
pre-training then fine-tuning is the usual recipe .
"""
SENTENCE = "the lazy cat jumps over the brown dog ."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp("tok") / "text.txt"
    path.write_text(TEXT * 3)
    return Tokenizer.train([path], kind="wordpiece", vocab_size=80, min_frequency=1)


@torch.no_grad()
def _perturb(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(7)
    for p in model.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))


def _checkpoint(path, tokenizer, gpt2: bool = False):
    if gpt2:
        cfg = TransformerConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
            max_position=32, type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
            embedding_norm=False, pooler=False, scaled_residual_init=True,
        )
        encoder = TransformerEncoder(cfg)
        objective, section = CausalLM(CLMConfig(), encoder, tokenizer), {"name": "clm", **asdict(CLMConfig())}
    else:
        cfg = TransformerConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                                intermediate_size=64, max_position=32)
        encoder = TransformerEncoder(cfg)
        objective, section = MaskedLM(MLMConfig(), encoder, tokenizer), {"name": "mlm", **asdict(MLMConfig())}
    model = PretrainModel(encoder, objective)
    _perturb(model)
    save_pretrained(path, {"model": asdict(cfg), "objective": section}, model, tokenizer)
    return model.eval()


def _same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_bert_export_import_cli(tmp_path, tokenizer, capsys) -> None:
    model = _checkpoint(tmp_path / "ckpt", tokenizer)
    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "hf")]) == 0
    assert "bert-mlm" in capsys.readouterr().out

    # transformers reads the directory: same tokens, same outputs.
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = tokenizer.encode(SENTENCE, add_special_tokens=True)
    assert hf_tok(SENTENCE)["input_ids"] == ids
    hf = BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    batch = {"input_ids": torch.tensor([ids])}
    with torch.no_grad():
        theirs = hf(**batch)
        out = model.backbone(**batch)
        mlm = model.objective.mlm_head(out.last_hidden_state, model.backbone.output_embeddings())
        nsp = model.objective.nsp_head(out.pooled)
    assert_close(theirs.prediction_logits, mlm, rtol=1e-5, atol=1e-5)
    assert_close(theirs.seq_relationship_logits, nsp, rtol=1e-5, atol=1e-5)

    # ... and back into a ptmkit checkpoint that load_pretrained (and so `ptm finetune`) reads.
    assert main(["import", str(tmp_path / "hf"), "-o", str(tmp_path / "back")]) == 0
    back = load_pretrained(tmp_path / "back")
    _same_state(model, back.model)
    assert back.tokenizer.encode(SENTENCE) == tokenizer.encode(SENTENCE)
    assert back.config["objective"]["nsp"] is True


def test_electra_exports_its_discriminator_as_electra_or_bert(tmp_path, tokenizer) -> None:
    from transformers import BertModel, ElectraForPreTraining

    from ptmkit.objectives.electra import ELECTRA, ELECTRAConfig

    cfg = TransformerConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                            intermediate_size=64, max_position=32)
    encoder = TransformerEncoder(cfg)
    model = PretrainModel(encoder, ELECTRA(ELECTRAConfig(), encoder, tokenizer))
    _perturb(model)
    save_pretrained(tmp_path / "ckpt", {"model": asdict(cfg), "objective": {"name": "electra", **asdict(ELECTRAConfig())}},
                    model, tokenizer)
    ids = torch.tensor([tokenizer.encode(SENTENCE, add_special_tokens=True)])
    model.eval()
    # By default: the discriminator with its replaced-token head, as HF's ElectraForPreTraining.
    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "hf")]) == 0
    hf = ElectraForPreTraining.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        h = model.backbone(ids).last_hidden_state
        assert_close(hf(ids).logits, model.objective.rtd_head(h), rtol=1e-5, atol=1e-5)
    # Asked for, the encoder alone as a BERT.
    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "bert"), "--format", "bert"]) == 0
    hf = BertModel.from_pretrained(tmp_path / "bert").eval()
    with torch.no_grad():
        assert_close(hf(ids).last_hidden_state, h, rtol=1e-5, atol=1e-5)


def test_gpt2_export_import_cli(tmp_path, tokenizer, capsys) -> None:
    model = _checkpoint(tmp_path / "ckpt", tokenizer, gpt2=True)
    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "hf")]) == 0
    assert "gpt2" in capsys.readouterr().out
    hf = GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = torch.tensor([tokenizer.encode(SENTENCE)])
    with torch.no_grad():
        ours = torch.nn.functional.linear(model.backbone(ids, causal=True).last_hidden_state, model.backbone.output_embeddings())
        assert_close(hf(ids).logits, ours, rtol=1e-5, atol=1e-5)
    assert main(["import", str(tmp_path / "hf"), "-o", str(tmp_path / "back")]) == 0
    back = load_pretrained(tmp_path / "back")
    assert back.config["objective"]["name"] == "clm"
    _same_state(model, back.model)


def test_cli_errors_exit_2_and_keep_files(tmp_path, tokenizer, capsys) -> None:
    _checkpoint(tmp_path / "ckpt", tokenizer)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("keep me")
    assert main(["export", str(tmp_path / "ckpt"), "-o", str(taken)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]

    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "g"), "--format", "gpt2"]) == 2
    assert "pre-LN" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()

    assert main(["export", str(tmp_path / "missing"), "-o", str(tmp_path / "x")]) == 2
    assert main(["import", str(tmp_path / "ckpt"), "-o", str(tmp_path / "y")]) == 2  # a ptmkit dir is not HF
    assert "model_type" in capsys.readouterr().err  # a ptmkit checkpoint is refused by name

    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "hf")]) == 0
    assert main(["import", str(tmp_path / "hf"), "-o", str(taken)]) == 2
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]
