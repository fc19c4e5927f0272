"""Physical head pruning: a pruned head equals a head gated to 0 (every encoder with heads, every
kind of attention, relative position biases cut per head, incremental decoding), the weights
shrink, heads keep their original numbers, shared (ALBERT) attention, and a pruned model
round-trips through save_pretrained / load_pretrained."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

from ptmkit.build import build_encoder, build_model, resolve_config
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.encoders.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from ptmkit.encoders.xlnet import XLNetConfig, XLNetEncoder
from ptmkit.errors import PtmError
from ptmkit.presets import load_preset
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tokenization import Tokenizer

V, H, HEADS = 50, 16, 4
D = H // HEADS
BERT = TransformerConfig(vocab_size=V, hidden_size=H, num_layers=3, num_heads=HEADS, intermediate_size=32,
                         max_position=16, dropout=0.0, attention_dropout=0.0)
GPT_REL = replace(BERT, norm="pre", positions="relative", type_vocab_size=0, pooler=False, embedding_norm=False)
T5 = EncoderDecoderConfig(vocab_size=V, hidden_size=H, encoder_layers=2, decoder_layers=2, num_heads=HEADS,
                          intermediate_size=32, max_position=16, norm="pre", norm_type="rms", bias=False,
                          positions="relative", relative_buckets=8, relative_max_distance=20, scale_attention=False,
                          embedding_norm=False, init="t5", dropout=0.0)
BART = EncoderDecoderConfig(vocab_size=V, hidden_size=H, encoder_layers=2, decoder_layers=2, num_heads=HEADS,
                            intermediate_size=32, max_position=16, dropout=0.0)
XLNET = XLNetConfig(vocab_size=V, hidden_size=H, num_layers=2, num_heads=HEADS, intermediate_size=32, dropout=0.0)


def fresh(cls: type, cfg, seed: int = 0):
    torch.manual_seed(seed)
    enc = cls(cfg).double().eval()
    with torch.no_grad():  # biases and gains away from 0 and 1: a wrong slice shows
        g = torch.Generator().manual_seed(seed + 1)
        for p in enc.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return enc


def batch(seed: int = 0, length: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (2, length), generator=g)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, length - 3:] = 0
    return ids, mask


def gates(shape: tuple[int, int], heads: dict[int, list[int]]) -> torch.Tensor:
    g = torch.ones(shape, dtype=torch.float64)
    for layer, hs in heads.items():
        g[layer, hs] = 0.0
    return g


@pytest.mark.parametrize("cfg", [BERT, GPT_REL, replace(BERT, sharing="ffn")], ids=["bert", "relative", "ffn-shared"])
@pytest.mark.parametrize("causal", [False, True])
def test_pruned_transformer_equals_zero_gates(cfg: TransformerConfig, causal: bool) -> None:
    full = fresh(TransformerEncoder, cfg)
    pruned = fresh(TransformerEncoder, cfg)
    heads = {0: [1], 1: [0, 1, 2, 3], 2: [3, 0]}  # layer 1 loses every head: its attention is its output bias
    pruned.prune_heads(heads)
    ids, mask = batch()
    with torch.no_grad():
        ref = full(ids, mask, causal=causal, head_mask=gates((3, HEADS), heads), output_attentions=True)
        out = pruned(ids, mask, causal=causal, output_attentions=True)
    assert_close(out.last_hidden_state, ref.last_hidden_state)
    assert [a.shape[1] for a in out.attentions] == [3, 0, 2]
    assert_close(out.attentions[0], ref.attentions[0][:, [0, 2, 3]])  # remaining heads, original order
    assert_close(out.attentions[2], ref.attentions[2][:, [1, 2]])
    # a head mask keeps its [layers, heads] shape: entries of pruned heads are ignored
    m = torch.rand(3, HEADS, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert_close(pruned(ids, mask, causal=causal, head_mask=m).last_hidden_state,
                     full(ids, mask, causal=causal, head_mask=m * gates((3, HEADS), heads)).last_hidden_state)


def test_pruning_shrinks_the_matrices_and_counts_heads_by_original_index() -> None:
    enc = fresh(TransformerEncoder, BERT)
    before = enc.num_parameters()
    enc.prune_heads({0: [1]})
    enc.prune_heads({0: [1, 2], 2: [0]})  # head 1 again (skipped), then 2: original numbers throughout
    attn = enc.layers[0].attn
    assert attn.kept_heads == [0, 3] and attn.num_heads == 2
    assert attn.qkv.weight.shape == (3 * 2 * D, H) and attn.qkv.bias.shape == (3 * 2 * D,)
    assert attn.out.weight.shape == (H, 2 * D) and attn.out.bias.shape == (H,)
    assert enc.config.pruned_heads == {0: (1, 2), 2: (0,)}
    assert before - enc.num_parameters() == 3 * (4 * H * D + 3 * D)
    once = fresh(TransformerEncoder, BERT)
    once.prune_heads({0: [2, 1], 2: [0]})
    ids, mask = batch(1)
    with torch.no_grad():
        assert_close(enc(ids, mask).last_hidden_state, once(ids, mask).last_hidden_state)
    # the rows kept are the original heads' own
    full = fresh(TransformerEncoder, BERT)
    q_rows = full.layers[0].attn.qkv.weight[: H].view(HEADS, D, H)
    assert torch.equal(attn.qkv.weight[: 2 * D].view(2, D, H), q_rows[[0, 3]])
    assert torch.equal(attn.out.weight.view(H, 2, D), full.layers[0].attn.out.weight.view(H, HEADS, D)[:, [0, 3]])


def test_pruned_incremental_decoding_equals_the_full_forward() -> None:
    """Cached keys/values of a pruned layer have its own head count; the relative bias is cut per layer."""
    enc = fresh(TransformerEncoder, GPT_REL)
    enc.prune_heads({0: [2], 2: [0, 1, 3]})
    ids, _ = batch(2)
    with torch.no_grad():
        whole = enc(ids, causal=True, output_attentions=True)
        cache = enc.start_cache()
        first = enc(ids[:, :5], causal=True, cache=cache)
        rest = enc(ids[:, 5:], causal=True, cache=first.extras["cache"], output_attentions=True)
    assert_close(torch.cat([first.last_hidden_state, rest.last_hidden_state], 1), whole.last_hidden_state)
    assert_close(rest.attentions[2], whole.attentions[2][:, :, 5:])
    assert rest.attentions[2].shape == (2, 1, 4, 9)


@pytest.mark.parametrize("cfg", [BART, T5], ids=["bart", "t5"])
def test_pruned_encoder_decoder_equals_zero_gates(cfg: EncoderDecoderConfig) -> None:
    full = fresh(EncoderDecoder, cfg)
    pruned = fresh(EncoderDecoder, cfg)
    heads = {"encoder.0": [1, 3], 1: [0], "decoder.1": [2], "cross.0": [0, 1], "cross.1": [3]}
    pruned.prune_heads(heads)
    assert pruned.config.pruned_heads == {"cross.0": (0, 1), "cross.1": (3,), "decoder.1": (2,),
                                          "encoder.0": (1, 3), "encoder.1": (0,)}
    assert pruned.decoder.layers[0].cross_attn.kv.weight.shape == (2 * 2 * D, H)
    ids, mask = batch(3)
    dec, dec_mask = batch(4, length=6)
    masks = {"head_mask": gates((2, HEADS), {0: [1, 3], 1: [0]}), "decoder_head_mask": gates((2, HEADS), {1: [2]}),
             "cross_attn_head_mask": gates((2, HEADS), {0: [0, 1], 1: [3]})}
    with torch.no_grad():
        ref = full(ids, mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask, output_attentions=True, **masks)
        out = pruned(ids, mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask, output_attentions=True)
    assert_close(out.last_hidden_state, ref.last_hidden_state)
    assert_close(out.extras["encoder_last_hidden_state"], ref.extras["encoder_last_hidden_state"])
    assert [a.shape[1] for a in out.extras["cross_attentions"]] == [2, 3]
    assert_close(out.extras["cross_attentions"][0], ref.extras["cross_attentions"][0][:, [2, 3]])
    assert_close(out.extras["decoder_attentions"][1], ref.extras["decoder_attentions"][1][:, [0, 1, 3]])
    # incremental decoding over the pruned decoder (cached self-attention, cross keys projected once)
    with torch.no_grad():
        enc_out = pruned.encode(ids, mask).last_hidden_state
        whole = pruned.decode(dec, enc_out, mask).last_hidden_state
        cache = pruned.start_cache(enc_out, mask)
        steps = []
        for t in range(dec.shape[1]):
            step = pruned.decode(dec[:, t : t + 1], cache=cache)
            cache = step.extras["cache"]
            steps.append(step.last_hidden_state)
    assert_close(torch.cat(steps, 1), whole)


def test_pruned_xlnet_equals_zero_gates_in_both_streams() -> None:
    full = fresh(XLNetEncoder, XLNET)
    pruned = fresh(XLNetEncoder, XLNET)
    heads = {0: [0, 2], 1: [1]}
    pruned.prune_heads(heads)
    a = pruned.layers[0].attn
    assert a.q.weight.shape == (2 * D, H) and a.o.weight.shape == (H, 2 * D)
    assert a.r_w_bias.shape == (2, D) and a.seg_embed.shape == (2, 2, D)
    ids, mask = batch(5)
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    pos = torch.tensor([[1, 6], [0, 3]])
    sees = torch.ones(9, 9, dtype=torch.bool).tril(-1).expand(2, 9, 9)
    kw = dict(token_type_ids=types, sees=sees, target_positions=pos, output_attentions=True)
    with torch.no_grad():
        ref = full(ids, mask, head_mask=gates((2, HEADS), heads), **kw)
        out = pruned(ids, mask, **kw)
    assert_close(out.last_hidden_state, ref.last_hidden_state)
    assert_close(out.extras["query"], ref.extras["query"])
    assert_close(out.extras["query_attentions"][1], ref.extras["query_attentions"][1][:, [0, 2, 3]])


def test_shared_attention_is_pruned_in_every_layer_or_not_at_all() -> None:
    cfg = replace(BERT, sharing="all")
    enc = fresh(TransformerEncoder, cfg)
    before = enc.num_parameters()
    with pytest.raises(PtmError, match="sharing='all'.*same heads for each layer 0 .. 2"):
        enc.prune_heads({0: [1]})
    with pytest.raises(PtmError, match="sharing='all'"):
        enc.prune_heads({0: [1], 1: [1], 2: [2]})
    assert enc.num_parameters() == before and enc.config.pruned_heads == {}  # a refusal changes nothing
    full = fresh(TransformerEncoder, cfg)
    enc.prune_heads({i: [1] for i in range(3)})
    assert before - enc.num_parameters() == 4 * H * D + 3 * D  # the one shared module, cut once
    ids, mask = batch(6)
    with torch.no_grad():
        assert_close(enc(ids, mask).last_hidden_state,
                     full(ids, mask, head_mask=gates((3, HEADS), {i: [1] for i in range(3)})).last_hidden_state)
    with pytest.raises(PtmError, match="prunes layers differently.*sharing='attention'"):
        replace(BERT, sharing="attention", pruned_heads={0: [1]})


def test_bad_prune_requests_are_refused() -> None:
    enc = fresh(TransformerEncoder, BERT)
    with pytest.raises(PtmError, match="prune_heads names layer 3; layers are numbered 0 .. 2"):
        enc.prune_heads({3: [0]})
    with pytest.raises(PtmError, match=r"prune_heads\[0\] names head 4; heads are numbered 0 .. 3"):
        enc.prune_heads({0: [4]})
    with pytest.raises(PtmError, match="list of head indices"):
        enc.prune_heads({0: 1})
    ed = fresh(EncoderDecoder, BART)
    with pytest.raises(PtmError, match="'decoder.0' .. 'decoder.1'.*'cross.0'"):
        ed.prune_heads({"cros.0": [1]})
    with pytest.raises(PtmError, match="names 'encoder.2'"):
        ed.prune_heads({"encoder.2": [1]})


def tokenizer(tmp_path) -> Tokenizer:
    text = tmp_path / "t.txt"
    text.write_text("\n".join(f"a b c word{i % 7} d e f" for i in range(60)) + "\n")
    return Tokenizer.train([text], "wordpiece", 60, min_frequency=1)


MODELS = {
    "bert-tiny": ({"hidden_size": 16, "num_layers": 2, "num_heads": 4, "intermediate_size": 32, "max_position": 32},
                  {1: [0, 2]}),
    "bart-tiny": ({"hidden_size": 16, "encoder_layers": 1, "decoder_layers": 2, "num_heads": 4,
                   "intermediate_size": 32, "max_position": 32}, {"encoder.0": [3], "cross.1": [0, 1]}),
    "xlnet-tiny": ({"hidden_size": 16, "num_layers": 2, "num_heads": 4, "intermediate_size": 32}, {0: [1, 2, 3]}),
}


@pytest.mark.parametrize("preset", sorted(MODELS))
def test_a_pruned_model_round_trips_through_save_and_load(tmp_path, preset: str) -> None:
    tok = tokenizer(tmp_path)
    sizes, heads = MODELS[preset]
    raw = load_preset(preset)
    raw["model"].update(sizes)
    raw["train"]["seq_len"] = 16
    config = resolve_config(raw, tok)
    torch.manual_seed(0)
    model = build_model(config, tok).eval()
    full_size = sum(p.numel() for p in model.parameters())
    model.backbone.prune_heads(heads)
    size = sum(p.numel() for p in model.parameters())
    assert size < full_size
    save_pretrained(tmp_path / "ck", config, model, tok)  # the config given is the unpruned one
    stored = json.loads((tmp_path / "ck" / "config.json").read_text())["model"]["pruned_heads"]
    assert stored == {str(k): v for k, v in heads.items()}
    ids = torch.tensor([tok.encode("a b c word1 d e", add_special_tokens=True)] * 2)
    with torch.no_grad():
        expected = model.backbone(ids).last_hidden_state
    for with_heads in (True, False):
        back = load_pretrained(tmp_path / "ck", heads=with_heads)
        assert back.backbone.config.pruned_heads == model.backbone.config.pruned_heads
        assert back.backbone.num_parameters() == model.backbone.num_parameters()
        with torch.no_grad():
            assert_close(back.backbone(ids).last_hidden_state, expected)
    # pruning through the Pretrained keeps its config in step (a fresh encoder of that config is pruned too)
    back = load_pretrained(tmp_path / "ck")
    more = {"encoder.0": [0]} if preset == "bart-tiny" else {0: [0]}
    back.prune_heads(more)
    assert back.config["model"]["pruned_heads"] == {str(k): list(v) for k, v in back.backbone.config.pruned_heads.items()}
    assert build_encoder(back.config["model"], tok).num_parameters() == back.backbone.num_parameters()
