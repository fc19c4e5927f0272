"""CLIP's caption-LM baseline (vl_objective caption_lm): an image-prefixed language model on a text
Transformer; its loss, its attention pattern, score() and learning a toy set."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from vision_toys import PatchConfig, PatchEncoder, caption_tokenizer, tiny_text

from ptmkit import registry
from ptmkit.errors import PtmError
from ptmkit.vision.objectives.caption_lm import CaptionLM, CaptionLMConfig, prefix_lm_mask
from ptmkit.vision.objectives.pair_scores import score_pairs

CAPTIONS = ["a red cat sleeps", "a blue dog runs fast", "the green bird sings", "one yellow fish swims",
            "a small red dog sleeps", "the big blue cat runs", "two green fish sing", "a yellow bird flies high"]




@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return caption_tokenizer(tmp_path_factory.mktemp("captions"), CAPTIONS)


def build(tok, seed=0, **cfg):
    torch.manual_seed(seed)
    image = PatchEncoder(PatchConfig())
    text = tiny_text(tok.vocab_size)
    obj = CaptionLM(CaptionLMConfig(**cfg), image, text, tok)
    return image, text, obj


def encode(tok, captions):
    enc = tok(captions, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def pixels(n, seed=1):
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_registered_and_causal(tok):
    assert registry.get("vl_objective", "caption_lm") is CaptionLM
    assert CaptionLM.causal_text and CaptionLM.text_encoder
    with pytest.raises(PtmError, match="text encoder"):
        CaptionLM(CaptionLMConfig(), PatchEncoder(PatchConfig()), None, tok)


def test_prefix_mask():
    allowed = prefix_lm_mask(2, torch.tensor([[1, 1, 1, 0]]))[0, 0]
    expected = torch.tensor([[1, 1, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0],
                             [1, 1, 1, 1, 0, 0],
                             [1, 1, 1, 1, 1, 0],
                             [1, 1, 1, 1, 1, 0]], dtype=torch.bool)  # the padding key (last) is hidden
    assert torch.equal(allowed, expected)


def reference_loss(tok, image, text, obj, px, captions):
    """float64, one caption at a time without padding; position t is fed the caption up to t only
    (teacher forcing), under a mask written out here: the prefix sees the prefix, text sees the
    prefix and earlier text."""
    image, text, obj = (copy.deepcopy(m).double() for m in (image, text, obj))
    nll, hits = [], []
    for b, caption in enumerate(captions):
        ids = torch.tensor([tok.encode(caption, add_special_tokens=True)])
        prefix = obj.prefix(image, px[b : b + 1].double())
        N = prefix.shape[1]
        for t in range(ids.shape[1] - 1):
            x = torch.cat([prefix, text.embed(ids[:, : t + 1])], 1)
            L = x.shape[1]
            allowed = torch.tensor([[j < N or (i >= N and j <= i) for j in range(L)] for i in range(L)])
            h = x
            for layer in text.layers:
                h = layer(h, allowed[None, None], False)
            logits = h[0, -1] @ text.input_embeddings().weight.T + obj.bias
            logp = torch.log_softmax(logits, 0)
            nll.append(-logp[ids[0, t + 1]])
            hits.append(float(logits.argmax() == ids[0, t + 1]))
    return torch.stack(nll).mean(), sum(hits) / len(hits), len(nll)


def test_loss_matches_a_float64_teacher_forced_reference(tok):
    image, text, obj = build(tok)
    for m in (image, text, obj):
        m.eval()
    captions = CAPTIONS[:4]
    ids, mask = encode(tok, captions)
    assert (mask == 0).any()  # padded rows are part of the check
    px = pixels(4)
    out = obj(image, text, {"pixels": px, "input_ids": ids, "attention_mask": mask})
    ref, acc, n = reference_loss(tok, image, text, obj, px, captions)
    assert out.n_predictions == n == int(mask.sum()) - 4
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert out.metrics["lm_loss"].item() == pytest.approx(ref.item(), rel=1e-5)
    assert out.metrics["lm_acc"].item() == pytest.approx(acc)
    assert out.metrics["ppl"].item() == pytest.approx(ref.exp().item(), rel=1e-5)
    out.loss.backward()
    assert obj.project.weight.grad.abs().sum() > 0 and image.proj.weight.grad.abs().sum() > 0
    assert text.input_embeddings().weight.grad.abs().sum() > 0 and obj.bias.grad.abs().sum() > 0


def test_later_tokens_do_not_reach_earlier_predictions_and_the_image_does(tok):
    image, text, obj = build(tok)
    obj.eval()
    ids, mask = encode(tok, CAPTIONS[1:2])  # [CLS] a blue dog runs fast [SEP]
    px = pixels(1)

    def states(px, ids):
        return obj.text_states(text, obj.prefix(image, px), ids, mask)

    base = states(px, ids)
    changed = ids.clone()
    changed[0, 3] = tok.token_to_id("cat")
    after = states(px, changed)
    assert torch.allclose(after[:, :3], base[:, :3], atol=1e-6)  # predictions of tokens 1 .. 3
    assert not torch.allclose(after[:, 3:], base[:, 3:], atol=1e-4)
    other = states(pixels(1, seed=7), ids)
    assert (other - base).abs().amax(-1).min() > 1e-4  # every position sees the image


def test_score_is_the_mean_log_probability_of_each_pair(tok):
    image, text, obj = build(tok)
    for m in (image, text, obj):
        m.eval()
    captions = CAPTIONS[:5]
    ids, mask = encode(tok, captions)
    px = pixels(3)
    image.seen = 0
    scores = obj.score(image, text, px, ids, mask)
    assert scores.shape == (3, 5) and image.seen == 3  # the image encoder ran once per image
    for i in range(3):
        for j, caption in enumerate(captions):
            one = torch.tensor([tok.encode(caption, add_special_tokens=True)])
            with torch.no_grad():
                loss = obj(image, text, {"pixels": px[i : i + 1], "input_ids": one,
                                         "attention_mask": torch.ones_like(one)}).loss
            assert scores[i, j].item() == pytest.approx(-loss.item(), abs=1e-5)
    padded = torch.cat([ids, torch.zeros(5, 4, dtype=ids.dtype)], 1)
    padded_mask = torch.cat([mask, torch.zeros(5, 4, dtype=mask.dtype)], 1)
    for chunk in (1, 4, 256):
        obj.cfg = replace(obj.cfg, score_batch=chunk)
        assert torch.allclose(obj.score(image, text, px, padded, padded_mask), scores, atol=1e-5)


def test_score_pairs_walks_every_pair_in_chunks():
    calls = []

    def fn(i, j):
        calls.append(len(i))
        return (10 * i + j).float()

    out = score_pairs(fn, 3, 4, 5)
    assert torch.equal(out, (10 * torch.arange(3)[:, None] + torch.arange(4)).float())
    assert calls == [5, 5, 2]
    assert score_pairs(fn, 0, 4, 5).shape == (0, 4)
    with pytest.raises(PtmError):
        score_pairs(fn, 2, 2, 0)


def test_learns_a_toy_set_and_ranks_each_images_caption_first(tok):
    image, text, obj = build(tok, seed=3)
    ids, mask = encode(tok, CAPTIONS)
    px = pixels(8, seed=5)
    batch = {"pixels": px, "input_ids": ids, "attention_mask": mask}
    params = [*image.parameters(), *text.parameters(), *obj.parameters()]
    opt = torch.optim.Adam(params, lr=3e-3)
    losses = []
    for _ in range(60):
        out = obj(image, text, batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert losses[-1] < 0.3 * losses[0]
    for m in (image, text, obj):
        m.eval()
    scores = obj.score(image, text, px, ids, mask)
    assert (scores.argmax(1) == torch.arange(8)).sum() >= 6
