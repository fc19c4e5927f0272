"""Beam search of ptmkit's GPT-2, BART and T5 equals HF ``generate(num_beams=4, ...)`` token for
token, on weights exported from ptmkit (both sides in float64, so no near-tie of the two float
computations can flip a choice; beam scores are float32 on both sides, as HF keeps them).

Random weights, larger than at initialisation, so the next-token distributions are far from flat
and from one-hot: the beams part from greedy decoding (asserted).  The batches hold sources or
prompts of different lengths (padding); an end token is one the beams produce mid-way, so
hypotheses finish at different lengths and the stopping rules matter.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import BartForConditionalGeneration, GPT2LMHeadModel, T5ForConditionalGeneration  # noqa: E402
from transformers import GenerationConfig as HFGenerationConfig  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig  # noqa: E402
from ptmkit.generation import CausalLMStepper, GenerationConfig, Seq2SeqStepper, decode, left_pad  # noqa: E402
from ptmkit.interop.hf_bart import export_bart  # noqa: E402
from ptmkit.interop.hf_gpt2 import export_gpt2  # noqa: E402
from ptmkit.interop.hf_t5 import export_t5  # noqa: E402
from ptmkit.objectives.bart import BartDenoising, DenoisingConfig  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.clm import CausalLM, CLMConfig  # noqa: E402
from ptmkit.objectives.t5 import SpanCorruption, SpanCorruptionConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, PAD, N = 100, 0, 12  # vocabulary, padding id, new tokens
TOK = SimpleNamespace(vocab_size=V, pad_id=PAD, unk_id=1, cls_id=2, sep_id=3, mask_id=4,
                      sentinel_ids=tuple(range(V - 1, V - 11, -1)))
PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19, 20]]  # causal LM: left-padded
SOURCES = [[21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31], [32, 33, 34, 35, 36, 37, 38], [39, 40, 41]]  # right-padded

GPT2 = TransformerConfig(
    vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=128, max_position=64,
    type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
    embedding_norm=False, pooler=False, scaled_residual_init=True,
)
BART = EncoderDecoderConfig(vocab_size=V, hidden_size=32, encoder_layers=2, decoder_layers=2, num_heads=4,
                            intermediate_size=64, max_position=40, pad_token_id=PAD, decoder_start_token_id=3)
T5 = EncoderDecoderConfig(vocab_size=V, hidden_size=32, encoder_layers=2, decoder_layers=2, num_heads=4,
                          intermediate_size=64, max_position=64, activation="relu", norm="pre", norm_type="rms",
                          bias=False, positions="relative", relative_buckets=8, relative_max_distance=20,
                          scale_attention=False, scale_decoder_output=True, embedding_norm=False,
                          layer_norm_eps=1e-6, init="t5", pad_token_id=PAD, decoder_start_token_id=PAD)


@torch.no_grad()
def perturb(model: torch.nn.Module, seed: int, scale: float) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def build(kind: str, out_dir) -> tuple[object, torch.nn.Module]:
    """(ptmkit backbone, HF model) of one kind, the HF one loaded from ptmkit's export; float64."""
    torch.manual_seed(3)
    if kind == "gpt2":
        encoder = TransformerEncoder(GPT2)
        objective, name, export, hf_class = CausalLM(CLMConfig(), encoder, TOK), "clm", export_gpt2, GPT2LMHeadModel
    elif kind == "bart":
        encoder = EncoderDecoder(BART)
        objective, name, export = BartDenoising(DenoisingConfig(), encoder, TOK), "bart", export_bart
        hf_class = BartForConditionalGeneration
    else:
        encoder = EncoderDecoder(T5)
        objective, name, export = SpanCorruption(SpanCorruptionConfig(), encoder, TOK), "t5", export_t5
        hf_class = T5ForConditionalGeneration
    model = PretrainModel(encoder, objective)
    perturb(model, 3, 0.3)
    model.eval()
    pre = Pretrained({"model": {}, "objective": {"name": name}}, None, model.backbone, model.objective, None, model)
    export(pre, out_dir)
    hf = hf_class.from_pretrained(out_dir, attn_implementation="eager").double().eval()
    return model.backbone.double(), hf


@pytest.fixture(scope="module", params=["gpt2", "bart", "t5"])
def pair(request, tmp_path_factory):
    return (request.param, *build(request.param, tmp_path_factory.mktemp("hf") / request.param))


def ours(kind: str, backbone, rows: list[list[int]], cfg: GenerationConfig, eos: int | None) -> torch.Tensor:
    if kind == "gpt2":
        ids, mask = left_pad(rows, PAD)
        stepper = CausalLMStepper(backbone, ids, mask, cfg.use_cache)
    else:
        ids, mask = right_pad(rows)
        stepper = Seq2SeqStepper(backbone, ids, mask, cfg.use_cache)
    return decode(stepper, cfg, eos_id=eos, pad_id=PAD)


