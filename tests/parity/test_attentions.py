"""Attention probabilities, head masks and pruned heads against HF transformers on the same tiny
random weights (fp32, 1e-5): BERT, GPT-2, BART (encoder, decoder, cross), T5, XLNet.

HF 5 dropped ``head_mask`` and ``prune_heads``.  Their HF 4 semantics are rebuilt on HF's own
code: a head gate multiplies a head's probabilities, and ``(g P) V = P (g V)``, so HF's eager
attention run on gated values gives HF 4's ``head_mask`` output (and its probabilities times the
gate, which HF 4 returned); a pruned HF BERT is cut with HF's ``prune_linear_layer`` as HF 4's
``BertAttention.prune_heads`` did.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
from conftest import special_ids
from transformers import (  # noqa: E402
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2Model,
    T5Config,
    T5ForConditionalGeneration,
)
from transformers.models.bart import modeling_bart  # noqa: E402
from transformers.models.bert import modeling_bert  # noqa: E402
from transformers.models.t5 import modeling_t5  # noqa: E402
from transformers.pytorch_utils import prune_linear_layer  # noqa: E402

from ptmkit.build import build_model  # noqa: E402
from ptmkit.encoders import TransformerEncoder  # noqa: E402
from ptmkit.encoders.encoder_decoder import EncoderDecoder  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop import export_hf  # noqa: E402
from ptmkit.interop.hf_bart import import_bart  # noqa: E402
from ptmkit.interop.hf_bert import import_bert  # noqa: E402
from ptmkit.interop.hf_gpt2 import import_gpt2  # noqa: E402
from ptmkit.interop.hf_t5 import import_t5  # noqa: E402
from ptmkit.interop.hf_xlnet import build_hf_xlnet  # noqa: E402
from ptmkit.objectives.plm import factorisation_masks  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, H, HEADS, I = 100, 32, 4, 64
TOL = dict(rtol=1e-5, atol=1e-5)


@torch.no_grad()
def perturb(module: torch.nn.Module, seed: int) -> None:
    """Every tensor distinct (LayerNorm gains != 1, biases != 0), so a swapped head shows."""
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))


def backbone(cls: type, cfg, state: dict[str, torch.Tensor]):
    """The ptmkit encoder of an imported state (its ``backbone.`` tensors, all of them)."""
    enc = cls(cfg)
    enc.load_state_dict({k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}, strict=True)
    return enc.eval()


def padded(rows: int, length: int, ends: dict[int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids ``[rows, length]`` and a right-padding mask (row ``r`` ends at ``ends[r]``)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    for r, end in ends.items():
        mask[r, end:] = 0
    return ids * mask, mask


def gated_eager(eager):
    """HF's eager attention with HF 4's head mask: the module's ``test_gate [heads]`` scales each
    head's values (so its output) and the probabilities it returns."""

    def attention(module, query, key, value, attention_mask, **kwargs):
        gate = getattr(module, "test_gate", None)
        if gate is None:
            return eager(module, query, key, value, attention_mask, **kwargs)
        g = gate[None, :, None, None]
        out, weights = eager(module, query, key, value * g, attention_mask, **kwargs)
        return out, weights * g

    return attention


def assert_attentions(ours, theirs, what: str, real: torch.Tensor | None = None) -> None:
    """Per layer the same probabilities ``[B, heads, T, S]``; with ``real [B, T]`` (a padded batch
    of a packing encoder) those of the real queries: a padded query's row is not defined."""
    assert len(ours) == len(theirs), what
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, f"{what} {i}: {a.shape} vs {b.shape}"
        if real is not None:
            a, b = a.transpose(1, 2)[real], b.transpose(1, 2)[real]  # [N, heads, S]
        assert_close(a, b, **TOL, msg=lambda m: f"{what} {i}: {m}")


# -- BERT ------------------------------------------------------------------------------------


