"""ERNIE (Tsinghua) with the paper's split (``objective.k_from_top``): the encoder's top layers
are the K-encoder's token side.  At step 0 the K-encoder computes exactly the encoder it was
built from; after training, text without entities still gets exactly the encoder's states (what
is exported and fine-tuned); an entity changes the states; the options that cannot work are
refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY, run_cli, write_corpus

from ptmkit.pretrained import load_pretrained
from ptmkit.workflows.pretrain import pretrain

WORDS = ("cat", "dog", "house", "the", "ran", "sat")
SMALL = [a for a in TINY if not a.startswith("train.max_steps")] + ["train.log_every=1"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ernie-top")
    corpus = write_corpus(root / "corpus.txt", docs=20)
    rng = np.random.default_rng(0)
    names = [f"E_{w}" for w in WORDS]
    vec = rng.normal(size=(len(names), 8)).round(4)
    (root / "vectors.txt").write_text(f"{len(names)} 8\n" + "".join(
        n + " " + " ".join(map(str, v)) + "\n" for n, v in zip(names, vec)))
    (root / "alignment.tsv").write_text("".join(f"{w}\tE_{w}\n" for w in WORDS))
    return root, corpus


def settings(root, *extra):
    return [*SMALL, f"objective.entities={root}/vectors.txt", f"objective.alignment={root}/alignment.tsv",
            "objective.entity_heads=2", "model.num_layers=3", *extra]


def batch_of(pre, entity_ids=None):
    enc = pre.tokenizer(["the dog ran to the house", "a cat sat"], padding=True, return_tensors="pt")
    ids = enc["input_ids"]
    if entity_ids is None:
        entity_ids = torch.full_like(ids, -1)
    return {"input_ids": ids, "attention_mask": enc["attention_mask"], "entity_ids": entity_ids}


def test_the_k_encoder_starts_as_the_encoder_and_keeps_it_without_entities(files, tmp_path):
    root, corpus = files
    run = pretrain("ernie-thu-tiny", corpus, tmp_path / "run", settings(root, "objective.k_from_top=2",
                   "train.max_steps=3", "train.lr=1e-2"), verbose=False)
    pre = load_pretrained(run / "checkpoints" / "step-0000003", heads=True)
    objective, backbone = pre.objective, pre.backbone
    assert len(objective.k_encoder) == 2 and not any(k.startswith("k_encoder.0.token") for k, _ in
                                                     objective.named_parameters())
    plain = batch_of(pre)
    with torch.no_grad():
        want = backbone(plain["input_ids"], attention_mask=plain["attention_mask"]).last_hidden_state
        got = objective.encode(backbone, plain)
        real = plain["attention_mask"].bool()
        torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)  # no entity: the encoder itself
        # W_e has trained away from zero, so an aligned entity now changes the states
        assert objective.k_encoder[0].fuse_entity.weight.abs().sum() > 0
        ids = plain["input_ids"]
        entity_ids = torch.full_like(ids, -1)
        entity_ids[0, 2] = 1  # "dog"
        fused = objective.encode(backbone, {**plain, "entity_ids": entity_ids})
        assert not torch.allclose(fused[0, 2], want[0, 2], atol=1e-4)

    # at step 0 (W_e = 0) the K-encoder is the encoder whatever the entities
    from ptmkit.build import build_model
    torch.manual_seed(0)
    fresh = build_model(pre.config, pre.tokenizer).eval()
    with torch.no_grad():
        entity_ids = torch.randint(-1, len(WORDS), plain["input_ids"].shape)
        got = fresh.objective.encode(fresh.backbone, {**plain, "entity_ids": entity_ids})
        want = fresh.backbone(plain["input_ids"], attention_mask=plain["attention_mask"]).last_hidden_state
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


def test_the_top_layers_are_saved_with_the_encoder(files, tmp_path):
    root, corpus = files
    run = pretrain("ernie-thu-tiny", corpus, tmp_path / "run", settings(root, "objective.k_from_top=1",
                   "train.max_steps=2"), verbose=False)
    from safetensors.torch import load_file
    state = load_file(str(run / "checkpoints" / "step-0000002" / "model.safetensors"))
    assert any(k.startswith("objective.k_encoder.0.fuse_entity") for k in state)
    assert not any(k.startswith("objective.k_encoder.0.token_attention") for k in state)
    assert "backbone.layers.2.ffn.fc1.weight" in state  # the K-encoder's token side is the encoder's


def test_options_that_cannot_work_are_refused(files, tmp_path, capsys):
    root, corpus = files
    for extra, fragment in (
        ("objective.k_from_top=3", "leaves no T-encoder below it"),
        ("objective.k_from_top=-1", "objective.k_from_top must be an integer >= 0"),
    ):
        rc, err = run_cli(["pretrain", "ernie-thu-tiny", "--data", corpus, "-o", tmp_path / "o",
                           *settings(root, extra, "train.max_steps=1"), "--quiet"], capsys)
        assert rc == 2 and fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    rc, err = run_cli(["pretrain", "ernie-thu-tiny", "--data", corpus, "-o", tmp_path / "o2",
                       *settings(root, "objective.k_from_top=1", "model.norm=pre", "train.max_steps=1"), "--quiet"],
                      capsys)
    assert rc == 2 and "post-LN" in err, err
