"""``ptm compare``: contenders and budgets as typed, FLOPs counted as executed, equal budgets,
the table / JSON / plot, and a resumed comparison that trains nothing again."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ptmkit.data.corpus import Corpus
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.errors import PtmError
from ptmkit.flops import counter
from ptmkit.train.checkpoint import latest_checkpoint
from ptmkit.workflows.compare import (
    Budget,
    Contender,
    compare,
    parse_budget,
    parse_contender,
    probe,
    run_overrides,
    shared_corpus,
)
from ptmkit.workflows.evaluate import Protocol
from ptmkit.workflows.pretrain import pretrain

TINY = ["model.hidden_size=16", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=32",
        "model.max_position=32", "tokenizer.vocab_size=120", "train.seq_len=16", "train.batch_size=4",
        "train.log_every=1", "train.eval_batches=2", "train.eval_fraction=0.1"]


def test_contender_specs():
    assert parse_contender("bert-tiny") == Contender("bert-tiny", "bert-tiny")
    assert parse_contender("mlm=bert-tiny:objective.nsp=false,train.betas=[0.9,0.98]") == Contender(
        "mlm", "bert-tiny", ("objective.nsp=false", "train.betas=[0.9,0.98]"))
    assert parse_contender("bert-tiny:objective.nsp=false").label == "bert-tiny"
    for bad in ("=bert-tiny", "a/b=bert-tiny", "x=bert-tiny:nsp"):
        with pytest.raises(PtmError):
            parse_contender(bad)


def test_budgets():
    assert parse_budget("3e13") == Budget(flops=3e13)
    assert parse_budget("30T") == Budget(flops=30e12) == parse_budget("30TFLOPs")
    assert parse_budget("2.5G") == Budget(flops=2.5e9)
    assert parse_budget("15min") == Budget(minutes=15.0)
    for bad in ("", "0", "ten", "15m", "-3T", "3X"):
        with pytest.raises(PtmError, match="budget"):
            parse_budget(bad)


@pytest.mark.parametrize("steps,points,expected", [(825, 2, [413, 825]), (752, 2, [376, 752]), (10, 3, [4, 8, 10]),
                                                    (7, 1, [7])])
def test_points_spread_over_the_budget(steps, points, expected):
    """The checkpoints compare fine-tunes: ``points`` of them, the last at the end of the budget."""
    cost = {"flops_per_step": 1e9, "warmup_steps": 0}
    overrides, n = run_overrides(Contender("m", "bert-tiny"), [], cost, Budget(flops=steps * 1e9), points)
    values = dict(o.split("=", 1) for o in overrides)
    every = int(values["train.save_every"])
    saved = [s for s in range(every, n + 1, every)] + ([] if n % every == 0 else [n])
    assert n == steps and saved[-points:] == expected and len(saved) == points


def test_fused_cpu_attention_counts_as_its_matrix_products():
    q, k, v = (torch.randn(2, 3, 10, 8) for _ in range(3))
    with counter() as fused:
        F.scaled_dot_product_attention(q, k, v)
    with counter() as explicit:
        torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
    assert fused.get_total_flops() == explicit.get_total_flops() == 2 * 2 * (2 * 3 * 10 * 10 * 8)


def test_lstm_counts_its_gate_products():
    lstm = torch.nn.LSTM(6, 5)
    x = torch.randn(7, 3, 6)
    with counter() as fc:
        out, _ = lstm(x)
    forward = 2 * 7 * 3 * 4 * 5 * (6 + 5)
    assert fc.get_total_flops() == forward
    with counter() as fc:
        lstm(x)[0].sum().backward()
    assert fc.get_total_flops() == 3 * forward


@pytest.fixture()
def corpus_dir(tmp_path):
    rng = np.random.default_rng(0)
    words = "the a film plot good bad actor scene story long short fun dull music".split()
    text = "\n".join(" ".join(rng.choice(words, rng.integers(5, 12))) for _ in range(300)) + "\n"
    (tmp_path / "text.txt").write_text(text)
    return tmp_path


def test_probe_counts_what_each_objective_runs(corpus_dir):
    contenders = [parse_contender(s) for s in ("mlm=bert-tiny:objective.nsp=false", "electra=electra-tiny",
                                               "shared=albert-tiny:model.num_layers=3",
                                               "unshared=albert-tiny:model.num_layers=3,model.sharing=none")]
    corpus = Corpus.open(shared_corpus(contenders, [corpus_dir / "text.txt"], corpus_dir / "out", TINY))
    cost = {c.label: probe(c, corpus, TINY) for c in contenders}
    # ELECTRA pays for its generator on top of an MLM-sized discriminator
    assert cost["electra"]["flops_per_step"] > cost["mlm"]["flops_per_step"]
    # ALBERT's sharing saves parameters, not compute
    assert cost["shared"]["parameters"] < cost["unshared"]["parameters"]
    assert cost["shared"]["flops_per_step"] == pytest.approx(cost["unshared"]["flops_per_step"], rel=0.05)
    # the order of magnitude of the usual estimate: 6 x non-embedding parameters x tokens
    tokens = 4 * 16
    assert 0.3 < cost["mlm"]["flops_per_step"] / (6 * cost["mlm"]["non_embedding_parameters"] * tokens) < 3


def toy_task() -> TaskData:
    """A two-label task the tiny models learn in one epoch: "good fun film plot" / "bad dull ..."."""
    rng = np.random.default_rng(1)

    def split(n):
        y = rng.integers(0, 2, n)
        return TaskSplit([("good fun " if v else "bad dull ") + "film plot" for v in y], y)

    return TaskData("toy", [0, 1], split(24), split(12), split(12))


def test_compare_at_equal_flops_then_one_protocol(corpus_dir, monkeypatch):
    monkeypatch.setattr("ptmkit.workflows.compare.load_task", lambda name: toy_task())
    contenders = [parse_contender("mlm=bert-tiny:objective.nsp=false"), parse_contender("clm=gpt2-tiny:model.max_position=32")]
    budget = Budget(flops=6e7)
    protocol = Protocol(train_size=16, eval_size=12, seeds=(1, 2), lrs=(1e-3,), epochs=1, modes=("finetune",))
    out = corpus_dir / "cmp"
    result = compare(contenders, [corpus_dir / "text.txt"], out, budget, ("toy",), protocol, common=TINY, points=2,
                     progress=False)
    for r in result["contenders"].values():
        # as many steps as the budget buys, not one more
        assert r["steps_done"] * r["flops_per_step"] <= budget.flops < (r["steps_done"] + 1) * r["flops_per_step"]
        assert len(r["checkpoints"]) == 2 and r["eval_curve"]
    # the same tokenizer for every contender
    tokenizers = {(latest_checkpoint(out / "runs" / c.label) / "tokenizer.json").read_text() for c in contenders}
    assert len(tokenizers) == 1
    models = {(s["model"], s["step"]) for s in result["scores"]}
    assert ("from scratch", 0) in models and len(models) == 5  # baseline + 2 contenders x 2 checkpoints
    assert all(s["n"] == 2 for s in result["scores"])
    table = (out / "table.md").read_text()
    assert "| from scratch |" in table and "| mlm | bert-tiny objective.nsp=false |" in table and "| clm |" in table
    assert (out / "compare.png").stat().st_size > 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["budget"]["flops"] == budget.flops and len(saved["runs"]) == 10

    # resumed (here from the command line): every run is read back, nothing is trained again
    from ptmkit.cli import main

    mtimes = {f: f.stat().st_mtime_ns for f in out.rglob("*.safetensors")}
    argv = ["compare", "mlm=bert-tiny:objective.nsp=false", "clm=gpt2-tiny:model.max_position=32", "--data",
            str(corpus_dir / "text.txt"), "--budget", "60M", "-o", str(out), "--tasks", "toy", "--set", *TINY,
            "--points", "2", "--train-size", "16", "--eval-size", "12", "--seeds", "1", "2", "--lrs", "1e-3",
            "--epochs", "1", "--resume"]
    assert main(argv) == 0
    assert json.loads((out / "results.json").read_text())["runs"] == result["runs"]
    assert {f: f.stat().st_mtime_ns for f in mtimes} == mtimes
    # a second comparison into the same directory must say --resume
    with pytest.raises(PtmError):
        compare(contenders, [corpus_dir / "text.txt"], out, budget, ("toy",), protocol, common=TINY, progress=False)


def test_bad_comparisons_fail_before_training(corpus_dir):
    text = [corpus_dir / "text.txt"]
    with pytest.raises(PtmError, match="labels must differ"):
        compare([Contender("a", "bert-tiny"), Contender("a", "gpt2-tiny")], text, corpus_dir / "o1", Budget(flops=1e9))
    with pytest.raises(PtmError, match="less than one training step"):
        compare([Contender("a", "bert-tiny", ("objective.nsp=false",))], text, corpus_dir / "o2", Budget(flops=10),
                common=TINY, progress=False)
    with pytest.raises(PtmError, match="not found"):
        compare([Contender("a", "bert-tiny")], [corpus_dir / "missing.txt"], corpus_dir / "o3", Budget(flops=1e9))


def test_compare_continuing_one_run(corpus_dir, monkeypatch):
    """``init_from``: every contender continues the same run (its tokenizer and encoder), another
    objective included, and the baseline row is that run fine-tuned as it is."""
    monkeypatch.setattr("ptmkit.workflows.compare.load_task", lambda name: toy_task())
    start = pretrain("bert-tiny", corpus_dir / "text.txt", corpus_dir / "start",
                     [*TINY, "objective.nsp=false", "train.max_steps=2"], verbose=False)
    (corpus_dir / "pairs.tsv").write_text("good\tfun\nbad\tdull\nfilm\tstory\nactor\tscene\n")
    contenders = [parse_contender("mlm=bert-tiny"), parse_contender(f"libert=libert-tiny:objective.pairs={corpus_dir}/pairs.tsv")]
    protocol = Protocol(train_size=16, eval_size=12, seeds=(1,), lrs=(1e-3,), epochs=1, modes=("finetune",))
    out = corpus_dir / "cmp"
    result = compare(contenders, [corpus_dir / "text.txt"], out, Budget(flops=6e7), ("toy",), protocol,
                     common=["train.log_every=1"], progress=False, init_from=start)
    source = (latest_checkpoint(start) / "tokenizer.json").read_text()
    for c in contenders:
        ck = latest_checkpoint(out / "runs" / c.label)
        assert (ck / "tokenizer.json").read_text() == source
        config = json.loads((ck / "config.json").read_text())
        assert config["model"] == json.loads((start / "config.json").read_text())["model"]
    assert result["contenders"]["libert"]["flops_per_step"] > result["contenders"]["mlm"]["flops_per_step"]
    assert {s["model"] for s in result["scores"]} == {"start", "mlm", "libert"}
    assert "| start | start |" in (out / "table.md").read_text()
