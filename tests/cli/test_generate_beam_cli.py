"""``ptm generate`` with beam search and the n-gram ban, end to end on tiny checkpoints."""

from __future__ import annotations

import re
from dataclasses import asdict

import pytest
import torch
from test_generate_cli import _checkpoint, tiny_tokenizer  # the same tiny runs as the greedy CLI tests

import ptmkit
from ptmkit.cli import main
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.generation import GenerationConfig, generate_ids
from ptmkit.objectives.bart import BartDenoising, DenoisingConfig
from ptmkit.objectives.base import PretrainModel
from ptmkit.pretrained import load_pretrained, save_pretrained

PROMPTS = ["the cat", "a dog barked at"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def gpt(tmp_path_factory, tokenizer):
    return _checkpoint(tmp_path_factory.mktemp("run") / "gpt", tokenizer)


def test_beam_search_from_the_cli_and_the_api(gpt, tokenizer, capsys) -> None:
    flags = ["--num-beams", "4", "--length-penalty", "0.8", "--early-stopping", "true", "--no-repeat-ngram-size", "2"]
    texts = ptmkit.generate(gpt, PROMPTS, max_new_tokens=8, num_beams=4, length_penalty=0.8, early_stopping=True,
                            no_repeat_ngram_size=2)
    pre = load_pretrained(gpt, heads=False)
    sep = tokenizer.sep_id
    cfg = GenerationConfig(max_new_tokens=8, num_beams=4, length_penalty=0.8, early_stopping=True, no_repeat_ngram_size=2)
    ids = generate_ids(pre.backbone, "causal_lm", [[sep, *tokenizer.encode(p)] for p in PROMPTS], cfg, eos_id=sep)
    assert texts == [tokenizer.decode(x) for x in ids]
    greedy = ptmkit.generate(gpt, PROMPTS, max_new_tokens=8, greedy=True, no_repeat_ngram_size=2)
    assert texts != greedy  # the beams found other texts
    assert main(["generate", str(gpt), *PROMPTS, "-n", "8", *flags]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{p} >> {t}" for p, t in zip(PROMPTS, texts)]
    # several hypotheses per prompt, best first: the first is the single best one
    several = ptmkit.generate(gpt, PROMPTS, max_new_tokens=8, num_beams=4, length_penalty=0.8, early_stopping=True,
                              no_repeat_ngram_size=2, num_return_sequences=2)
    assert [s[0] for s in several] == texts and all(len(s) == 2 and s[0] != s[1] for s in several)
    assert ptmkit.generate(gpt, PROMPTS[0], max_new_tokens=8, num_beams=4, num_return_sequences=2) == \
        ptmkit.generate(gpt, PROMPTS[:1], max_new_tokens=8, num_beams=4, num_return_sequences=2)[0]
    assert main(["generate", str(gpt), *PROMPTS, "-n", "8", *flags, "--num-return-sequences", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{p} >> {t}" for p, s in zip(PROMPTS, several) for t in s]


@pytest.mark.parametrize("args,message", [
    (["--num-beams", "0"], "num_beams must be >= 1"),
    (["--num-beams", "2", "--num-return-sequences", "3"], "num_return_sequences must be between 1 and num_beams=2"),
    (["--num-beams", "4", "--temperature", "0.7"], "does not sample, so temperature=0.7"),
    (["--length-penalty", "2"], "length_penalty=2.0 only apply to beam search"),
    (["--early-stopping", "never"], "early_stopping='never' only apply to beam search"),
    (["--no-repeat-ngram-size", "-1"], "no_repeat_ngram_size must be >= 0"),
])
def test_bad_beam_settings_are_one_error_line(gpt, capsys, args, message) -> None:
    assert main(["generate", str(gpt), "the cat", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


def test_early_stopping_takes_true_false_or_never(gpt, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["generate", str(gpt), "the cat", "--num-beams", "2", "--early-stopping", "maybe"])
    assert exit_.value.code == 2 and "expected true, false or never, got 'maybe'" in capsys.readouterr().err


def test_beam_search_on_an_encoder_only_run_is_refused(tokenizer, tmp_path, capsys) -> None:
    bert = _checkpoint(tmp_path / "bert", tokenizer, "mlm")
    assert main(["generate", str(bert), "the cat", "--num-beams", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'mlm' objective, which cannot generate" in err and "bart (seq2seq)" in err
    with pytest.raises(ptmkit.errors.PtmError, match="cannot generate"):
        ptmkit.generate(bert, "the cat", num_beams=4)


def test_bart_run_rewrites_with_beam_search(tokenizer, tmp_path, capsys) -> None:
    cfg = EncoderDecoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, encoder_layers=1, decoder_layers=1,
                               num_heads=4, intermediate_size=64, max_position=32, init_std=0.3,
                               pad_token_id=tokenizer.pad_id, decoder_start_token_id=tokenizer.sep_id)
    torch.manual_seed(1)
    encoder = EncoderDecoder(cfg)
    model = PretrainModel(encoder, BartDenoising(DenoisingConfig(), encoder, tokenizer)).eval()
    save_pretrained(tmp_path / "bart", {"model": {"encoder": "encoder_decoder", **asdict(cfg)},
                                        "objective": {"name": "bart", **asdict(DenoisingConfig())}}, model, tokenizer)
    prompts = ["the cat [MASK] on the mat .", "a dog"]
    texts = ptmkit.generate(tmp_path / "bart", prompts, max_new_tokens=10, num_beams=4, no_repeat_ngram_size=3)
    sources = [[tokenizer.cls_id, *tokenizer.encode(p), tokenizer.sep_id] for p in prompts]
    ids = generate_ids(encoder, "seq2seq", sources, GenerationConfig(max_new_tokens=10, num_beams=4, no_repeat_ngram_size=3),
                       eos_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)
    assert texts == [tokenizer.decode(x) for x in ids]
    assert main(["generate", str(tmp_path / "bart"), *prompts, "-n", "10", "--num-beams", "4",
                 "--no-repeat-ngram-size", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{p} => {t}" for p, t in zip(prompts, texts)]


def test_help_explains_the_beam_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = capsys.readouterr().out
    for option in ("--num-beams", "--length-penalty", "--early-stopping", "--no-repeat-ngram-size",
                   "--num-return-sequences", "length^A"):
        assert option in out
