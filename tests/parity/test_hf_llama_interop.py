"""LLaMA as an HF family: HF ``LlamaForCausalLM`` -> ptmkit -> HF on tiny random weights (logits
within 1e-5 in float32, every tensor back unchanged), the settings an export refuses, and greedy
generation of the imported model against HF's ``generate``."""

from __future__ import annotations

import json
import os
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from conftest import special_ids  # noqa: E402
from transformers import GenerationConfig as HFGenerationConfig  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.generation import CausalLMStepper, GenerationConfig, decode, left_pad  # noqa: E402
from ptmkit.interop import export_hf, infer_format, load_hf  # noqa: E402
from ptmkit.interop.hf_llama import import_llama, to_hf_config  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.clm import CausalLM, CLMConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402
from ptmkit.tokenization import Tokenizer  # noqa: E402

H, L, HEADS, KV, INNER, EPS = 32, 2, 4, 2, 48, 1e-6
TOL = dict(rtol=0, atol=1e-5)
TEXT = "the cat sat on the mat . a dog ran after the cat . language models learn from raw text .\n"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp("tok") / "text.txt"
    path.write_text(TEXT * 20)
    return Tokenizer.train([path], kind="bpe", vocab_size=300, min_frequency=1)


def hf_llama(vocab: int, seed: int = 0, scale: float = 0.05, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    kw = dict(vocab_size=vocab, hidden_size=H, intermediate_size=INNER, num_hidden_layers=L, num_attention_heads=HEADS,
              num_key_value_heads=KV, rms_norm_eps=EPS, rope_theta=500000.0, max_position_embeddings=64,
              tie_word_embeddings=True, pad_token_id=0, bos_token_id=3, eos_token_id=3, attn_implementation="eager")
    model = LlamaForCausalLM(LlamaConfig(**{**kw, **overrides}))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # norm gains away from 1, so a misplaced norm weight shows
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model.eval()


def save_hf(model: LlamaForCausalLM, tokenizer: Tokenizer, path) -> None:
    model.save_pretrained(path)
    tokenizer.to_transformers().save_pretrained(path)


def batch(vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Three sequences of length 12, rows 1 and 2 right-padded."""
    ids = torch.randint(5, vocab, (3, 12), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


@torch.no_grad()
def ptm_logits(backbone, b) -> torch.Tensor:
    return F.linear(backbone(**b, causal=True).last_hidden_state, backbone.output_embeddings())


@torch.no_grad()
def test_round_trip_hf_ptmkit_hf(tmp_path, tokenizer) -> None:
    V = tokenizer.vocab_size
    hf = hf_llama(V)
    save_hf(hf, tokenizer, tmp_path / "hf")
    pre = load_hf(tmp_path / "hf")
    cfg = pre.backbone.config
    assert (cfg.positions, cfg.norm, cfg.norm_type, cfg.ffn, cfg.bias) == ("rope", "pre", "rmsnorm", "swiglu", False)
    assert (cfg.rope_theta, cfg.num_kv_heads, cfg.layer_norm_eps, cfg.max_position) == (500000.0, KV, EPS, 64)
    assert pre.config["objective"]["name"] == "clm" and pre.causal
    b = batch(V)
    keep = b["attention_mask"].bool()
    theirs = hf(**b).logits
    assert_close(ptm_logits(pre.backbone, b)[keep], theirs[keep], **TOL)

    assert infer_format(pre) == "llama"
    export_hf(pre, tmp_path / "back", format="llama")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    again = LlamaForCausalLM.from_pretrained(tmp_path / "back", attn_implementation="eager").eval()
    assert again.lm_head.weight.data_ptr() == again.model.embed_tokens.weight.data_ptr()  # tied
    assert again.config.num_key_value_heads == KV and again.config.rms_norm_eps == EPS
    original = hf.state_dict()
    for k, v in again.state_dict().items():
        assert torch.equal(v, original[k]), k
    assert_close(again(**b).logits[keep], theirs[keep], **TOL)
    sdpa = LlamaForCausalLM.from_pretrained(tmp_path / "back", attn_implementation="sdpa").eval()
    assert_close(sdpa(**b).logits[keep], theirs[keep], **TOL)
    assert load_hf(tmp_path / "back").backbone.config == cfg


@torch.no_grad()
def test_llamamodel_and_multi_query_import() -> None:
    """A ``LlamaModel`` in memory (no head), one key/value head, and the default rope_theta."""
    full = hf_llama(100, seed=4, num_key_value_heads=1, rope_theta=10000.0)
    base = LlamaModel(full.config)
    base.load_state_dict({k[len("model."):]: v for k, v in full.state_dict().items() if k.startswith("model.")})
    cfg, state, tok = import_llama(base.eval())
    assert tok is None and cfg.num_kv_heads == 1 and cfg.rope_theta == 10000.0
    encoder = TransformerEncoder(cfg)
    model = PretrainModel(encoder, CausalLM(CLMConfig(), encoder, special_ids(100))).eval()
    model.load_state_dict(state, strict=True)
    b = batch(100, seed=1)
    keep = b["attention_mask"].bool()
    assert_close(model.backbone(**b, causal=True).last_hidden_state[keep], base(**b).last_hidden_state[keep], **TOL)
    assert_close(ptm_logits(model.backbone, b)[keep], full(**b).logits[keep], **TOL)


def test_import_refuses_what_ptmkit_cannot_hold(tmp_path, tokenizer) -> None:
    untied = hf_llama(100, tie_word_embeddings=False)
    with pytest.raises(PtmError, match="tie_word_embeddings=false"):
        import_llama(untied)
    for overrides, named in ((dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling of type 'linear'"),
                             (dict(attention_bias=True), "attention_bias=true"), (dict(mlp_bias=True), "mlp_bias=true"),
                             (dict(hidden_act="gelu"), "hidden_act='gelu'"), (dict(head_dim=16), "head_dim=16")):
        with pytest.raises(PtmError, match=named) as info:
            import_llama(hf_llama(100, **overrides))
        assert "\n" not in str(info.value)
    # LLaMA's own tokenizers hold none of ptmkit's special tokens: refused with the reason
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import models

    hf_llama(100).save_pretrained(tmp_path / "hf")
    RawTokenizer(models.BPE({"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3}, [])).save(str(tmp_path / "hf" / "tokenizer.json"))
    with pytest.raises(PtmError, match="LLaMA's own tokenizers"):
        load_hf(tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").unlink()
    (tmp_path / "hf" / "tokenizer.model").write_bytes(b"\x0a\x00")
    with pytest.raises(PtmError, match="SentencePiece tokenizer.model"):
        load_hf(tmp_path / "hf")


LLAMA_CFG = TransformerConfig(
    vocab_size=100, hidden_size=H, num_layers=L, num_heads=HEADS, num_kv_heads=KV, intermediate_size=INNER,
    max_position=64, type_vocab_size=0, norm="pre", norm_type="rmsnorm", ffn="swiglu", positions="rope", bias=False,
    layer_norm_eps=EPS, dropout=0.0, attention_dropout=0.0, embedding_norm=False, pooler=False,
)


@pytest.mark.parametrize("change, named", [
    (dict(positions="absolute"), "positions='absolute'"),
    (dict(norm="post"), "norm='post'"),
    (dict(bias=True), "bias=true"),
    (dict(norm_type="layernorm"), "norm_type='layernorm'"),
    (dict(ffn="plain"), "ffn='plain'"),
    (dict(type_vocab_size=2), "type_vocab_size=2"),
    (dict(embedding_norm=True), "embedding_norm=true"),
])
def test_export_refuses_what_llama_cannot_hold(change, named) -> None:
    with pytest.raises(PtmError, match=named) as info:
        to_hf_config(replace(LLAMA_CFG, **change))
    assert "\n" not in str(info.value) and str(info.value).startswith("this model cannot be exported as LLaMA: ")
    with pytest.raises(PtmError, match="both directions"):
        to_hf_config(LLAMA_CFG, causal=False)


def test_export_by_format_refuses_and_writes_nothing(tmp_path) -> None:
    encoder = TransformerEncoder(replace(LLAMA_CFG, positions="absolute"))
    model = PretrainModel(encoder, CausalLM(CLMConfig(), encoder, special_ids(100))).eval()
    pre = Pretrained({"model": {}, "objective": {"name": "clm"}}, None, model.backbone, model.objective, None, model)
    with pytest.raises(PtmError, match="positions='absolute'"):
        export_hf(pre, tmp_path / "out", format="llama")
    assert not (tmp_path / "out").exists()


# -- generation ------------------------------------------------------------------------------------
PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19, 20]]
PAD = 0


def ours(backbone, prompts, n, eos=None) -> torch.Tensor:
    ids, mask = left_pad(prompts, PAD)
    return decode(CausalLMStepper(backbone, ids, mask, use_cache=True), GenerationConfig(max_new_tokens=n, greedy=True),
                  eos_id=eos, pad_id=PAD)


def theirs(hf, prompts, n, eos=None) -> torch.Tensor:
    ids, mask = left_pad(prompts, PAD)
    gen = HFGenerationConfig(do_sample=False, num_beams=1, max_new_tokens=n, eos_token_id=eos, pad_token_id=PAD)
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    return out[:, ids.shape[1]:]


def test_cached_greedy_generation_equals_hf_generate(tmp_path, tokenizer) -> None:
    V = tokenizer.vocab_size
    hf = hf_llama(V, seed=11, scale=0.3)  # larger weights: the arg-max changes from step to step
    save_hf(hf, tokenizer, tmp_path / "hf")
    backbone = load_hf(tmp_path / "hf").backbone
    for prompt in PROMPTS:
        mine = ours(backbone, [prompt], 12)
        assert len(set(mine[0].tolist())) > 3  # not one repeated token
        assert torch.equal(mine, theirs(hf, [prompt], 12))
    assert torch.equal(ours(backbone, PROMPTS, 10), theirs(hf, PROMPTS, 10))  # left-padded batch
