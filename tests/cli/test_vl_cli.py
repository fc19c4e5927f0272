"""Vision–language runs through the CLI: ``ptm pretrain clip-tiny`` on a folder of images with
captions, exact resume, ``ptm evaluate --suite vl``, and the bad inputs a user meets first."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from PIL import Image
from safetensors.numpy import load_file

from ptmkit.train.checkpoint import latest_checkpoint
from ptmkit.vision.synthetic import shapes

TINY = ["vision.image_size=16", "vision.patch_size=4", "vision.hidden_size=32", "vision.num_layers=1",
        "vision.num_heads=2", "vision.intermediate_size=64", "model.hidden_size=32", "model.num_layers=1",
        "model.num_heads=2", "model.intermediate_size=64", "model.max_position=16", "objective.embed_dim=16",
        "tokenizer.vocab_size=60", "data.max_len=16", "train.batch_size=8", "train.seq_len=16",
        "train.warmup_steps=2", "train.save_every=3", "train.eval_every=3", "train.log_every=1", "train.eval_batches=2"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """96 drawn shapes as PNG files (RGBA, transparent background), 24 concepts split 16 / 4 / 4."""
    root = tmp_path_factory.mktemp("shapes")
    images, captions, concepts = shapes(96, 16, seed=1)
    part = {c: "train" if c < 16 else "dev" if c < 20 else "test" for c in range(24)}
    with open(root / "captions.jsonl", "w") as f:
        for i, (im, cap, c) in enumerate(zip(images, captions, concepts)):
            alpha = np.where((im == 255).all(axis=-1), 0, 255).astype(np.uint8)
            Image.fromarray(np.dstack([im, alpha]), "RGBA").save(root / f"{i}.png")
            f.write(json.dumps({"image": f"{i}.png", "caption": cap, "concept": cap, "split": part[int(c)]}) + "\n")
    return root


def weights(run: Path) -> dict[str, np.ndarray]:
    return load_file(str(latest_checkpoint(run) / "model.safetensors"))


def test_pretrain_resume_and_evaluate(folder: Path, tmp_path: Path, capsys) -> None:
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert run_cli(["pretrain", "clip-tiny", "--data", folder, "-o", whole, *TINY, "train.max_steps=6"], capsys)[0] == 0
    assert run_cli(["pretrain", "clip-tiny", "--data", folder, "-o", part, *TINY, "train.max_steps=3"], capsys)[0] == 0
    assert run_cli(["pretrain", "--resume", "-o", part, "--data", folder, "train.max_steps=6"], capsys)[0] == 0
    a, b = weights(whole), weights(part)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)  # resumed exactly
    evals = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    assert evals and all("ppl" not in r for r in evals)  # a contrastive loss is no perplexity
    card = (whole / "README.md").read_text()
    assert "| image encoder | `vit` (16 px" in card and "| objective | `clip` |" in card
    compute = json.loads((whole / "compute.json").read_text())
    assert compute["steps"] == 6 and compute["flops"] == pytest.approx(6 * compute["flops_per_step"])
    rc, err = run_cli(["evaluate", whole, "--suite", "vl", "--images", folder, "-o", tmp_path / "eval"], capsys)
    assert rc == 0, err
    result = json.loads((tmp_path / "eval" / "vl.json").read_text())["whole"]
    (cond,) = result["retrieval"]
    assert cond["texts"] == 4 and cond["chance_i2t"]["R@1"] == pytest.approx(0.25)
    assert (tmp_path / "eval" / "vl.png").is_file()


def test_resume_refuses_another_objective_setting(folder: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert run_cli(["pretrain", "clip-tiny", "--data", folder, "-o", run, *TINY, "train.max_steps=3"], capsys)[0] == 0
    rc, err = run_cli(["pretrain", "--resume", "-o", run, "--data", folder, "objective.embed_dim=8"], capsys)
    assert rc == 2 and "objective.embed_dim" in err and "resume" in err


def test_bad_images_are_named(folder: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.png").write_bytes(b"not a picture")
    Image.new("RGB", (16, 12), "white").save(bad / "b.png")
    for name, message in (("a.png", "a.png is not a readable image"), ("b.png", "b.png is 16 x 12")):
        (bad / "captions.jsonl").write_text(json.dumps({"image": name, "caption": "x"}) + "\n")
        rc, err = run_cli(["pretrain", "clip-tiny", "--data", bad, "-o", tmp_path / f"out-{name}", *TINY], capsys)
        assert rc == 2 and message in err, err


def test_missing_locale_and_text_data_are_refused(tmp_path: Path, capsys) -> None:
    emoji = tmp_path / "emoji"
    (emoji / "captions").mkdir(parents=True)
    (emoji / "concepts.jsonl").write_text(json.dumps({"id": 0, "code": "1f600", "split": "train"}) + "\n")
    np.save(emoji / "images-google.npy", np.full((1, 16, 16, 3), 255, np.uint8))
    (emoji / "captions" / "en.json").write_text(json.dumps({"1f600": {"tts": "grinning face", "keywords": []}}))
    rc, err = run_cli(["pretrain", "clip-tiny", "--data", emoji, "-o", tmp_path / "o1", *TINY, "data.locale=es"], capsys)
    assert rc == 2 and "no captions in locale 'es'" in err
    text = tmp_path / "corpus.txt"
    text.write_text("a sentence\n")
    rc, err = run_cli(["pretrain", "clip-tiny", "--data", text, "-o", tmp_path / "o2", *TINY], capsys)
    assert rc == 2 and "not image–text data" in err
    rc, err = run_cli(["pretrain", "clip-tiny", "--data", emoji, "-o", tmp_path / "o3", *TINY, "objective.name=mlm"], capsys)
    assert rc == 2 and "trains text alone" in err
