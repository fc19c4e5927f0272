"""ViLBERT (ptmkit.vision.objectives.vilbert) on a tiny text Transformer and a fake patch image encoder."""

from __future__ import annotations

import pytest
import torch
from vision_toys import PatchEncoder, caption_tokenizer, tiny_text

from ptmkit import registry
from ptmkit.errors import PtmError
from ptmkit.vision.objectives.vilbert import ViLBERT, ViLBERTConfig

CAPTIONS = ["a red square", "a blue circle", "a green triangle on grass", "a small yellow star",
            "two black dogs", "a white cat asleep", "the big orange sun", "a purple flower in a pot"]




@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return caption_tokenizer(tmp_path_factory.mktemp("vil"), CAPTIONS)


def build(tok, **cfg):
    torch.manual_seed(0)
    image = PatchEncoder()
    text = tiny_text(tok.vocab_size)
    cfg.setdefault("image_hidden", 16)  # a width of its own, so the co-attention maps between widths
    return image, text, ViLBERT(ViLBERTConfig(**cfg), image, text, tok)


def toy_batch(tok):
    g = torch.Generator().manual_seed(1)
    enc = tok(CAPTIONS, return_tensors="pt")
    return {"pixels": torch.randn(8, 3, 16, 16, generator=g), "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"], "concept": torch.arange(8)}


def evaluating(*modules):
    for m in modules:
        m.eval()


def test_registered_and_config_checked(tok):
    assert registry.get("vl_objective", "vilbert") is ViLBERT
    assert ViLBERT.image_encoders == ("cnn", "vit") and ViLBERT.text_encoder is True
    for bad in ({"co_layers": -1}, {"image_hidden": 0}, {"mrm_prob": 0.0}, {"negative_prob": 1.0},
                {"mrm_weight": -0.5}, {"score_batch": 0}):
        with pytest.raises(PtmError):
            ViLBERTConfig(**bad)
    with pytest.raises(PtmError, match="divisible"):
        build(tok, image_hidden=15, image_heads=2)


def test_forward_loss_metrics_and_gradients(tok):
    image, text, obj = build(tok)
    torch.manual_seed(3)
    out = obj(image, text, toy_batch(tok))
    assert torch.isfinite(out.loss)
    assert set(out.metrics) == {"mlm_loss", "mlm_acc", "mrm_loss", "itm_loss", "itm_acc"}
    assert all(torch.isfinite(v) for v in out.metrics.values())
    assert out.metrics["mrm_loss"] > 0 and out.metrics["mlm_loss"] > 0
    out.loss.backward()
    block = obj.blocks[0]
    for name, module in (("image", image.proj), ("text layer", text.layers[0].attn.qkv),
                         ("word embeddings", text.embeddings.word_embeddings),
                         ("image stream", obj.image_stream.project), ("text co-attention", block.text_cross.q),
                         ("image co-attention", block.image_cross.kv), ("image layer", block.image_layer.attn.qkv),
                         ("mlm head", obj.mlm.head.dense), ("region head", obj.region_head[0]), ("itm head", obj.itm),
                         ("image pool", obj.image_pool), ("text pool", obj.text_pool)):
        assert module.weight.grad is not None and module.weight.grad.abs().sum() > 0, name
    assert obj.image_stream.mask_vector.grad.abs().sum() > 0


def test_co_attention_joins_the_streams(tok):
    batch = toy_batch(tok)
    pixels, ids, mask = batch["pixels"][:2], batch["input_ids"][:2], batch["attention_mask"][:2]
    other_pixels = torch.flip(pixels, dims=[0])
    other_ids, other_mask = batch["input_ids"][2:4], batch["attention_mask"][2:4]
    for co_layers, joined in ((2, True), (0, False)):
        image, text, obj = build(tok, co_layers=co_layers)
        evaluating(image, text, obj)
        with torch.no_grad():
            t, v = obj.streams(image, text, pixels, ids, mask)
            t_other_image, _ = obj.streams(image, text, other_pixels, ids, mask)
            _, v_other_text = obj.streams(image, text, pixels, other_ids, other_mask)
        real = mask.bool()
        text_moved = (t - t_other_image).abs()[real].max()
        image_moved = (v - v_other_text).abs().max()
        assert t.shape == (2, ids.shape[1], 32) and v.shape == (2, 17, 16)
        if joined:
            assert text_moved > 1e-3 and image_moved > 1e-3
        else:
            assert text_moved == 0 and image_moved == 0


def test_score_matches_single_pairs_and_ignores_padding(tok):
    image, text, obj = build(tok, score_batch=5)
    evaluating(image, text, obj)
    batch = toy_batch(tok)
    pixels, ids, mask = batch["pixels"][:3], batch["input_ids"][:4], batch["attention_mask"][:4]
    with torch.no_grad():
        scores = obj.score(image, text, pixels, ids, mask)
        assert scores.shape == (3, 4) and scores.std() > 0
        for i in range(3):
            for j in range(4):
                single = obj.score(image, text, pixels[i:i + 1], ids[j:j + 1], mask[j:j + 1])
                assert torch.allclose(single[0, 0], scores[i, j], atol=1e-5)
        padded_ids = torch.cat([ids, torch.full((4, 6), tok.pad_id)], dim=1)
        padded_mask = torch.cat([mask, torch.zeros(4, 6, dtype=mask.dtype)], dim=1)
        assert torch.allclose(obj.score(image, text, pixels, padded_ids, padded_mask), scores, atol=1e-5)
        # the alignment head reads the co-attended streams: the same as the score of the pairs
        t, v = obj.streams(image, text, pixels[:1].expand(4, -1, -1, -1), ids, mask)
        assert torch.allclose(obj.align(t, v), scores[0], atol=1e-5)


def fixed_draw_loss(image, text, obj, batch):
    """The mean loss and MLM loss of 4 forward passes with the same masks and negatives every time."""
    torch.manual_seed(123)
    with torch.no_grad():
        outs = [obj(image, text, batch) for _ in range(4)]
    return (sum(float(o.loss) for o in outs) / 4, sum(float(o.metrics["mlm_loss"]) for o in outs) / 4,
            sum(float(o.metrics["mrm_loss"]) for o in outs) / 4)


def test_training_lowers_the_loss(tok):
    image, text, obj = build(tok)
    params = list({id(p): p for m in (image, text, obj) for p in m.parameters()}.values())
    opt = torch.optim.Adam(params, lr=1e-3)
    batch = toy_batch(tok)
    before = fixed_draw_loss(image, text, obj, batch)
    torch.manual_seed(5)
    for _ in range(60):
        out = obj(image, text, batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    after = fixed_draw_loss(image, text, obj, batch)
    assert after[0] < before[0] - 0.5, (before, after)
    assert after[1] < before[1] - 0.3 and after[2] < before[2], (before, after)
