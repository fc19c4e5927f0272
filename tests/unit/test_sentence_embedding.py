"""Sentence embeddings (SimCSE): retrieval scores, unsupervised views that differ only by dropout,
fine-tuning through ``ptm finetune`` with exact resume, the run read by ``ptm encode`` and ``ptm
predict``, and bad input as one line."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import run_cli

from ptmkit.build import build_model
from ptmkit.cli import main
from ptmkit.data.tasks import builtin_tasks
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.nn.info_nce import info_nce
from ptmkit.pretrained import save_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.retrieval import cosine_retrieval, ranks_of, retrieval_scores
from ptmkit.tasks.sentence_embedding import (
    PairSplit,
    SentenceEmbedding,
    SentenceEmbeddingData,
    SentenceEncoder,
    collate_views,
    load_pair_files,
)
from ptmkit.tokenization import Tokenizer

# two "languages": a text and its pair say the same words in each (a verse in two translations)
OLD = "thou art thy hath doth saith unto ye shalt thee whence lo".split()
NEW = "you are your has does says to yall will yourself where look".split()


def pairs(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        idx = rng.integers(len(OLD), size=int(rng.integers(3, 7)))
        rows.append({"text": " ".join(OLD[i] for i in idx), "text_pair": " ".join(NEW[i] for i in idx)})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("simcse")
    for split, n, seed in (("train", 96, 0), ("dev", 24, 1), ("test", 24, 2)):
        write_jsonl(d / f"{split}.jsonl", pairs(n, seed))
    texts = [r[c] for r in pairs(96, 0) for c in ("text", "text_pair")]
    (d / "text.txt").write_text("\n".join(texts) + "\n")
    tok = Tokenizer.train([d / "text.txt"], kind="wordpiece", vocab_size=80, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position=32, dropout=0.1, attention_dropout=0.1)
    config = {"model": {"encoder": "transformer", **cfg.__dict__}, "objective": {"name": "mlm", "nsp": False},
              "tokenizer": {"kind": "wordpiece"}, "train": {}}
    torch.manual_seed(0)
    save_pretrained(d / "ck", config, build_model(config, tok), tok)
    return d


def data_of(files) -> SentenceEmbeddingData:
    return load_pair_files(files / "train.jsonl", files / "dev.jsonl", files / "test.jsonl")


# ------------------------------------------------------------------------------ retrieval scores


def test_retrieval_scores_of_a_hand_made_similarity_matrix():
    s = np.array([[0.9, 0.1, 0.3],   # gold 0: first
                  [0.8, 0.2, 0.5],   # gold 1: third
                  [0.4, 0.7, 0.7],   # gold 2: tied with candidate 1 -> counted against it: second
                  [0.5, 0.5, 0.5]])  # gold 0: all tied -> last
    ranks = ranks_of(s, np.array([0, 1, 2, 0]))
    assert ranks.tolist() == [1, 3, 2, 3]
    scores = retrieval_scores(ranks)
    assert scores["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 2 + 1 / 3) / 4)
    assert scores["recall_at_1"] == 0.25 and scores["recall_at_10"] == 1.0
    assert retrieval_scores(np.array([1, 10, 11]))["recall_at_10"] == pytest.approx(2 / 3)


def test_cosine_retrieval_ranks_by_cosine_in_chunks():
    rng = np.random.default_rng(0)
    q, c = rng.normal(size=(7, 5)), rng.normal(size=(9, 5))
    gold = rng.integers(9, size=7)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T
    ranks, best, best_cos = cosine_retrieval(10 * q, c, gold, chunk=3)  # lengths drop out
    assert ranks.tolist() == [int((row >= row[g]).sum()) for row, g in zip(cos, gold)]
    assert best.tolist() == cos.argmax(axis=1).tolist() and np.allclose(best_cos, cos.max(axis=1))


# ---------------------------------------------------------------------- the views and the loss


def _task(data, tok, **options):
    cfg = FinetuneConfig(max_seq_len=16, task=options)
    return SentenceEmbedding(data, cfg, tok, causal=False, with_types=True)


def test_unsupervised_pairs_every_distinct_sentence_with_itself(files):
    data = data_of(files)
    tok = Tokenizer.load(files / "ck" / "tokenizer.json")
    enc = _task(data, tok, unsupervised=True).encode("train")
    sentences = set(data.train.texts) | set(data.train.text_pairs)
    assert len(enc) == len(sentences) and (enc.queries == enc.positives).all() and enc.negatives is None
    sup = _task(data, tok).encode("train")
    assert len(sup) == len(data.train) and not (sup.queries == sup.positives).any()
    batch = collate_views(enc, np.arange(8), tok.pad_id, True)
    assert torch.equal(batch["input_ids"], batch["positive_input_ids"])  # the same tokens twice


def _encoder(p: float) -> TransformerEncoder:
    torch.manual_seed(0)
    return TransformerEncoder(TransformerConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=2,
                                                intermediate_size=64, max_position=16, dropout=p, attention_dropout=p,
                                                pooler=False))


def _views(n: int = 6):
    ids = torch.randint(5, 50, (n, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask, "positive_input_ids": ids.clone(),
            "positive_attention_mask": mask.clone()}


def test_two_views_of_a_sentence_differ_only_by_dropout():
    batch = _views()
    model = SentenceEncoder(_encoder(0.1), "mean").train()
    v = model.embed({k: torch.cat([batch[k], batch["positive_" + k]]) for k in ("input_ids", "attention_mask")})
    assert not torch.allclose(v[:6], v[6:])  # training: two dropout masks
    model.eval()
    assert torch.equal(model.embed(batch), model.embed(batch, "positive_"))  # evaluation: the same vector
    # without dropout the two views are one vector: the loss is InfoNCE of the vectors against
    # themselves, and every sentence picks its own copy
    plain = SentenceEncoder(_encoder(0.0), "mean").train()
    out = plain(batch)
    q = plain.embed(batch).detach()
    assert torch.equal(q, plain.embed(batch, "positive_"))
    assert float(out.loss.detach()) == pytest.approx(float(info_nce(q, q)), rel=1e-6)
    assert float(out.metrics["accuracy"]) == 1.0


def test_cls_pooling_trains_through_an_mlp_that_evaluation_drops():
    batch = _views()
    model = SentenceEncoder(_encoder(0.0), "cls").eval()
    hidden = model.backbone(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.equal(model.embed(batch), hidden[:, 0])
    out = model(batch)
    out.loss.backward()
    out.loss = out.loss.detach()
    assert model.mlp[0].weight.grad is not None and model.mlp[0].weight.grad.abs().sum() > 0
    q = model.mlp(hidden[:, 0]).detach()
    assert float(out.loss) == pytest.approx(float(info_nce(q, q)), rel=1e-6)


def test_hard_negatives_are_a_third_view(tmp_path, files):
    rows = [dict(r, negative=r["text_pair"].split()[0] + " lo") for r in pairs(12, 5)]
    for split in ("train", "dev", "test"):
        write_jsonl(tmp_path / f"{split}.jsonl", rows)
    data = load_pair_files(*(tmp_path / f"{s}.jsonl" for s in ("train", "dev", "test")), negative="negative")
    tok = Tokenizer.load(files / "ck" / "tokenizer.json")
    enc = _task(data, tok).encode("train")
    batch = collate_views(enc, np.arange(4), tok.pad_id, True)
    assert batch["negative_input_ids"].shape == batch["input_ids"].shape == batch["positive_input_ids"].shape
    model = SentenceEncoder(_encoder(0.0), "mean").eval()
    batch = {k: v.clamp(max=49) for k, v in batch.items()}  # the test encoder's 50 ids
    with torch.no_grad():
        out = model(batch)
        keys = torch.cat([model.embed(batch, "positive_"), model.embed(batch, "negative_")])
        assert float(out.loss) == pytest.approx(float(info_nce(model.embed(batch), keys)), rel=1e-6)


# ------------------------------------------------------------------------ fine-tuning end to end


CFG = FinetuneConfig(epochs=3, lr=3e-3, batch_size=16, max_seq_len=16, num_threads=1, warmup=0.0)


def test_finetune_cli_trains_and_ptm_encode_reads_the_run(files, tmp_path, capsys):
    splits = [a for s in ("train", "dev", "test") for a in (f"--{s}", str(files / f"{s}.jsonl"))]
    out = tmp_path / "ft"
    rc, err = run_cli(["finetune", files / "ck", *splits, "-o", out, "--quiet", "epochs=4", "lr=3e-3",
                       "batch_size=16", "max_seq_len=16", "warmup=0"], capsys)
    assert rc == 0, err
    run = out / "pretrained-seed0"
    result = json.loads((run / "results.json").read_text())
    assert result["task_type"] == "sentence_embedding" and result["select"] == "mrr"
    assert set(result["test"]) == {"mrr", "recall_at_1", "recall_at_10"}
    assert len(result["history"]) == 4 and all("dev_mrr" in h for h in result["history"])
    # the trained encoder retrieves far better than chance (24 candidates: MRR about 0.16)
    assert result["test"]["mrr"] > 0.5, result["test"]
    rows = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and {"text", "text_pair", "rank", "retrieved", "cosine"} <= set(rows[0])
    assert np.mean([1 / r["rank"] for r in rows]) == pytest.approx(result["test"]["mrr"])
    # the saved run scores the same again (--eval-only)
    rc, err = run_cli(["finetune", run, "--eval-only", *splits, "-o", tmp_path / "again"], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "again" / "results.json").read_text())["test"] == pytest.approx(result["test"])
    # ptm encode reads the run's encoder: its vectors give the scores the run reported
    test = [json.loads(x) for x in (files / "test.jsonl").read_text().splitlines()]
    (tmp_path / "texts.txt").write_text("\n".join(r["text"] for r in test) + "\n")
    (tmp_path / "pairs.txt").write_text("\n".join(r["text_pair"] for r in test) + "\n")
    for name in ("texts", "pairs"):
        rc, err = run_cli(["encode", run, "--input", tmp_path / f"{name}.txt", "-o", tmp_path / f"{name}.npy"], capsys)
        assert rc == 0, err
    q, c = np.load(tmp_path / "texts.npy"), np.load(tmp_path / "pairs.npy")
    distinct, first, gold = np.unique([r["text_pair"] for r in test], return_index=True, return_inverse=True)
    ranks, _, _ = cosine_retrieval(q, c[first], gold.reshape(-1))
    assert retrieval_scores(ranks)["mrr"] == pytest.approx(result["test"]["mrr"], abs=1e-6)
    # ptm predict: a text gets its vector (the one ptm encode writes), a pair its cosine
    write_jsonl(tmp_path / "in.jsonl", [{"text": test[0]["text"], "text_pair": test[0]["text_pair"]}])
    (tmp_path / "in.txt").write_text(test[0]["text"] + "\n")
    for name in ("in.jsonl", "in.txt"):
        rc, err = run_cli(["predict", run, "--input", tmp_path / name, "-o", tmp_path / f"{name}.out"], capsys)
        assert rc == 0, err
    pair = json.loads((tmp_path / "in.jsonl.out").read_text())
    vec = json.loads((tmp_path / "in.txt.out").read_text())
    assert np.allclose(vec["vector"], q[0], atol=1e-5)
    want = q[0] @ c[0] / (np.linalg.norm(q[0]) * np.linalg.norm(c[0]))
    assert pair["cosine"] == pytest.approx(want, abs=1e-5)


class Killed(Exception):
    pass


def test_killed_unsupervised_finetune_resumes_exactly(files, tmp_path):
    data = data_of(files)
    cfg = replace(CFG, task={"unsupervised": True})  # dropout noise: the random state must resume too
    full = finetune(files / "ck", data, tmp_path / "full", cfg, seed=1, progress=False)

    steps = -(-len(set(data.train.texts) | set(data.train.text_pairs)) // CFG.batch_size)  # an epoch: the sentences

    def kill(trainer, step):
        if step == steps + 3:  # inside epoch 2, after the checkpoint of epoch 1
            raise Killed

    with pytest.raises(Killed):
        finetune(files / "ck", data, tmp_path / "cut", cfg, seed=1, progress=False, callbacks=[kill])
    assert (tmp_path / "cut" / "checkpoints").is_dir() and not (tmp_path / "cut" / "results.json").exists()
    resumed = finetune(files / "ck", data, tmp_path / "cut", cfg, seed=1, progress=False, resume=True)
    assert resumed["history"] == full["history"] and resumed["test"] == full["test"]
    assert full["sizes"]["train"] == len(data.train) and len(full["history"]) == 3


# ------------------------------------------------------------------------------------ bad input


def test_supervised_training_needs_the_pair_column(files, tmp_path, capsys):
    rows = [{"sentence": r["text"], "other": r["text_pair"]} for r in pairs(8, 3)]
    write_jsonl(tmp_path / "train.jsonl", [{"text": r["sentence"], "other": r["other"]} for r in rows])
    argv = ["finetune", files / "ck", "--type", "sentence_embedding", "--train", tmp_path / "train.jsonl",
            "--dev", files / "dev.jsonl", "--test", files / "test.jsonl", "-o", tmp_path / "out", "max_seq_len=16"]
    rc, err = run_cli(argv, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "train.jsonl: no 'text_pair' column" in err and "its columns: text, other" in err
    assert "unsupervised=true" in err
    # the same file trains without pairs, and --pair-column names the column
    assert main([str(a) for a in argv[:-3]] + ["-o", str(tmp_path / "u"), "--quiet", "epochs=1", "max_seq_len=16",
                                                "unsupervised=true"]) == 0
    rc, err = run_cli([*argv[:-3], "-o", tmp_path / "p", "--pair-column", "other", "max_seq_len=16"], capsys)
    assert rc == 2 and "dev.jsonl: no 'other' column" in err, err  # dev and test are scored on pairs: theirs too
    with pytest.raises(PtmError, match="temperature must be a positive number"):
        _task(data_of(files), None, temperature=0)
    with pytest.raises(PtmError, match="pooling=concat"):
        SentenceEmbedding(data_of(files), FinetuneConfig(pooling="concat"), None, causal=False, with_types=True)


def test_a_label_column_keeps_the_positive_pairs_and_the_bible_task_is_declared(tmp_path):
    rows = [{"text": "a b", "text_pair": "c d", "label": 1}, {"text": "a b", "text_pair": "e f", "label": 0},
            {"text": "g h", "text_pair": "i j", "label": "1"}]
    write_jsonl(tmp_path / "s.jsonl", rows)
    split = load_pair_files(*[tmp_path / "s.jsonl"] * 3, label="label").test
    assert split == PairSplit(["a b", "g h"], ["c d", "i j"])
    source, spec = builtin_tasks()["bible-retrieval"]
    assert source == "bible-paraphrase" and spec["type"] == "sentence_embedding" and spec["label"] == "label"
