"""Parity of ptmkit's T5-configured encoder-decoder + t5 objective with HF
``T5ForConditionalGeneration``, both directions, on tiny random weights with padding (fp32, 1e-5):
T5 v1.0 (ReLU, tied and rescaled output) and v1.1's gated-GELU without the rescaling."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration  # noqa: E402

from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop.hf_t5 import export_t5, import_t5, to_hf_config  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.t5 import SpanCorruption, SpanCorruptionConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, H, LE, LD, HEADS, I = 100, 32, 2, 3, 4, 64
PAD, EOS = 0, 3
TOL = dict(rtol=1e-5, atol=1e-5)
TOK = SimpleNamespace(vocab_size=V, pad_id=PAD, unk_id=1, cls_id=2, sep_id=EOS, mask_id=4,
                      sentinel_ids=tuple(range(V - 1, V - 11, -1)))
V10 = {}  # T5 v1.0: ReLU, tied output rescaled by d_model^-1/2
V11 = {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}  # v1.1: gated-GELU, no rescaling


@torch.no_grad()
def perturb(module: torch.nn.Module, seed: int, scale: float = 0.05) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(scale * torch.randn(p.shape, generator=g))


def hf_tiny(attn: str = "eager", seed: int = 0, **kw) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    settings = dict(vocab_size=V, d_model=H, d_kv=H // HEADS, d_ff=I, num_layers=LE, num_decoder_layers=LD,
                    num_heads=HEADS, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                    pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD)
    model = T5ForConditionalGeneration(T5Config(**{**settings, **kw}, attn_implementation=attn))
    perturb(model, seed)
    model.tie_weights()
    return model.eval()


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Three sources of length 30 and targets of length 25 (past the exact buckets); rows 1 and 2
    right-padded on both sides."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, 30), generator=g)
    mask = torch.ones(3, 30, dtype=torch.long)
    mask[1, 21:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = PAD
    labels = torch.randint(5, V, (3, 25), generator=g)
    labels[1, 16:] = -100
    labels[2, 2:] = -100
    dec = torch.full_like(labels, PAD)  # T5 starts from [PAD]
    dec[:, 1:] = labels[:, :-1]
    dec[dec == -100] = PAD
    dec_mask = (labels != -100).long()
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": dec_mask,
            "labels": labels}


def ptm_model(cfg: EncoderDecoderConfig, tokenizer=TOK) -> PretrainModel:
    encoder = EncoderDecoder(cfg)
    return PretrainModel(encoder, SpanCorruption(SpanCorruptionConfig(), encoder, tokenizer)).eval()


@torch.no_grad()
def assert_same(model: PretrainModel, hf: T5ForConditionalGeneration, b: dict[str, torch.Tensor]) -> None:
    out = model.backbone(b["input_ids"], b["attention_mask"], decoder_input_ids=b["decoder_input_ids"],
                         decoder_attention_mask=b["decoder_attention_mask"], output_hidden_states=True)
    theirs = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"], decoder_input_ids=b["decoder_input_ids"],
                decoder_attention_mask=b["decoder_attention_mask"], output_hidden_states=True)
    src, tgt = b["attention_mask"].bool(), b["decoder_attention_mask"].bool()
    enc, dec = out.extras["encoder_hidden_states"], out.extras["decoder_hidden_states"]
    assert len(enc) == len(theirs.encoder_hidden_states) == LE + 1
    assert len(dec) == len(theirs.decoder_hidden_states) == LD + 1
    for i, (a, c) in enumerate(zip(enc, theirs.encoder_hidden_states)):
        assert_close(a[src], c[src], **TOL, msg=lambda m: f"encoder hidden state {i}: {m}")
    for i, (a, c) in enumerate(zip(dec, theirs.decoder_hidden_states)):
        assert_close(a[tgt], c[tgt], **TOL, msg=lambda m: f"decoder hidden state {i}: {m}")
    # the logits sum H products of states that agree to float32 rounding (ptmkit's products without
    # autograd run through oneDNN, HF's through MKL): an absolute tolerance of 3e-5 instead of 1e-5
    assert_close(model.backbone.logits(out.last_hidden_state)[tgt], theirs.logits[tgt], rtol=1e-5, atol=3e-5)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("version", ["v1.0", "v1.1"])
def test_import_matches_hf(attn: str, version: str) -> None:
    hf = hf_tiny(attn, **(V10 if version == "v1.0" else V11))
    cfg, state, tok = import_t5(hf)
    assert tok is None and (cfg.encoder_layers, cfg.decoder_layers, cfg.num_heads, cfg.relative_buckets) == (LE, LD, HEADS, 8)
    assert cfg.scale_decoder_output == (version == "v1.0") and cfg.gated_ffn == (version == "v1.1")
    assert cfg.decoder_start_token_id == PAD and (cfg.norm, cfg.norm_type, cfg.positions, cfg.bias) == ("pre", "rms", "relative", False)
    model = ptm_model(cfg)
    model.load_state_dict(state, strict=True)
    b = inputs()
    assert_same(model, hf, b)
    # the t5 objective's loss equals HF's loss with labels on the same batch
    batch = {k: b[k] for k in ("input_ids", "attention_mask", "decoder_input_ids", "labels")}
    with torch.no_grad():
        ours = model(batch).loss
        theirs = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]).loss  # HF shifts itself
    assert_close(ours, theirs, **TOL)


def _random_pretrained(cfg: EncoderDecoderConfig, seed: int = 3, tokenizer=None) -> Pretrained:
    torch.manual_seed(seed)
    model = ptm_model(cfg, tokenizer or TOK)
    perturb(model, seed)
    return Pretrained({"model": {}, "objective": {"name": "t5"}}, tokenizer, model.backbone, model.objective, None, model)


T5_CFG = EncoderDecoderConfig(vocab_size=V, hidden_size=H, encoder_layers=LE, decoder_layers=LD, num_heads=HEADS,
                              intermediate_size=I, max_position=64, activation="relu", norm="pre", norm_type="rms",
                              bias=False, positions="relative", relative_buckets=8, relative_max_distance=20,
                              scale_attention=False, scale_decoder_output=True, embedding_norm=False,
                              layer_norm_eps=1e-6, init="t5", pad_token_id=PAD, decoder_start_token_id=PAD)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("gated", [False, True])
def test_export_loads_in_hf(tmp_path, attn: str, gated: bool) -> None:
    cfg = replace(T5_CFG, gated_ffn=True, activation="gelu_tanh", scale_decoder_output=False) if gated else T5_CFG
    pre = _random_pretrained(cfg)
    export_t5(pre, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["T5ForConditionalGeneration"]
    assert config["feed_forward_proj"] == ("gated-gelu" if gated else "relu")
    hf = T5ForConditionalGeneration.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    assert hf.lm_head.weight.data_ptr() == hf.shared.weight.data_ptr()
    assert hf.config.scale_decoder_outputs == (not gated)
    assert_same(pre.model, hf, inputs(2))


def test_export_import_round_trip_is_exact(tmp_path) -> None:
    cfg = replace(T5_CFG, dropout=0.2, attention_dropout=0.2, activation_dropout=0.2)
    pre = _random_pretrained(cfg)
    export_t5(pre, tmp_path / "hf")
    back, state, _ = import_t5(tmp_path / "hf")
    assert back == replace(cfg, max_position=512)  # HF T5 has no position limit: T5's 512 comes back
    original = pre.model.state_dict()
    assert set(state) == set(original)
    for k, v in original.items():
        assert torch.equal(state[k], v), k


def test_greedy_decoding_equals_hf_generate() -> None:
    """The objective's generate (BART's greedy decoder) equals HF's greedy generate from [PAD]."""
    hf = hf_tiny(seed=2, num_decoder_layers=LE)  # HF's generation cache assumes as many decoder layers as encoder ones
    perturb(hf, 12, 0.3)  # larger weights: the arg-max changes from step to step
    cfg, state, _ = import_t5(hf)
    model = ptm_model(cfg)
    model.load_state_dict(state)
    b = inputs(3)
    ids, mask = b["input_ids"], b["attention_mask"]
    obj = model.objective
    free = obj.generate(model.backbone, ids, mask, max_length=12)
    eos = int(free[0, 4]) if EOS not in free[0, :5].tolist() else EOS
    obj.eos_id = eos  # a token row 0 produces at step 5: some rows stop early
    ours = obj.generate(model.backbone, ids, mask, max_length=12)
    gen = GenerationConfig(do_sample=False, num_beams=1, max_length=13, decoder_start_token_id=PAD, eos_token_id=eos,
                           pad_token_id=PAD)
    with torch.no_grad():
        theirs = hf.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    assert theirs[0, 0] == PAD and torch.equal(ours, theirs[:, 1 : 1 + ours.shape[1]])
    assert all(len(set(row.tolist())) > 1 for row in free)


