"""`ptm pretrain --data FILE.jsonl --field NAME`: structured text files read where their text is."""

from __future__ import annotations

import json

from conftest import run_cli


def test_pretrain_reads_the_named_field_and_column(tmp_path, capsys):
    with open(tmp_path / "c.jsonl", "w", encoding="utf-8") as f:
        for i in range(120):
            f.write(json.dumps({"content": f"the cat number {i % 7} sat on the mat", "id": i}) + "\n")
    (tmp_path / "c.csv").write_text("body,id\n" + "".join(f"a dog ran {i % 5} times home,{i}\n" for i in range(120)))
    common = ["train.max_steps=1", "train.batch_size=4", "train.seq_len=32", "tokenizer.vocab_size=120", "-q"]
    code, err = run_cli(["pretrain", "bert-tiny", "--data", tmp_path / "c.jsonl", "-o", tmp_path / "r0", *common], capsys)
    assert code == 2 and "no field 'text'" in err and "--field NAME" in err
    code, _ = run_cli(["pretrain", "bert-tiny", "--data", tmp_path / "c.jsonl", "--field", "content", "-o", tmp_path / "r1",
                       *common], capsys)
    assert code == 0
    vocab = json.loads((tmp_path / "r1" / "data" / "tokenizer.json").read_text())["model"]["vocab"]
    assert "cat" in vocab and "content" not in vocab  # the field's text, not the JSON around it
    code, _ = run_cli(["pretrain", "bert-tiny", "--data", tmp_path / "c.csv", "--column", "body", "-o", tmp_path / "r2",
                       *common], capsys)
    assert code == 0
