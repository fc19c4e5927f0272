"""``ptm import`` / ``ptm export --format llama`` on a tiny random LLaMA saved with ``save_pretrained``,
and ``ptm pretrain llama-tiny`` trained a few steps and exported."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

from ptmkit.cli import main  # noqa: E402
from ptmkit.pretrained import load_pretrained  # noqa: E402
from ptmkit.tokenization import Tokenizer  # noqa: E402

TEXT = """\
the cat sat on the mat .
a dog barked at the cat and the cat ran away .
language models learn from raw text without labels .
the quick brown fox jumps over the lazy dog .
"""
SENTENCE = "the lazy cat jumps over the brown dog ."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp("tok") / "text.txt"
    path.write_text(TEXT * 5)
    return Tokenizer.train([path], kind="bpe", vocab_size=300, min_frequency=1)


@torch.no_grad()
def logits(pretrained, ids: torch.Tensor) -> torch.Tensor:
    h = pretrained.backbone(ids, causal=True).last_hidden_state
    return torch.nn.functional.linear(h, pretrained.backbone.output_embeddings())


def test_import_then_export_llama_cli(tmp_path, tokenizer, capsys) -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rope_theta=20000.0,
                      tie_word_embeddings=True, pad_token_id=tokenizer.pad_id)
    hf = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn(p.shape))
    hf.save_pretrained(tmp_path / "hf")
    tokenizer.to_transformers().save_pretrained(tmp_path / "hf")

    assert main(["import", str(tmp_path / "hf"), "-o", str(tmp_path / "ckpt")]) == 0
    pre = load_pretrained(tmp_path / "ckpt")
    assert pre.config["objective"]["name"] == "clm" and pre.config["model"]["rope_theta"] == 20000.0
    assert pre.tokenizer.encode(SENTENCE) == tokenizer.encode(SENTENCE)
    ids = torch.tensor([tokenizer.encode(SENTENCE)])
    with torch.no_grad():
        reference = hf(ids).logits
    assert_close(logits(pre, ids), reference, rtol=0, atol=1e-5)

    capsys.readouterr()
    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "out"), "--format", "llama"]) == 0
    assert "llama" in capsys.readouterr().out
    back = LlamaForCausalLM.from_pretrained(tmp_path / "out").eval()
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert hf_tok(SENTENCE, add_special_tokens=False)["input_ids"] == tokenizer.encode(SENTENCE)
    with torch.no_grad():
        assert_close(back(ids).logits, reference, rtol=0, atol=1e-5)
    # without --format the model's family is found
    assert main(["export", str(tmp_path / "ckpt"), "-o", str(tmp_path / "inferred")]) == 0
    assert json.loads((tmp_path / "inferred" / "config.json").read_text())["model_type"] == "llama"


def test_export_llama_refusal_is_one_line(tmp_path, tokenizer, capsys) -> None:
    """A GPT-2-style run is refused as LLaMA, naming the setting, and nothing is written."""
    text = tmp_path / "t.txt"
    text.write_text(TEXT * 30)
    run = tmp_path / "gpt"
    assert main(["pretrain", "gpt2-tiny", "--data", str(text), "-o", str(run), "model.hidden_size=32",
                 "model.intermediate_size=64", "model.max_position=32", "tokenizer.vocab_size=300", "train.batch_size=4",
                 "train.seq_len=16", "train.max_steps=1", "train.warmup_steps=0", "train.log_every=1",
                 "train.eval_every=0", "train.save_every=0", "train.num_threads=1"]) == 0
    capsys.readouterr()
    assert main(["export", str(run), "-o", str(tmp_path / "x"), "--format", "llama"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "positions='absolute'" in err and "norm_type='layernorm'" in err
    assert err.endswith("formats that fit this model: gpt2"), err  # asked of every family, not hard-coded
    assert not (tmp_path / "x").exists()
    assert main(["export", str(run), "-o", str(tmp_path / "y"), "--format", "bert"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "post-LN" in err and err.endswith("formats that fit this model: gpt2"), err


def test_llama_tiny_pretrains_and_exports(tmp_path) -> None:
    from ptmkit.train.trainer import read_metrics

    text = tmp_path / "t.txt"
    text.write_text(TEXT * 30)
    run = tmp_path / "run"
    assert main(["pretrain", "llama-tiny", "--data", str(text), "-o", str(run), "model.hidden_size=32",
                 "model.intermediate_size=64", "tokenizer.vocab_size=300", "train.batch_size=4", "train.seq_len=16",
                 "train.max_steps=3", "train.warmup_steps=0", "train.log_every=1", "train.eval_every=0",
                 "train.save_every=0", "train.num_threads=1"]) == 0
    losses = [r["clm_loss"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    pre = load_pretrained(run)
    cfg = pre.backbone.config
    assert (cfg.num_heads, cfg.kv_heads, cfg.ffn, cfg.norm_type, cfg.positions, cfg.bias) == (4, 2, "swiglu", "rmsnorm",
                                                                                                "rope", False)
    assert main(["export", str(run), "-o", str(tmp_path / "hf")]) == 0  # llama, inferred
    hf = LlamaForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.tensor([pre.tokenizer.encode(SENTENCE)])
    with torch.no_grad():
        assert_close(hf(ids).logits, logits(pre, ids), rtol=0, atol=1e-5)