def hf_bert(seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=3, num_attention_heads=HEADS, intermediate_size=I,
                     max_position_embeddings=64, type_vocab_size=2, attn_implementation="eager")
    model = BertModel(cfg)
    perturb(model, seed)
    return model.eval()


def ptm_bert(hf: BertModel) -> TransformerEncoder:
    cfg, state, _ = import_bert(hf)
    return backbone(TransformerEncoder, cfg, state)


def bert_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    ids, mask = padded(3, 12, {1: 9, 2: 5}, seed)
    return {"input_ids": ids, "attention_mask": mask}


@torch.no_grad()
def test_bert_attentions_match_hf() -> None:
    hf = hf_bert()
    ours = ptm_bert(hf)
    b = bert_batch()
    theirs = hf(**b, output_attentions=True)
    out = ours(**b, output_attentions=True)
    real = b["attention_mask"].bool()
    assert_attentions(out.attentions, theirs.attentions, "attention", real)
    assert out.attentions[0].shape == (3, HEADS, 12, 12)
    assert_close(out.attentions[0].sum(-1), torch.ones(3, HEADS, 12), **TOL)  # rows are distributions
    assert float(out.attentions[1][2, :, :, 5:].abs().max()) == 0.0  # padded keys get nothing
    # asking for them changes nothing else; not asking returns none
    plain = ours(**b)
    assert plain.attentions is None
    assert_close(out.last_hidden_state, plain.last_hidden_state, **TOL)


@pytest.mark.parametrize("shape", ["layers", "heads"])
def test_bert_head_mask_matches_hf_head_mask(monkeypatch, shape: str) -> None:
    monkeypatch.setattr(modeling_bert, "eager_attention_forward", gated_eager(modeling_bert.eager_attention_forward))
    hf = hf_bert(1)
    ours = ptm_bert(hf)
    b = bert_batch(1)
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.5], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    if shape == "heads":
        mask = mask[0]
    for i, layer in enumerate(hf.encoder.layer):
        layer.attention.self.test_gate = mask if mask.dim() == 1 else mask[i]
    with torch.no_grad():
        theirs = hf(**b, output_attentions=True, output_hidden_states=True)
        out = ours(**b, head_mask=mask, output_attentions=True, output_hidden_states=True)
        plain = ours(**b)
    keep = b["attention_mask"].bool()
    for i, (a, c) in enumerate(zip(out.hidden_states, theirs.hidden_states)):
        assert_close(a[keep], c[keep], **TOL, msg=lambda m: f"hidden state {i}: {m}")
    assert_attentions(out.attentions, theirs.attentions, "gated attention", keep)
    assert not torch.allclose(out.last_hidden_state, plain.last_hidden_state, atol=1e-3)  # the mask does something
    # without output_attentions the fused path scales the heads' outputs instead: the same result
    with torch.no_grad():
        fused = ours(**b, head_mask=mask)
    assert_close(fused.last_hidden_state, out.last_hidden_state, **TOL)


def hf_prune_bert(hf: BertModel, heads: dict[int, list[int]]) -> None:
    """HF 4's ``BertModel.prune_heads`` on HF 5's modules (heads never pruned before)."""
    for layer, drop in heads.items():
        attention = hf.encoder.layer[layer].attention
        self_attn = attention.self
        d = self_attn.attention_head_size
        keep = [h for h in range(self_attn.num_attention_heads) if h not in drop]
        index = torch.cat([torch.arange(h * d, (h + 1) * d) for h in keep]) if keep else torch.zeros(0, dtype=torch.long)
        self_attn.query = prune_linear_layer(self_attn.query, index)
        self_attn.key = prune_linear_layer(self_attn.key, index)
        self_attn.value = prune_linear_layer(self_attn.value, index)
        attention.output.dense = prune_linear_layer(attention.output.dense, index, dim=1)
        self_attn.num_attention_heads = len(keep)
        self_attn.all_head_size = len(keep) * d