def test_refusals() -> None:
    with pytest.raises(PtmError, match="d_kv"):
        import_t5(hf_tiny(d_kv=4))
    with pytest.raises(PtmError, match="feed_forward_proj"):
        import_t5(hf_tiny(feed_forward_proj="gated-silu"))
    with pytest.raises(PtmError, match="norm_type"):
        to_hf_config(replace(T5_CFG, norm_type="layer"))
    with pytest.raises(PtmError, match="T5"):
        to_hf_config(replace(T5_CFG, positions="absolute", bias=True))
    from ptmkit.interop.hf_bart import problems as bart_problems

    assert bart_problems(T5_CFG) and not bart_problems(EncoderDecoderConfig())  # the BART family leaves T5 alone


def test_directory_round_trip_through_the_family(tmp_path) -> None:
    """``ptm export`` / ``ptm import``: the family is found by the model; the tokenizer and its
    sentinels travel along."""
    from ptmkit.interop import export_hf, import_hf, infer_format
    from ptmkit.pretrained import load_pretrained
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\na dog ran under the house\n" * 20)
    tok = Tokenizer.train([text], kind="unigram", vocab_size=40, extra_ids=10)
    cfg = replace(T5_CFG, vocab_size=tok.vocab_size)
    pre = _random_pretrained(cfg, tokenizer=tok)
    assert infer_format(pre) == "t5"
    export_hf(pre, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "t5" and config["eos_token_id"] == tok.sep_id
    import_hf(tmp_path / "hf", tmp_path / "ckpt")
    back = load_pretrained(tmp_path / "ckpt")
    assert back.config["model"]["encoder"] == "encoder_decoder" and back.config["objective"]["name"] == "t5"
    for k, v in pre.model.state_dict().items():
        assert torch.equal(back.model.state_dict()[k], v), k
    assert back.tokenizer.to_json() == tok.to_json() and back.tokenizer.sentinel_ids == tok.sentinel_ids
