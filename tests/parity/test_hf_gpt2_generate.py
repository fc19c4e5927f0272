"""Greedy generation of ptmkit's GPT-2 equals HF ``GPT2LMHeadModel.generate`` on the exported model."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from conftest import special_ids
from transformers import GenerationConfig as HFGenerationConfig  # noqa: E402
from transformers import GPT2LMHeadModel  # noqa: E402

from ptmkit.encoders import TransformerConfig, TransformerEncoder  # noqa: E402
from ptmkit.generation import CausalLMStepper, GenerationConfig, decode, left_pad  # noqa: E402
from ptmkit.interop.hf_gpt2 import export_gpt2  # noqa: E402
from ptmkit.objectives.base import PretrainModel  # noqa: E402
from ptmkit.objectives.clm import CausalLM, CLMConfig  # noqa: E402
from ptmkit.pretrained import Pretrained  # noqa: E402

V, PAD = 100, 0
GPT2_CFG = TransformerConfig(
    vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=128, max_position=64,
    type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
    embedding_norm=False, pooler=False, scaled_residual_init=True,
)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19, 20]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.manual_seed(11)
    encoder = TransformerEncoder(GPT2_CFG)
    tok = special_ids(V)
    model = PretrainModel(encoder, CausalLM(CLMConfig(), encoder, tok)).eval()
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():  # larger weights than at initialisation: the arg-max changes from step to step
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    pre = Pretrained({"model": {}, "objective": {"name": "clm"}}, None, model.backbone, model.objective, None, model)
    out = tmp_path_factory.mktemp("hf") / "gpt2"
    export_gpt2(pre, out)
    hf = GPT2LMHeadModel.from_pretrained(out, attn_implementation="sdpa").eval()
    return model.backbone, hf


def ours(backbone, prompts, n, eos=None, use_cache=True) -> torch.Tensor:
    ids, mask = left_pad(prompts, PAD)
    cfg = GenerationConfig(max_new_tokens=n, greedy=True, use_cache=use_cache)
    return decode(CausalLMStepper(backbone, ids, mask, use_cache), cfg, eos_id=eos, pad_id=PAD)


def theirs(hf, prompts, n, eos=None) -> torch.Tensor:
    ids, mask = left_pad(prompts, PAD)
    gen = HFGenerationConfig(do_sample=False, num_beams=1, max_new_tokens=n, eos_token_id=eos, pad_token_id=PAD)
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    return out[:, ids.shape[1]:]


def test_greedy_single_prompt_equals_hf_generate(models) -> None:
    backbone, hf = models
    for prompt in PROMPTS:
        mine = ours(backbone, [prompt], 20)
        assert len(set(mine[0].tolist())) > 3  # the text is not one repeated token
        assert torch.equal(mine, theirs(hf, [prompt], 20))
        assert torch.equal(mine, ours(backbone, [prompt], 20, use_cache=False))


def test_greedy_left_padded_batch_with_eos_equals_hf_generate(models) -> None:
    backbone, hf = models
    free = ours(backbone, PROMPTS, 16)
    assert torch.equal(free, theirs(hf, PROMPTS, 16))
    others = set(free[0].tolist()) | set(free[2].tolist())
    eos = next(t for t in free[1].tolist() if t not in others)  # row 1 stops, the others run to the end
    mine = ours(backbone, PROMPTS, 16, eos=eos)
    assert mine.shape == (3, 16) and int((mine[1] == PAD).sum()) > 0
    assert torch.equal(mine, theirs(hf, PROMPTS, 16, eos=eos))
    assert torch.equal(mine, ours(backbone, PROMPTS, 16, eos=eos, use_cache=False))
    row = mine[1].tolist()
    assert eos in row and all(t == PAD for t in row[row.index(eos) + 1:])


@pytest.mark.parametrize("k,p", [(5, 1.0), (0, 0.7), (10, 0.9), (1, 0.5)])
def test_top_k_top_p_keep_the_tokens_hf_warpers_keep(k: int, p: float) -> None:
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from ptmkit.generation import filter_top_k, filter_top_p

    logits = torch.randn(8, 30, generator=torch.Generator().manual_seed(k + int(10 * p)), dtype=torch.float64)
    ours_kept = torch.isfinite(filter_top_p(filter_top_k(logits, k), p))
    theirs = logits
    if k:
        theirs = TopKLogitsWarper(k)(None, theirs)
    if p < 1:
        theirs = TopPLogitsWarper(p)(None, theirs)
    assert torch.equal(ours_kept, torch.isfinite(theirs))