@torch.no_grad()
def test_bert_pruned_heads_match_hf_pruned() -> None:
    hf = hf_bert(2)
    ours = ptm_bert(hf)
    before = ours.num_parameters()
    heads = {0: [1], 2: [0, 3]}
    hf_prune_bert(hf, heads)
    ours.prune_heads(heads)
    assert ours.config.pruned_heads == {0: (1,), 2: (0, 3)}
    d = H // HEADS
    assert before - ours.num_parameters() == 3 * (4 * H * d + 3 * d)  # per head: q, k, v rows and biases, out columns
    assert ours.layers[2].attn.qkv.weight.shape == (3 * 2 * d, H) and ours.layers[2].attn.out.weight.shape == (H, 2 * d)
    b = bert_batch(2)
    theirs = hf(**b, output_attentions=True, output_hidden_states=True)
    out = ours(**b, output_attentions=True, output_hidden_states=True)
    keep = b["attention_mask"].bool()
    for i, (a, c) in enumerate(zip(out.hidden_states, theirs.hidden_states)):
        assert_close(a[keep], c[keep], **TOL, msg=lambda m: f"hidden state {i}: {m}")
    assert [a.shape[1] for a in out.attentions] == [3, 4, 2]
    assert_attentions(out.attentions, theirs.attentions, "pruned attention", keep)
    assert_close(out.pooled, theirs.pooler_output, **TOL)
    # HF 5 models hold no pruned heads: export refuses rather than failing on the shapes
    with pytest.raises(PtmError, match="pruned attention heads.*export the model before pruning"):
        export_hf(Pretrained({"model": {}}, None, ours, None), "unused")


# -- GPT-2 -----------------------------------------------------------------------------------


@torch.no_grad()
def test_gpt2_attentions_match_hf() -> None:
    torch.manual_seed(0)
    hf = GPT2Model(GPT2Config(vocab_size=V, n_positions=64, n_embd=H, n_layer=2, n_head=HEADS,
                              attn_implementation="eager"))
    perturb(hf, 0)
    hf.eval()
    cfg, state, _ = import_gpt2(hf)
    ours = backbone(TransformerEncoder, cfg, state)
    ids, mask = padded(3, 12, {1: 8, 2: 3}, 0)
    theirs = hf(input_ids=ids, attention_mask=mask, output_attentions=True)
    out = ours(ids, mask, causal=True, output_attentions=True)
    assert_attentions(out.attentions, theirs.attentions, "causal attention", mask.bool())
    assert float(torch.triu(out.attentions[0], 1).abs().max()) == 0.0  # nothing from the future
    # the unpadded batch takes the implicit causal mask of the fused path: the same probabilities
    full = ours(ids, causal=True, output_attentions=True)
    assert_attentions(full.attentions, hf(input_ids=ids, output_attentions=True).attentions, "unpadded causal")


# -- BART ------------------------------------------------------------------------------------


def hf_bart(seed: int = 0) -> BartForConditionalGeneration:
    torch.manual_seed(seed)
    cfg = BartConfig(vocab_size=V, d_model=H, encoder_layers=2, decoder_layers=3, encoder_attention_heads=HEADS,
                     decoder_attention_heads=HEADS, encoder_ffn_dim=I, decoder_ffn_dim=I, max_position_embeddings=40,
                     pad_token_id=0, bos_token_id=2, eos_token_id=3, decoder_start_token_id=3,
                     forced_eos_token_id=None, attn_implementation="eager")
    model = BartForConditionalGeneration(cfg)
    perturb(model, seed)
    return model.eval()


def seq2seq_batch(src_len: int, tgt_len: int, seed: int) -> dict[str, torch.Tensor]:
    ids, mask = padded(3, src_len, {1: src_len - 4, 2: 3}, seed)
    dec, dec_mask = padded(3, tgt_len, {1: tgt_len - 2, 2: 2}, seed + 1)
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": dec_mask}


def hf_gate_bart(hf: BartForConditionalGeneration, enc, dec, cross) -> None:
    for i, layer in enumerate(hf.model.encoder.layers):
        layer.self_attn.test_gate = enc[i]
    for j, layer in enumerate(hf.model.decoder.layers):
        layer.self_attn.test_gate, layer.encoder_attn.test_gate = dec[j], cross[j]


