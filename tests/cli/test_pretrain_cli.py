"""``ptm pretrain`` end to end on a tiny corpus: outputs, refusals, resume, overrides."""

from __future__ import annotations

import json

import pytest
from conftest import write_corpus

from ptmkit.build import build_model
from ptmkit.cli import main
from ptmkit.pretrained import load_pretrained
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.trainer import read_metrics

pytest.importorskip("ptmkit.data.batches")

TINY = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64",
    "tokenizer.vocab_size=120", "tokenizer.min_frequency=1",
    "train.batch_size=8", "train.seq_len=32", "train.max_steps=6", "train.warmup_steps=2",
    "train.log_every=2", "train.eval_every=3", "train.save_every=3", "train.eval_batches=2", "train.num_threads=1",
]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    text = write_corpus(root / "train.txt", docs=30)
    run = root / "run"
    rc = main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(run), *TINY])
    assert rc == 0
    return root, text, run


def test_help_explains_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for needle in ("--data", "--eval-data", "--resume", "--overwrite", "examples:", "train.max_steps", "torchrun"):
        assert needle in out


def test_outputs_of_a_run(first_run, capsys):
    root, text, run = first_run
    assert {"config.json", "metrics.jsonl", "loss.png", "checkpoints", "data"} <= {p.name for p in run.iterdir()}
    config = json.loads((run / "config.json").read_text())
    tok_vocab = json.loads((run / "data" / "tokenizer.json").read_text())["model"]["vocab"]
    assert config["model"]["vocab_size"] == len(tok_vocab) <= 120  # follows the tokenizer
    assert config["train"]["max_steps"] == 6 and config["model"]["hidden_size"] == 32
    assert [s for s, _ in ckpt.checkpoint_steps(run)] == [3, 6]
    ck = ckpt.latest_checkpoint(run)
    assert sorted(p.name for p in ck.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json", "trainer_state.pt"]
    assert json.loads((ck / "config.json").read_text()) == config
    train = read_metrics(run / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == [2, 4, 6]
    assert all({"loss", "mlm_loss", "mlm_acc", "lr", "tokens_per_s"} <= set(r) for r in train)
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl", "eval")] == [3, 6]
    loaded = load_pretrained(run)
    assert loaded.backbone.config.hidden_size == 32


def test_refuses_existing_run_and_keeps_it(first_run, capsys):
    root, text, run = first_run
    ck = ckpt.latest_checkpoint(run)
    before = (ck / "model.safetensors").read_bytes()
    rc = main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(run), *TINY])
    assert rc == 2
    assert "--resume" in capsys.readouterr().err
    assert (ck / "model.safetensors").read_bytes() == before


def test_resume_checks_config_and_trains_longer(first_run, capsys):
    root, text, run = first_run
    rc = main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(run), "--resume", *TINY, "train.lr=0.5"])
    assert rc == 2 and "train.lr" in capsys.readouterr().err
    rc = main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(run), "--resume", *TINY, "train.max_steps=8"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "final:" in out and "step 8" in out
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert steps == [2, 4, 6, 8]
    assert ckpt.latest_checkpoint(run).name == "step-0000008"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["train.max_step=3"], "did you mean 'max_steps'"),
        (["model.vocab_size=10"], "vocab mismatch"),
        (["train.seq_len=128"], "max_position"),
    ],
)
def test_bad_overrides(first_run, tmp_path, capsys, extra, message):
    root, text, run = first_run
    rc = main(["pretrain", "bert-tiny", "--data", str(run / "data"), "-o", str(tmp_path / "r"), *TINY, *extra])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not ckpt.checkpoint_steps(tmp_path / "r")


def test_prepared_corpus_eval_data_and_overwrite(first_run, tmp_path, capsys):
    root, text, run = first_run
    valid = write_corpus(tmp_path / "valid.txt", docs=4, seed=1)
    out = tmp_path / "r2"
    args = ["pretrain", "bert-tiny", "--data", str(run / "data"), "--eval-data", str(valid), "-o", str(out), *TINY]
    assert main([*args, "train.max_steps=3"]) == 0
    assert (out / "eval_data" / "tokens.bin").exists()
    assert main([*args, "--overwrite", "train.max_steps=2"]) == 0
    assert [s for s, _ in ckpt.checkpoint_steps(out)] == [2]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl", "train")] == [2]


def test_missing_data_is_an_error(tmp_path, capsys):
    rc = main(["pretrain", "bert-tiny", "--data", str(tmp_path / "nope.txt"), "-o", str(tmp_path / "r"), *TINY])
    assert rc == 2 and "not found" in capsys.readouterr().err


def test_init_embeddings_start_is_reproducible(tmp_path):
    """``train.init_embeddings=skipgram``: the run starts from word2vec embeddings, and
    ``initial_model(run)`` rebuilds exactly that start (the demo's word2vec-only condition)."""
    import torch

    from ptmkit.workflows.pretrain import initial_model

    text = write_corpus(tmp_path / "train.txt", docs=30)
    run = tmp_path / "run"
    # One step at a negligible LR: the checkpoint is the starting point to ~1e-9.
    over = [o for o in TINY if not o.startswith(("train.max_steps", "train.warmup_steps", "train.save_every", "train.eval_every"))]
    over += ["train.max_steps=1", "train.lr=1e-9", "train.init_embeddings=skipgram", "train.init_embeddings_epochs=2"]
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(run), *over]) == 0
    trained = load_pretrained(run).backbone.state_dict()
    start = initial_model(run).backbone.state_dict()
    assert set(start) == set(trained)
    for k in start:
        torch.testing.assert_close(start[k], trained[k], rtol=0, atol=1e-6, msg=k)
    # ... and that start is the plain seeded initialisation except for the corpus's word embeddings.
    from ptmkit.train.trainer import seed_everything

    start_model = initial_model(run)
    seed_everything(start_model.config["train"]["seed"])
    plain_state = build_model(start_model.config, start_model.tokenizer).backbone.state_dict()
    words = start_model.tokenizer.encode_batch(["cat dog house"])[0]
    assert not torch.allclose(start["embeddings.word_embeddings.weight"][words], plain_state["embeddings.word_embeddings.weight"][words])
    torch.testing.assert_close(start["layers.0.attn.qkv.weight"], plain_state["layers.0.attn.qkv.weight"])
