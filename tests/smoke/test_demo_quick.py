"""``ptm demo --quick``: every stage on the real data with tiny settings."""

import json

from conftest import cli_output

from ptmkit.cli import main


def test_demo_quick_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    rc, printed = cli_output(["demo", "--quick", "-o", out])  # what a user sees, log lines included
    assert rc == 0, printed[-3000:]
    assert all(len(line) <= 200 for line in printed.splitlines()), max(printed.splitlines(), key=len)
    for heading in ("[1/5] data", "[2/5] pre-train", "[3/5] fine-tune", "[4/5] results"):
        assert heading in printed
    for condition in ("with pre-training (word2vec init + MLM)", "word2vec embeddings only", "without pre-training"):
        assert condition in printed
    result = json.loads((out / "results.json").read_text())
    assert set(result["summary"]) == {"pretrained", "random", "word2vec"}
    assert len(result["runs"]) == 6  # 2 seeds x 3 conditions (with the word2vec-only ablation)
    assert result["sizes"]["test"] > 500  # scored on the full held-out MR test split
    assert result["pretrain"]["steps"] == 30
    # the gain is the per-seed difference of the two conditions' test accuracies
    runs = {(r["init"], r["seed"]): r["test"]["accuracy"] for r in result["runs"]}
    for seed, gain in result["gain"]["per_seed"].items():
        assert abs(gain - (runs[("pretrained", int(seed))] - runs[("random", int(seed))])) < 1e-12
    assert (out / "demo.png").stat().st_size > 10_000
    assert "pre-training" in (out / "summary.md").read_text()
    # the demo never writes into a non-empty directory
    assert main(["demo", "--quick", "-o", str(out)]) == 2