@pytest.mark.parametrize("gated", [False, True])
def test_bart_attentions_and_head_masks_match_hf(monkeypatch, gated: bool) -> None:
    monkeypatch.setattr(modeling_bart, "eager_attention_forward", gated_eager(modeling_bart.eager_attention_forward))
    hf = hf_bart(int(gated))
    cfg, state, _ = import_bart(hf)
    ours = backbone(EncoderDecoder, cfg, state)
    b = seq2seq_batch(11, 8, 3)
    masks = {}
    if gated:
        g = torch.Generator().manual_seed(5)
        masks = {"head_mask": torch.rand(2, HEADS, generator=g), "decoder_head_mask": torch.rand(3, HEADS, generator=g),
                 "cross_attn_head_mask": torch.rand(3, HEADS, generator=g)}
        masks["cross_attn_head_mask"][1, 2] = 0.0
        hf_gate_bart(hf, masks["head_mask"], masks["decoder_head_mask"], masks["cross_attn_head_mask"])
    with torch.no_grad():
        theirs = hf(**b, output_attentions=True, output_hidden_states=True)
        out = ours(**b, output_attentions=True, output_hidden_states=True, **masks)
    assert_attentions(out.extras["encoder_attentions"], theirs.encoder_attentions, "encoder attention",
                      b["attention_mask"].bool())
    tgt = b["decoder_attention_mask"].bool()  # the padded targets' rows are undefined (the decoder runs packed)
    assert_attentions(out.extras["decoder_attentions"], theirs.decoder_attentions, "decoder attention", tgt)
    assert_attentions(out.extras["cross_attentions"], theirs.cross_attentions, "cross-attention", tgt)
    assert out.extras["cross_attentions"][0].shape == (3, HEADS, 8, 11)
    assert len(out.attentions) == ours.num_layers == 5  # encoder then decoder self-attention, like hidden_states
    for i, (a, c) in enumerate(zip(out.extras["decoder_hidden_states"], theirs.decoder_hidden_states)):
        assert_close(a[tgt], c[tgt], **TOL, msg=lambda m: f"decoder hidden state {i}: {m}")


# -- T5 --------------------------------------------------------------------------------------


def hf_t5(seed: int = 0) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=V, d_model=H, d_kv=H // HEADS, d_ff=I, num_layers=2, num_decoder_layers=3,
                   num_heads=HEADS, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                   pad_token_id=0, eos_token_id=3, decoder_start_token_id=0, attn_implementation="eager")
    model = T5ForConditionalGeneration(cfg)
    perturb(model, seed)
    return model.eval()


def hf_gate_t5(hf: T5ForConditionalGeneration, enc, dec, cross) -> None:
    for i, block in enumerate(hf.encoder.block):
        block.layer[0].SelfAttention.test_gate = enc[i]
    for j, block in enumerate(hf.decoder.block):
        block.layer[0].SelfAttention.test_gate, block.layer[1].EncDecAttention.test_gate = dec[j], cross[j]