def right_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = left_pad([r[::-1] for r in rows], PAD)
    return ids.flip(1), mask.flip(1)


def theirs(kind: str, hf, rows: list[list[int]], eos: int | None, **settings) -> torch.Tensor:
    """HF's output without the prompt (or the decoder's start token), ``PAD`` after an end token
    (HF fills with the end token when the padding id is 0)."""
    gen = HFGenerationConfig(do_sample=False, max_new_tokens=N, eos_token_id=eos, pad_token_id=PAD,
                             decoder_start_token_id=None if kind == "gpt2" else hf.config.decoder_start_token_id,
                             forced_bos_token_id=None, forced_eos_token_id=None, **settings)
    ids, mask = left_pad(rows, PAD) if kind == "gpt2" else right_pad(rows)
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    out = out[:, ids.shape[1]:] if kind == "gpt2" else out[:, 1:]
    if eos is not None:
        after = (out == eos).long().cumsum(dim=1) - (out == eos).long() > 0
        out = out.masked_fill(after, PAD)
    return out


def inputs(kind: str, backbone) -> list[list[int]]:
    """The prompts of a causal LM (the last one followed by its own greedy continuation, so
    no_repeat_ngram_size has n-grams of the prompt to ban), or the sources of an encoder-decoder."""
    if kind != "gpt2":
        return SOURCES
    more = ours(kind, backbone, PROMPTS[2:], GenerationConfig(max_new_tokens=6, greedy=True), None)[0].tolist()
    return PROMPTS[:2] + [PROMPTS[2] + more]


def end_token(kind: str, backbone, rows: list[list[int]]) -> int:
    """A token the best beams of the free run produce after a few steps (not at the first), so
    some hypotheses end early and others run on."""
    free = ours(kind, backbone, rows, GenerationConfig(max_new_tokens=N, num_beams=4, num_return_sequences=4), None)
    counts = torch.bincount(free[:, 2:6].flatten(), minlength=V)
    counts[free[:, 0]] = 0  # not a token that ends hypotheses at the first step
    return int(counts.argmax())


SETTINGS = [  # (length_penalty, early_stopping, no_repeat_ngram_size, num_return_sequences)
    (1.0, False, 0, 1),
    (2.0, True, 0, 2),
    (2.0, False, 0, 1),
    (3.0, False, 2, 1),
    (0.5, False, 2, 1),
    (-1.0, True, 3, 1),
    (1.5, "never", 2, 4),
    (0.0, False, 3, 2),
]


def test_beam_search_equals_hf_generate(pair) -> None:
    kind, backbone, hf = pair
    rows = inputs(kind, backbone)
    eos = end_token(kind, backbone, rows)
    differs_from_greedy, early_ends = False, False
    for lp, stop, ngram, R in SETTINGS:
        for end in (None, eos):
            cfg = GenerationConfig(max_new_tokens=N, num_beams=4, length_penalty=lp, early_stopping=stop,
                                   no_repeat_ngram_size=ngram, num_return_sequences=R)
            mine = ours(kind, backbone, rows, cfg, end)
            hf_out = theirs(kind, hf, rows, end, num_beams=4, length_penalty=lp, early_stopping=stop,
                            no_repeat_ngram_size=ngram or None, num_return_sequences=R)
            assert mine.shape == hf_out.shape and torch.equal(mine, hf_out), (kind, lp, stop, ngram, R, end)
            greedy_cfg = GenerationConfig(max_new_tokens=N, greedy=True, no_repeat_ngram_size=ngram)
            greedy = ours(kind, backbone, rows, greedy_cfg, end)
            best = mine[::R]
            width = max(best.shape[1], greedy.shape[1])
            pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=PAD)  # noqa: E731
            differs_from_greedy |= not torch.equal(pad(best), pad(greedy))
            if end is not None:
                early_ends |= bool(((mine == end).any(dim=1) & (mine[:, -1] == PAD)).any())
    assert differs_from_greedy  # the search does something greedy decoding does not
    assert early_ends  # some hypotheses ended before the last step


def test_greedy_with_no_repeat_ngram_equals_hf_generate(pair) -> None:
    kind, backbone, hf = pair
    rows = inputs(kind, backbone)
    eos = end_token(kind, backbone, rows)
    free = ours(kind, backbone, rows, GenerationConfig(max_new_tokens=N, greedy=True), None)
    changed = False
    for ngram in (1, 2, 3):
        for end in (None, eos):
            cfg = GenerationConfig(max_new_tokens=N, greedy=True, no_repeat_ngram_size=ngram)
            mine = ours(kind, backbone, rows, cfg, end)
            assert torch.equal(mine, theirs(kind, hf, rows, end, num_beams=1, no_repeat_ngram_size=ngram)), (ngram, end)
            changed |= end is None and not torch.equal(mine, free)
    assert changed  # the ban changed what greedy decoding writes
