"""``ptm generate`` and ``ptmkit.generate`` end to end on tiny checkpoints."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

import ptmkit
from ptmkit.cli import main
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.generation import GenerationConfig, generate_ids
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.clm import CausalLM, CLMConfig
from ptmkit.objectives.mlm import MaskedLM, MLMConfig
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tokenization import Tokenizer

TEXT = """\
the cat sat on the mat .
a dog barked at the cat and the cat ran away .
language models learn from raw text without labels .
the quick brown fox jumps over the lazy dog .
"""


def tiny_tokenizer(root) -> Tokenizer:
    """A word-piece tokenizer of :data:`TEXT`, trained in ``root``."""
    path = root / "text.txt"
    path.write_text(TEXT * 3)
    return Tokenizer.train([path], kind="wordpiece", vocab_size=80, min_frequency=1)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _checkpoint(path, tokenizer, objective: str = "clm"):
    cfg = TransformerConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
        max_position=24, type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
        embedding_norm=False, pooler=False, scaled_residual_init=True,
    )
    torch.manual_seed(0)
    encoder = TransformerEncoder(cfg)
    if objective == "clm":
        head, section = CausalLM(CLMConfig(), encoder, tokenizer), {"name": "clm", **asdict(CLMConfig())}
    else:
        head, section = MaskedLM(MLMConfig(nsp=False), encoder, tokenizer), {"name": "mlm", **asdict(MLMConfig(nsp=False))}
    model = PretrainModel(encoder, head)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    save_pretrained(path, {"model": asdict(cfg), "objective": section}, model, tokenizer)
    return path


@pytest.fixture(scope="module")
def gpt(tmp_path_factory, tokenizer):
    return _checkpoint(tmp_path_factory.mktemp("run") / "gpt", tokenizer)


def test_api_and_cli_generate_the_same_text(gpt, tokenizer, capsys) -> None:
    texts = ptmkit.generate(gpt, ["the cat", "a dog barked at"], max_new_tokens=6, greedy=True)
    pre = load_pretrained(gpt, heads=False)
    ids = generate_ids(pre.backbone, "causal_lm", [[tokenizer.sep_id, *tokenizer.encode(p)] for p in ("the cat", "a dog barked at")],
                       GenerationConfig(max_new_tokens=6, greedy=True), eos_id=tokenizer.sep_id)
    assert texts == [tokenizer.decode(x) for x in ids]
    assert ptmkit.generate(gpt, "the cat", max_new_tokens=6, greedy=True) == texts[0]
    assert main(["generate", str(gpt), "the cat", "a dog barked at", "-n", "6", "--greedy"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"the cat >> {texts[0]}", f"a dog barked at >> {texts[1]}"]
    sampled = ptmkit.generate(gpt, ["the cat"] * 2, max_new_tokens=6, top_k=5, top_p=0.9, temperature=1.5, seed=4)
    assert sampled == ptmkit.generate(gpt, ["the cat"] * 2, max_new_tokens=6, top_k=5, top_p=0.9, temperature=1.5, seed=4)


@pytest.mark.parametrize("args,message", [
    (["--temperature", "0"], "temperature must be > 0"),
    (["--top-p", "1.5"], "top_p must be in"),
    (["--top-p", "0"], "top_p must be in"),
    (["--top-k", "-2"], "top_k must be >= 0"),
    (["-n", "40"], "max_new_tokens=40.*context of 24"),
])
def test_bad_inputs_are_one_error_line(gpt, capsys, args, message) -> None:
    assert main(["generate", str(gpt), "the cat", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, err), err


def test_long_prompt_and_mlm_run_are_refused(gpt, tokenizer, tmp_path, capsys) -> None:
    assert main(["generate", str(gpt), " ".join(["the cat sat"] * 20)]) == 2
    assert "more than the model's context of 24" in capsys.readouterr().err
    mlm = _checkpoint(tmp_path / "bert", tokenizer, "mlm")
    assert main(["generate", str(mlm), "the cat"]) == 2
    err = capsys.readouterr().err
    assert "'mlm' objective, which cannot generate" in err and "clm (causal_lm)" in err


def test_help_explains_every_option(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = capsys.readouterr().out
    for option in ("--max-new-tokens", "--greedy", "--temperature", "--top-k", "--top-p", "--seed", "nucleus"):
        assert option in out


def test_bart_run_rewrites_its_prompt_with_greedy_decode(tokenizer, tmp_path, capsys) -> None:
    from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
    from ptmkit.objectives.bart import BartDenoising, DenoisingConfig, greedy_decode

    cfg = EncoderDecoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, encoder_layers=1, decoder_layers=1,
                               num_heads=4, intermediate_size=64, max_position=32, init_std=0.3,
                               pad_token_id=tokenizer.pad_id, decoder_start_token_id=tokenizer.sep_id)
    torch.manual_seed(1)
    encoder = EncoderDecoder(cfg)
    model = PretrainModel(encoder, BartDenoising(DenoisingConfig(), encoder, tokenizer)).eval()
    save_pretrained(tmp_path / "bart", {"model": {"encoder": "encoder_decoder", **asdict(cfg)},
                                        "objective": {"name": "bart", **asdict(DenoisingConfig())}}, model, tokenizer)
    prompts = ["the cat [MASK] on the mat .", "a dog"]
    texts = ptmkit.generate(tmp_path / "bart", prompts, max_new_tokens=10, greedy=True)
    for prompt, text in zip(prompts, texts):
        source = torch.tensor([[tokenizer.cls_id, *tokenizer.encode(prompt), tokenizer.sep_id]])
        ids = greedy_decode(encoder, source, max_length=10, eos_id=tokenizer.sep_id)[0].tolist()
        assert text == tokenizer.decode(ids)
    assert main(["generate", str(tmp_path / "bart"), prompts[1], "-n", "10", "--greedy"]) == 0
    assert capsys.readouterr().out == f"a dog => {texts[1]}\n"
