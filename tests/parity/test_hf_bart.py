"""Parity of ptmkit's encoder-decoder + bart objective with HF ``BartForConditionalGeneration``,
both directions, on tiny random weights with padding (fp32, 1e-5)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from transformers import BartConfig, BartForConditionalGeneration, BartModel, GenerationConfig  # noqa: E402

from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop.hf_bart import export_bart, import_bart, to_hf_config  # noqa: E402
from ptmkit.objectives.bart import BartDenoising, DenoisingConfig, greedy_decode  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, H, LE, LD, HEADS, I, P = 100, 32, 2, 3, 4, 64, 40
PAD, BOS, EOS = 0, 2, 3
TOL = dict(rtol=1e-5, atol=1e-5)
TOK = SimpleNamespace(vocab_size=V, pad_id=PAD, unk_id=1, cls_id=BOS, sep_id=EOS, mask_id=4)


@torch.no_grad()
def perturb(module: torch.nn.Module, seed: int, scale: float = 0.05) -> None:
    """Make every tensor distinct (LayerNorm gains != 1, biases != 0) so a swapped key shows."""
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(scale * torch.randn(p.shape, generator=g))


def hf_tiny(attn: str = "eager", seed: int = 0, **kw) -> BartForConditionalGeneration:
    torch.manual_seed(seed)
    settings = dict(
        vocab_size=V, d_model=H, encoder_layers=LE, decoder_layers=LD, encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS, encoder_ffn_dim=I, decoder_ffn_dim=I, max_position_embeddings=P,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=EOS, forced_eos_token_id=None,
        attn_implementation=attn,
    )
    cfg = BartConfig(**{**settings, **kw})
    model = BartForConditionalGeneration(cfg)
    perturb(model, seed)
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(seed + 1))
    model.tie_weights()
    return model.eval()


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Three sources of length 11 and targets of length 8; rows 1 and 2 right-padded on both sides."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (3, 11), generator=g)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = PAD
    labels = torch.randint(5, V, (3, 8), generator=g)
    labels[1, 6:] = -100
    labels[2, 2:] = -100
    dec = torch.full_like(labels, EOS)
    dec[:, 1:] = labels[:, :-1]
    dec[dec == -100] = PAD
    dec_mask = (dec != PAD).long()
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": dec_mask,
            "labels": labels}


def ptm_model(cfg: EncoderDecoderConfig) -> PretrainModel:
    encoder = EncoderDecoder(cfg)
    return PretrainModel(encoder, BartDenoising(DenoisingConfig(), encoder, TOK)).eval()


@torch.no_grad()
def ptm_outputs(model: PretrainModel, b: dict[str, torch.Tensor]) -> dict[str, object]:
    out = model.backbone(b["input_ids"], b["attention_mask"], decoder_input_ids=b["decoder_input_ids"],
                         decoder_attention_mask=b["decoder_attention_mask"], output_hidden_states=True)
    return {"enc": out.extras["encoder_hidden_states"], "dec": out.extras["decoder_hidden_states"],
            "logits": model.backbone.logits(out.last_hidden_state)}


@torch.no_grad()
def hf_outputs(model: BartForConditionalGeneration, b: dict[str, torch.Tensor]) -> dict[str, object]:
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], decoder_input_ids=b["decoder_input_ids"],
                decoder_attention_mask=b["decoder_attention_mask"], output_hidden_states=True)
    return {"enc": out.encoder_hidden_states, "dec": out.decoder_hidden_states, "logits": out.logits}


def assert_same(ours: dict, theirs: dict, b: dict[str, torch.Tensor]) -> None:
    # HF's outputs at padded positions are not defined: compare real tokens only
    src, tgt = b["attention_mask"].bool(), b["decoder_attention_mask"].bool()
    assert len(ours["enc"]) == len(theirs["enc"]) == LE + 1 and len(ours["dec"]) == len(theirs["dec"]) == LD + 1
    for i, (a, c) in enumerate(zip(ours["enc"], theirs["enc"])):
        assert_close(a[src], c[src], **TOL, msg=lambda m: f"encoder hidden state {i}: {m}")
    for i, (a, c) in enumerate(zip(ours["dec"], theirs["dec"])):
        assert_close(a[tgt], c[tgt], **TOL, msg=lambda m: f"decoder hidden state {i}: {m}")
    assert_close(ours["logits"][tgt], theirs["logits"][tgt], **TOL)


def state_without_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k[len("backbone."):]: v for k, v in state.items()}


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("extra", [{}, {"scale_embedding": True, "activation_function": "relu"}])
def test_import_matches_hf(attn: str, extra: dict) -> None:
    hf = hf_tiny(attn, **extra)
    cfg, state, tok = import_bart(hf)
    assert tok is None and (cfg.encoder_layers, cfg.decoder_layers, cfg.num_heads, cfg.max_position) == (LE, LD, HEADS, P)
    assert cfg.scale_embedding == bool(extra) and cfg.decoder_start_token_id == EOS
    model = ptm_model(cfg)
    model.load_state_dict(state, strict=True)  # every tensor, final_logits_bias included
    b = inputs()
    assert_same(ptm_outputs(model, b), hf_outputs(hf, b), b)
    # the loss of the bart objective equals HF's loss with labels on the same batch
    batch = {k: b[k] for k in ("input_ids", "attention_mask", "decoder_input_ids", "labels")}
    with torch.no_grad():
        ours = model(batch).loss
        theirs = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                    decoder_input_ids=b["decoder_input_ids"], labels=b["labels"]).loss
    assert_close(ours, theirs, **TOL)
    # without decoder inputs both shift the source right (BartModel); pooled = the last real position
    with torch.no_grad():
        plain = model.backbone(b["input_ids"], b["attention_mask"])
        base = hf.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
    keep = b["attention_mask"].bool()
    assert_close(plain.last_hidden_state[keep], base[keep], **TOL)
    last = b["attention_mask"].sum(1) - 1
    assert_close(plain.pooled, base[torch.arange(3), last], **TOL)


def _random_pretrained(cfg: EncoderDecoderConfig, seed: int = 3, tokenizer=None) -> Pretrained:
    torch.manual_seed(seed)
    model = ptm_model(cfg)
    perturb(model, seed)
    with torch.no_grad():
        model.backbone.final_logits_bias.normal_(0.0, 0.1)
    return Pretrained({"model": {}, "objective": {"name": "bart"}}, tokenizer, model.backbone, model.objective, None, model)


BART_CFG = EncoderDecoderConfig(vocab_size=V, hidden_size=H, encoder_layers=LE, decoder_layers=LD, num_heads=HEADS,
                                intermediate_size=I, max_position=P, activation_dropout=0.1)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_export_loads_in_hf(tmp_path, attn: str) -> None:
    pre = _random_pretrained(BART_CFG)
    export_bart(pre, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BartForConditionalGeneration"] and config["activation_dropout"] == 0.1
    hf = BartForConditionalGeneration.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    assert hf.lm_head.weight.data_ptr() == hf.model.shared.weight.data_ptr()  # tied after loading
    b = inputs(2)
    assert_same(ptm_outputs(pre.model, b), hf_outputs(hf, b), b)
    base = BartModel.from_pretrained(tmp_path / "hf", attn_implementation=attn).eval()
    with torch.no_grad():
        last = base(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
        ours = pre.backbone(b["input_ids"], b["attention_mask"]).last_hidden_state
    keep = b["attention_mask"].bool()
    assert_close(ours[keep], last[keep], **TOL)


def test_export_import_round_trip_is_exact(tmp_path) -> None:
    cfg = replace(BART_CFG, activation="gelu_tanh", scale_embedding=True, dropout=0.2, attention_dropout=0.1)
    pre = _random_pretrained(cfg)
    export_bart(pre, tmp_path / "hf")
    back, state, _ = import_bart(tmp_path / "hf")
    assert back == cfg
    original = pre.model.state_dict()
    assert set(state) == set(original)
    for k, v in original.items():
        assert torch.equal(state[k], v), k


def test_greedy_decoding_equals_hf_generate() -> None:
    hf = hf_tiny(seed=5, init_std=0.3)  # larger weights: the arg-max changes from step to step
    cfg, state, _ = import_bart(hf)
    enc = EncoderDecoder(cfg).eval()
    enc.load_state_dict(state_without_prefix(state))
    b = inputs(3)
    ids, mask = b["input_ids"], b["attention_mask"]
    free = greedy_decode(enc, ids, mask, max_length=12, eos_id=None)
    assert free.shape == (3, 12) and len(set(free[0].tolist())) > 1
    eos = int(free[0, 4])  # a token row 0 produces at step 5: some rows stop early, others run on
    ours = greedy_decode(enc, ids, mask, max_length=12, eos_id=eos)
    assert torch.equal(ours, greedy_decode(enc, ids, mask, max_length=12, eos_id=eos, use_cache=False))
    gen = GenerationConfig(do_sample=False, num_beams=1, max_length=13, decoder_start_token_id=EOS, eos_token_id=eos,
                           pad_token_id=PAD, bos_token_id=BOS)
    with torch.no_grad():
        theirs = hf.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    assert theirs[0, 0] == EOS and torch.equal(ours, theirs[:, 1:])
    assert ours[0, 4] == eos and (ours[0, 5:] == PAD).all()  # row 0 stopped; the others ran to max_length


def test_import_refuses_what_ptmkit_lacks() -> None:
    for kw, needle in [({"encoder_layerdrop": 0.1}, "encoder_layerdrop"), ({"decoder_ffn_dim": 48}, "decoder_ffn_dim"),
                       ({"decoder_attention_heads": 2}, "decoder_attention_heads"),
                       ({"activation_function": "silu"}, "silu")]:
        with pytest.raises(PtmError, match=needle):
            import_bart(hf_tiny(**kw))
    hf = hf_tiny()
    hf.config.normalize_before = True  # an mBART-style setting a config.json may carry
    with pytest.raises(PtmError, match="normalize_before"):
        import_bart(hf)
    hf = hf_tiny()
    hf.config.tie_word_embeddings = False
    hf.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone() + 1.0)
    with pytest.raises(PtmError, match="tie_word_embeddings|lm_head"):
        import_bart(hf)


def test_export_refuses_what_bart_cannot_express(tmp_path) -> None:
    with pytest.raises(PtmError, match="embedding_norm"):
        to_hf_config(replace(BART_CFG, embedding_norm=False))
    with pytest.raises(PtmError, match="layer_norm_eps"):
        to_hf_config(replace(BART_CFG, layer_norm_eps=1e-12))
    pre = _random_pretrained(BART_CFG)
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(PtmError, match="not empty"):
        export_bart(pre, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_directory_round_trip_through_the_family(tmp_path) -> None:
    """``ptm export`` / ``ptm import`` route: the family is found by the model, the imported
    checkpoint names its encoder, and the tokenizer travels along."""
    from ptmkit.interop import export_hf, import_hf, infer_format
    from ptmkit.pretrained import load_pretrained
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\na dog ran under the house\n" * 20)
    tok = Tokenizer.train([text], kind="bpe", vocab_size=60, min_frequency=1)
    cfg = replace(BART_CFG, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id, decoder_start_token_id=tok.sep_id)
    pre = _random_pretrained(cfg, tokenizer=tok)
    assert infer_format(pre) == "bart"
    export_hf(pre, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["eos_token_id"] == tok.sep_id
    import_hf(tmp_path / "hf", tmp_path / "ckpt")
    back = load_pretrained(tmp_path / "ckpt")
    assert back.config["model"]["encoder"] == "encoder_decoder" and back.config["objective"]["name"] == "bart"
    for k, v in pre.model.state_dict().items():
        assert torch.equal(back.model.state_dict()[k], v), k
    assert back.tokenizer.to_json() == tok.to_json()
