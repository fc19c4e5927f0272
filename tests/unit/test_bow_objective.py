"""CLIP's bag-of-words baseline (vl_objective bow): the pooled image vector predicts the caption's
distinct non-special words, each weighted 1/k; its loss, top1, score() and learning a toy set."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from vision_toys import PatchConfig, PatchEncoder, caption_tokenizer

from ptmkit import registry
from ptmkit.vision.objectives.bow import BagOfWords, BowConfig, bag_of_words, special_ids

CAPTIONS = ["a red cat sleeps", "a blue dog runs fast", "the green bird sings", "one yellow fish swims",
            "a small red dog sleeps", "the big blue cat runs", "two green fish sing", "a yellow bird flies high"]




@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return caption_tokenizer(tmp_path_factory.mktemp("captions"), CAPTIONS)


def build(tok, seed=0, **cfg):
    torch.manual_seed(seed)
    image = PatchEncoder(PatchConfig())
    return image, BagOfWords(BowConfig(**cfg), image, None, tok)


def encode(tok, captions):
    enc = tok(captions, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def pixels(n, seed=1):
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def words(tok, caption):
    """The caption's distinct non-special ids, by hand."""
    special = {tok.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    return sorted(set(tok.encode(caption, add_special_tokens=True)) - special)


# repeats, an unknown character ([UNK]) and a caption with no words at all
TRICKY = ["a red red cat", "the dog \u2603 runs", "", "a blue bird sings high"]


def test_registered_and_needs_no_text_encoder(tok):
    assert registry.get("vl_objective", "bow") is BagOfWords
    assert BagOfWords.text_encoder is False
    assert len(special_ids(tok)) == 5
    assert tok.token_to_id("[UNK]") in tok.encode(TRICKY[1])


def test_bag_of_words_keeps_each_distinct_word_once(tok):
    ids, mask = encode(tok, TRICKY)
    _, bow = build(tok)
    sorted_ids, weights = bag_of_words(ids, mask, bow.special)
    for b, caption in enumerate(TRICKY):
        kept = sorted_ids[b][weights[b] > 0].tolist()
        assert kept == words(tok, caption)
        if kept:
            assert torch.allclose(weights[b][weights[b] > 0], torch.full((len(kept),), 1 / len(kept)))
    assert weights[2].sum() == 0


def test_loss_and_top1_match_a_float64_reference(tok):
    image, bow = build(tok, hidden_size=16)
    ids, mask = encode(tok, TRICKY)
    px = pixels(4)
    out = bow(image, None, {"pixels": px, "input_ids": ids, "attention_mask": mask})
    with torch.no_grad():
        h = copy.deepcopy(bow.hidden).double()(image(px).pooled.double())
        logits = h @ bow.head.weight.double().T + bow.head.bias.double()
    logp = torch.log_softmax(logits, 1)
    losses, hits = [], []
    for b, caption in enumerate(TRICKY):
        bag = words(tok, caption)
        if not bag:
            continue
        losses.append(-sum(logp[b, w] for w in bag) / len(bag))  # soft cross-entropy, 1/k each
        hits.append(float(int(logits[b].argmax()) in bag))
    ref = torch.stack(losses).mean()
    assert out.n_predictions == 3
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert out.metrics["bow_loss"].item() == pytest.approx(ref.item(), rel=1e-5)
    assert out.metrics["top1"].item() == pytest.approx(sum(hits) / len(hits))
    out.loss.backward()
    assert image.proj.weight.grad.abs().sum() > 0 and bow.head.weight.grad.abs().sum() > 0


def test_score_is_the_mean_log_probability_of_the_captions_words(tok):
    image, bow = build(tok)
    captions = TRICKY + CAPTIONS[:3]
    ids, mask = encode(tok, captions)
    px = pixels(5)
    scores = bow.score(image, None, px, ids, mask)
    assert scores.shape == (5, len(captions))
    with torch.no_grad():
        logp = torch.log_softmax(bow.head(image(px).pooled), 1)
    for i in range(5):
        for j, caption in enumerate(captions):
            bag = words(tok, caption)
            expected = logp[i, bag].mean().item() if bag else 0.0
            assert scores[i, j].item() == pytest.approx(expected, abs=1e-5)
    padded = torch.cat([ids, torch.zeros(len(captions), 3, dtype=ids.dtype)], 1)
    padded_mask = torch.cat([mask, torch.zeros(len(captions), 3, dtype=mask.dtype)], 1)
    bow.cfg = replace(bow.cfg, score_batch=2)
    assert torch.allclose(bow.score(image, None, px, padded, padded_mask), scores, atol=1e-6)


@pytest.mark.parametrize("hidden", [0, 32])
def test_learns_a_toy_set_and_ranks_each_images_caption_first(tok, hidden):
    image, bow = build(tok, seed=3, hidden_size=hidden)
    ids, mask = encode(tok, CAPTIONS)
    px = pixels(8, seed=5)
    batch = {"pixels": px, "input_ids": ids, "attention_mask": mask}
    opt = torch.optim.Adam([*image.parameters(), *bow.parameters()], lr=1e-2)
    losses = []
    for _ in range(60):
        out = bow(image, None, batch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert losses[-1] < 0.5 * losses[0]
    scores = bow.score(image, None, px, ids, mask)
    assert (scores.argmax(1) == torch.arange(8)).sum() >= 6