@pytest.mark.parametrize("gated", [False, True])
def test_t5_attentions_and_head_masks_match_hf(monkeypatch, gated: bool) -> None:
    """Relative position biases ride in the probabilities: the buckets, per head, both halves."""
    monkeypatch.setattr(modeling_t5, "eager_attention_forward", gated_eager(modeling_t5.eager_attention_forward))
    hf = hf_t5(int(gated))
    cfg, state, _ = import_t5(hf)
    ours = backbone(EncoderDecoder, cfg, state)
    b = seq2seq_batch(30, 25, 4)  # past the exact buckets
    masks = {}
    if gated:
        g = torch.Generator().manual_seed(6)
        masks = {"head_mask": (torch.rand(2, HEADS, generator=g) > 0.3).float(),
                 "decoder_head_mask": torch.rand(3, HEADS, generator=g),
                 "cross_attn_head_mask": torch.rand(HEADS, generator=g)}  # [heads]: every layer
        hf_gate_t5(hf, masks["head_mask"], masks["decoder_head_mask"], [masks["cross_attn_head_mask"]] * 3)
    with torch.no_grad():
        theirs = hf(**b, output_attentions=True, output_hidden_states=True)
        out = ours(**b, output_attentions=True, output_hidden_states=True, **masks)
    assert_attentions(out.extras["encoder_attentions"], theirs.encoder_attentions, "encoder attention",
                      b["attention_mask"].bool())
    tgt = b["decoder_attention_mask"].bool()  # the padded targets' rows are undefined (the decoder runs packed)
    assert_attentions(out.extras["decoder_attentions"], theirs.decoder_attentions, "decoder attention", tgt)
    assert_attentions(out.extras["cross_attentions"], theirs.cross_attentions, "cross-attention", tgt)
    assert_close(ours.logits(out.last_hidden_state)[tgt], theirs.logits[tgt], **TOL)


# -- XLNet -----------------------------------------------------------------------------------


@torch.no_grad()
def test_xlnet_content_and_query_attentions_match_hf() -> None:
    tok = special_ids(V)
    config = {"model": {"encoder": "xlnet", "vocab_size": V, "hidden_size": H, "num_layers": 2, "num_heads": HEADS,
                        "intermediate_size": I, "mem_len": 8}, "objective": {"name": "plm"}}
    torch.manual_seed(0)
    pm = build_model(config, tok)
    perturb(pm, 1)
    pre = Pretrained(config, None, pm.backbone, pm.objective, None, pm.eval())
    hf = build_hf_xlnet(pre)
    ids, mask = padded(3, 12, {1: 9, 2: 5}, 0)
    types = torch.zeros(3, 12, dtype=torch.long)
    types[:, 6:] = 1
    # the content stream alone, with padding and segments
    theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types * mask, output_attentions=True)
    out = pre.backbone(ids, mask, token_type_ids=types * mask, output_attentions=True)
    assert_attentions(out.attentions, theirs.attentions, "content attention")
    # two streams over a factorisation order: HF gives (content, query) per layer
    pos = torch.tensor([[2, 3, 6], [0, 7, 8], [1, 2, 4]])
    targets = torch.zeros(3, 12, dtype=torch.bool).scatter_(1, pos, True)
    _, sees = factorisation_masks(targets.numpy(), np.random.default_rng(0))
    sees = torch.from_numpy(sees)
    mapping = torch.nn.functional.one_hot(pos, 12).float()
    theirs = hf(input_ids=ids, attention_mask=mask, perm_mask=(~sees).float(), target_mapping=mapping,
                output_attentions=True, use_mems=True)
    out = pre.backbone(ids, mask, sees=sees, target_positions=pos, output_attentions=True, output_hidden_states=True)
    assert_attentions(out.attentions, [t[0] for t in theirs.attentions], "content stream")
    # HF runs the query stream at every position (a zero query where nothing is predicted); ptmkit
    # at the targets only: HF's rows at target_positions
    rows = pos[:, None, :, None].expand(-1, HEADS, -1, 12)
    assert_attentions(out.extras["query_attentions"], [t[1].gather(2, rows) for t in theirs.attentions], "query stream")
    assert out.extras["query_attentions"][0].shape == (3, HEADS, 3, 12)
    # with memory: keys are the 8 remembered positions then the segment
    mems = pre.backbone.update_mems(None, out.hidden_states)
    ids2, _ = padded(3, 12, {}, 2)
    theirs2 = hf(input_ids=ids2, mems=theirs.mems, output_attentions=True, use_mems=True)
    out2 = pre.backbone(ids2, mems=mems, output_attentions=True)
    assert out2.attentions[0].shape == (3, HEADS, 12, 20)
    assert_attentions(out2.attentions, theirs2.attentions, "content stream over memory")
