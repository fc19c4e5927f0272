"""``ptm demo --lang zh --quick``: every stage on the real Chinese data with tiny settings."""

import json

import pytest
from conftest import cli_output


def test_demo_zh_quick_end_to_end(tmp_path, capsys):
    pytest.importorskip("jieba")
    out = tmp_path / "demo"
    rc, printed = cli_output(["demo", "--lang", "zh", "--quick", "-o", out])  # what a user sees, log lines included
    assert rc == 0, printed[-3000:]
    assert all(len(line) <= 200 for line in printed.splitlines()), max(printed.splitlines(), key=len)
    for heading in ("[1/6] data", "[2/6] character tokenizer", "[3/6] pre-train", "[4/6] fine-tune", "[5/6] results"):
        assert heading in printed
    assert "with pre-training (whole-word MLM)" in printed and "without pre-training" in printed
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(result["summary"]) == {"pretrained", "random"} and len(result["runs"]) == 4
    assert result["sizes"]["test"] > 1500  # the full held-out zh-reviews test split
    assert result["pretrain"]["steps"] == 30
    # whole words: fewer word starts than characters (jieba joined characters into words)
    assert result["sizes"]["pretrain_words"] < 0.8 * result["sizes"]["pretrain_characters"]
    # never the reviews' dev/test text in the pre-training text
    from pathlib import Path

    assert [Path(f).name for f in result["text_files"]] == [
        "peoples-daily-text-train.txt", "chinese-poetry-text-train.txt", "data-zh-reviews-unlabeled_train.txt"]
    corpus_meta = json.loads((out / "corpus" / "meta.json").read_text())
    assert corpus_meta["tokenizer_kind"] == "char" and corpus_meta["word_segmenter"]["user_dict_sha256"]
    runs = {(r["init"], r["seed"]): r["test"]["accuracy"] for r in result["runs"]}
    for seed, gain in result["gain"]["per_seed"].items():
        assert abs(gain - (runs[("pretrained", int(seed))] - runs[("random", int(seed))])) < 1e-12
    assert (out / "demo.png").stat().st_size > 10_000 and "zh-reviews" in (out / "summary.md").read_text(encoding="utf-8")
