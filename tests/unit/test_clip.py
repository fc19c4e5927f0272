"""CLIP: the symmetric InfoNCE loss against float64, the temperature, and a tiny model that learns to
retrieve coloured shapes by name in seconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.errors import PtmError
from ptmkit.nn.info_nce import symmetric_info_nce
from ptmkit.tokenization import Tokenizer
from ptmkit.vision.augment import AugmentConfig, to_pixels
from ptmkit.vision.batches import ImageTextBatches, tokenize
from ptmkit.vision.build import build_vl_model, resolve_vl_config
from ptmkit.vision.data import ImageTextSet
from ptmkit.vision.retrieval import chance_recall, recall_at_k
from ptmkit.vision.synthetic import shapes


def reference(a: torch.Tensor, b: torch.Tensor, tau: float) -> float:
    """Radford et al.'s pseudo-code in float64: l2-normalise, scaled cosine logits, two CEs averaged."""
    a, b = a.double(), b.double()
    a, b = a / a.norm(dim=1, keepdim=True), b / b.norm(dim=1, keepdim=True)
    logits = a @ b.T / tau
    n = len(a)
    loss_i = -torch.log_softmax(logits, dim=1)[torch.arange(n), torch.arange(n)].mean()
    loss_t = -torch.log_softmax(logits, dim=0)[torch.arange(n), torch.arange(n)].mean()
    return float((loss_i + loss_t) / 2)


def test_symmetric_info_nce_matches_float64_and_is_symmetric() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 5, generator=g), torch.randn(7, 5, generator=g)
    for tau in (0.07, 1.0):
        got = symmetric_info_nce(a, b, tau)
        assert got.item() == pytest.approx(reference(a, b, tau), rel=1e-5)
        assert symmetric_info_nce(b, a, tau).item() == pytest.approx(got.item(), rel=1e-6)
    tau = torch.tensor(0.1, requires_grad=True)
    symmetric_info_nce(a, b, tau).backward()
    assert tau.grad is not None and tau.grad.abs() > 0
    with pytest.raises(ValueError):
        symmetric_info_nce(a, b[:3], 0.1)


