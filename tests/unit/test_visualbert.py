"""VisualBERT (ptmkit.vision.objectives.visualbert) and the shared pieces of
ptmkit.vision.objectives.pairs, on a tiny text Transformer and a fake patch image encoder."""

from __future__ import annotations

import pytest
import torch
from vision_toys import PatchEncoder, caption_tokenizer, tiny_text

from ptmkit import registry
from ptmkit.errors import PtmError
from ptmkit.vision.objectives import pairs
from ptmkit.vision.objectives.pair_scores import score_pairs
from ptmkit.vision.objectives.pairs import choose, sample_negatives
from ptmkit.vision.objectives.visualbert import VisualBERT, VisualBERTConfig

CAPTIONS = ["a red square", "a blue circle", "a green triangle on grass", "a small yellow star",
            "two black dogs", "a white cat asleep", "the big orange sun", "a purple flower in a pot"]




@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return caption_tokenizer(tmp_path_factory.mktemp("vb"), CAPTIONS)


def build(tok, **cfg):
    torch.manual_seed(0)
    image = PatchEncoder()
    text = tiny_text(tok.vocab_size)
    return image, text, VisualBERT(VisualBERTConfig(**cfg), image, text, tok)


def toy_batch(tok):
    g = torch.Generator().manual_seed(1)
    enc = tok(CAPTIONS, return_tensors="pt")
    return {"pixels": torch.randn(8, 3, 16, 16, generator=g), "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"], "concept": torch.arange(8)}


def test_registered_and_config_checked():
    assert registry.get("vl_objective", "visualbert") is VisualBERT
    assert VisualBERT.image_encoders == ("cnn", "vit") and VisualBERT.text_encoder is True
    for bad in ({"negative_prob": 1.0}, {"mlm_prob": 0.0}, {"itm_weight": -1}, {"score_batch": 0}):
        with pytest.raises(PtmError):
            VisualBERTConfig(**bad)


def test_forward_loss_metrics_and_gradients(tok):
    image, text, obj = build(tok)
    torch.manual_seed(3)
    out = obj(image, text, toy_batch(tok))
    assert torch.isfinite(out.loss)
    assert set(out.metrics) == {"mlm_loss", "mlm_acc", "itm_loss", "itm_acc"}
    assert all(torch.isfinite(v) for v in out.metrics.values())
    assert out.metrics["mlm_loss"] > 0 and out.metrics["itm_loss"] > 0
    out.loss.backward()
    for name, module in (("image", image.proj), ("text layer", text.layers[0].attn.qkv),
                         ("word embeddings", text.embeddings.word_embeddings), ("visual", obj.visual.project),
                         ("mlm head", obj.mlm.head.dense), ("itm head", obj.itm)):
        assert module.weight.grad is not None and module.weight.grad.abs().sum() > 0, name
    assert obj.visual.segment.grad.abs().sum() > 0


def test_negative_sampling_rate_and_partners():
    torch.manual_seed(0)
    concept = torch.tensor([0, 0, 1, 1, 2, 3, 4, 5])  # duplicates: a partner must still differ in concept
    negatives = 0
    for _ in range(300):
        partner, matched = sample_negatives(8, 0.5, torch.device("cpu"), concept)
        assert torch.equal(partner[matched], torch.arange(8)[matched])
        assert (concept[partner[~matched]] != concept[~matched]).all()
        negatives += int((~matched).sum())
    assert abs(negatives / 2400 - 0.5) < 0.05
    partner, matched = sample_negatives(1, 0.9, torch.device("cpu"))  # nobody to swap with
    assert matched.all() and partner.tolist() == [0]
    _, matched = sample_negatives(16, 0.0, torch.device("cpu"))
    assert matched.all()


def test_choose_budget():
    torch.manual_seed(0)
    candidate = torch.zeros(3, 20, dtype=torch.bool)
    candidate[0, :20] = True
    candidate[1, 2:5] = True
    chosen = choose(candidate, 0.15)
    assert chosen.sum(1).tolist() == [3, 1, 0] and not (chosen & ~candidate).any()