def shape_set(n: int = 480, size: int = 16, seed: int = 0) -> tuple[ImageTextSet, list[str]]:
    """Coloured shapes, 24 concepts; the last sixth of the images are the test split (same concepts)."""
    images, captions, _ = shapes(n, size, seed)
    names = sorted(set(captions))
    concept = np.array([names.index(c) for c in captions])
    split = np.where(np.arange(n) < n * 5 // 6, "train", "test")
    data = ImageTextSet(images, concept, split, np.full(n, "drawn"), names, [[] for _ in names], templates=False)
    return data, names


@pytest.fixture(scope="module")
def shape_tokenizer(tmp_path_factory) -> Tokenizer:
    _, names = shape_set()
    path = tmp_path_factory.mktemp("tok") / "names.txt"
    path.write_text("\n".join(names) + "\n")
    return Tokenizer.train([path], "wordpiece", 60, min_frequency=1)


def tiny_config(tokenizer: Tokenizer, **objective) -> dict:
    raw = {"vision": {"encoder": "vit", "image_size": 16, "patch_size": 4, "hidden_size": 32, "num_layers": 2,
                      "num_heads": 2, "intermediate_size": 64},
           "model": {"encoder": "transformer", "hidden_size": 32, "num_layers": 1, "num_heads": 2,
                     "intermediate_size": 64, "max_position": 16},
           "objective": {"name": "clip", "embed_dim": 32, **objective}, "train": {"batch_size": 16}}
    return resolve_vl_config(raw, tokenizer)


def test_clip_loss_is_symmetric_info_nce_of_its_embeddings(shape_tokenizer) -> None:
    data, _ = shape_set(64)
    torch.manual_seed(0)
    model = build_vl_model(tiny_config(shape_tokenizer), shape_tokenizer).eval()
    batch = ImageTextBatches(data, shape_tokenizer, 16, 0, AugmentConfig(), 16)(0, 0)
    out = model(batch)
    obj = model.objective
    img = obj.image_embeddings(model.image, batch["pixels"])
    txt = obj.text_embeddings(model.text, batch["input_ids"], batch["attention_mask"])
    assert out.loss.item() == pytest.approx(reference(img.detach(), txt.detach(), 0.07), rel=1e-4)
    assert out.metrics["temperature"].item() == pytest.approx(0.07, rel=1e-5)
    out.loss.backward()
    assert obj.log_scale.grad is not None and model.image.patch_embed.weight.grad is not None


def test_fixed_temperature_is_not_a_parameter(shape_tokenizer) -> None:
    model = build_vl_model(tiny_config(shape_tokenizer, learnable_temperature=False), shape_tokenizer)
    assert "objective.log_scale" not in dict(model.named_parameters())
    assert "objective.log_scale" in model.state_dict()  # saved with the weights all the same


def test_a_text_objective_beside_an_image_encoder_is_refused(shape_tokenizer) -> None:
    raw = {"vision": {"encoder": "vit", "image_size": 16, "patch_size": 4}, "objective": {"name": "mlm"},
           "model": {"encoder": "transformer"}, "train": {}}
    with pytest.raises(PtmError, match="trains text alone.*clip"):
        resolve_vl_config(raw, shape_tokenizer)


def test_batches_hold_distinct_concepts_and_are_a_function_of_the_step(shape_tokenizer) -> None:
    data, _ = shape_set()
    batches = ImageTextBatches(data, shape_tokenizer, 8, 3, AugmentConfig(crop=0.1), 16)
    assert batches.steps_per_epoch == 24 // 8
    b = batches(2, 1)
    assert len(set(b["concept"].tolist())) == 8
    again = batches(2, 1)
    assert all(torch.equal(b[k], again[k]) for k in b)
    assert not torch.equal(batches(2, 0)["pixels"], b["pixels"])
    halves = [ImageTextBatches(data, shape_tokenizer, 8, 3, AugmentConfig(crop=0.1), 16, rank=r, world_size=2)(2, 1)
              for r in (0, 1)]
    assert torch.equal(torch.cat([h["concept"] for h in halves]), b["concept"])


def test_tiny_clip_learns_to_retrieve_shapes_by_name(shape_tokenizer) -> None:
    data, names = shape_set()
    torch.manual_seed(0)
    model = build_vl_model(tiny_config(shape_tokenizer), shape_tokenizer)
    batches = ImageTextBatches(data, shape_tokenizer, 16, 0, AugmentConfig(), 16)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    for step in range(300):
        loss = model(batches(step // batches.steps_per_epoch, step % batches.steps_per_epoch)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    rows = data.rows("test")
    ids, mask = tokenize(shape_tokenizer, names, 16)
    scores = model.score(to_pixels(data.images[rows], AugmentConfig(), None), ids, mask).numpy()
    recall = recall_at_k(scores, data.concept[rows], np.arange(len(names)))
    chance = chance_recall(data.concept[rows], np.arange(len(names)))
    assert recall["R@1"] > 0.3 > 7 * chance["R@1"] and recall["R@5"] > 0.8, (recall, chance)


def test_recall_at_k_and_chance() -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(40, 30))
    queries, items = rng.integers(0, 10, 40), np.arange(30) % 10  # three correct items per query
    got = recall_at_k(scores, queries, items)
    for k in (1, 5, 10):
        top = np.argsort(-scores, axis=1)[:, :k]
        assert got[f"R@{k}"] == pytest.approx(np.mean([(items[t] == q).any() for t, q in zip(top, queries)]))
    draws = np.array([[(items[rng.permutation(30)[:5]] == q).any() for q in queries] for _ in range(400)])
    assert chance_recall(queries, items)["R@5"] == pytest.approx(draws.mean(), abs=0.01)
    assert chance_recall(queries, items)["R@5"] == pytest.approx(1 - (27 * 26 * 25 * 24 * 23) / (30 * 29 * 28 * 27 * 26))


def test_training_batches_read_training_concepts_only(shape_tokenizer) -> None:
    """Split by concept (as the emoji set is): an epoch of batches holds each training concept once and
    no dev or test concept; evaluation batches hold dev concepts only, one image each."""
    images, captions, _ = shapes(120, 16, seed=2)
    concept = np.arange(120) // 3  # 40 concepts of 3 images each
    split = np.array(["train"] * 72 + ["dev"] * 24 + ["test"] * 24)  # concepts 0-23, 24-31, 32-39
    names = [captions[3 * c] for c in range(40)]
    data = ImageTextSet(images, concept, split, np.full(120, "drawn"), names, [[] for _ in names], templates=False)
    batches = ImageTextBatches(data, shape_tokenizer, 8, 0, AugmentConfig(), 16)
    seen = np.concatenate([batches(1, s)["concept"].numpy() for s in range(batches.steps_per_epoch)])
    assert sorted(seen) == list(range(24))
    dev = np.concatenate([b["concept"].numpy() for b in batches.eval_batches()])
    assert sorted(dev) == list(range(24, 32))