def test_score_pairs_order_and_chunks():
    def fn(i, j):
        return i.float() * 10 + j.float()

    expected = torch.arange(3)[:, None] * 10.0 + torch.arange(5)[None, :]
    for chunk in (1, 4, 15, 100):
        assert torch.equal(score_pairs(fn, 3, 5, chunk), expected)
    assert score_pairs(fn, 0, 5, 4).shape == (0, 5)


def test_score_matches_single_pairs_and_ignores_padding(tok):
    image, text, obj = build(tok, score_batch=5)
    for m in (image, text, obj):
        m.eval()
    batch = toy_batch(tok)
    pixels, ids, mask = batch["pixels"][:3], batch["input_ids"][:4], batch["attention_mask"][:4]
    with torch.no_grad():
        scores = obj.score(image, text, pixels, ids, mask)
        assert scores.shape == (3, 4)
        for i in range(3):
            for j in range(4):
                single = obj.score(image, text, pixels[i:i + 1], ids[j:j + 1], mask[j:j + 1])
                assert torch.allclose(single[0, 0], scores[i, j], atol=1e-5)
        # more padding changes nothing
        padded_ids = torch.cat([ids, torch.full((4, 6), tok.pad_id)], dim=1)
        padded_mask = torch.cat([mask, torch.zeros(4, 6, dtype=mask.dtype)], dim=1)
        assert torch.allclose(obj.score(image, text, pixels, padded_ids, padded_mask), scores, atol=1e-5)
        # a different image or text changes the score
        assert scores.std() > 0


def fixed_draw_loss(image, text, obj, batch):
    """The mean loss and MLM loss of 4 forward passes with the same masks and negatives every time."""
    torch.manual_seed(123)
    with torch.no_grad():
        outs = [obj(image, text, batch) for _ in range(4)]
    return sum(float(o.loss) for o in outs) / 4, sum(float(o.metrics["mlm_loss"]) for o in outs) / 4


def test_training_lowers_the_loss(tok):
    image, text, obj = build(tok)
    params = list({id(p): p for m in (image, text, obj) for p in m.parameters()}.values())
    opt = torch.optim.Adam(params, lr=1e-3)
    batch = toy_batch(tok)
    before, mlm_before = fixed_draw_loss(image, text, obj, batch)
    torch.manual_seed(5)
    for _ in range(60):
        out = obj(image, text, batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    after, mlm_after = fixed_draw_loss(image, text, obj, batch)
    # 5.29 -> 4.60: the masked words go from uniform over 100 ids (ln 100 = 4.6) to the captions' few
    assert after < before - 0.5 and mlm_after < mlm_before - 0.5, (before, after, mlm_before, mlm_after)


def test_device_path_of_the_mlm_loss_equals_the_host_path(tok, monkeypatch):
    """On a GPU (no host reads) the MLM head runs on every position with the unlabelled ones ignored;
    the loss and accuracy are those of the CPU path, which gathers the labelled positions first."""
    image, text, obj = build(tok)
    batch = toy_batch(tok)
    torch.manual_seed(7)
    host = obj(image, text, batch)
    monkeypatch.setattr(pairs, "host_reads_cheap", lambda t: False)
    torch.manual_seed(7)
    device = obj(image, text, batch)
    for key in ("mlm_loss", "mlm_acc", "itm_loss"):
        assert torch.allclose(host.metrics[key], device.metrics[key], atol=1e-5), key


def test_a_batch_without_matched_rows_has_a_finite_loss(tok):
    image, text, obj = build(tok, negative_prob=0.999)
    torch.manual_seed(0)
    out = obj(image, text, toy_batch(tok))
    assert out.metrics["itm_acc"] >= 0 and torch.isfinite(out.loss)
    assert float(out.metrics["mlm_loss"]) == 0.0  # every caption was swapped: no word to predict
    out.loss.backward()
