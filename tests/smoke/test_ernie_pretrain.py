"""``ernie-tiny`` end to end on Chinese text: character tokens, dictionary words, entities from a
file, phrases from PMI; a 50-step run whose loss falls, and an exact resume."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ptmkit.train.trainer import read_metrics

WORDS = ["我们", "他们", "今天", "明天", "喜欢", "去", "看", "电影", "学习", "中文", "在", "工作", "很", "高兴"]
NAMES = ["李小龙", "北京", "上海", "人民日报"]
TINY = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=40", "model.num_heads=2",
    "model.num_layers=1", "train.batch_size=16", "train.seq_len=32", "train.warmup_steps=5", "train.lr=3e-3",
    "train.log_every=1", "train.eval_batches=2", "train.eval_every=25", "train.save_every=0", "train.num_threads=1",
    "train.device=cpu", "objective.phrase_min_count=3", "objective.phrase_min_pmi=1.0",
]


def segment(text: str) -> np.ndarray:
    """Longest-match segmentation over the toy vocabulary: the offsets where words begin."""
    vocab = sorted(WORDS + NAMES, key=len, reverse=True)
    starts, i = [], 0
    while i < len(text):
        starts.append(i)
        i += next((len(w) for w in vocab if text.startswith(w, i)), 1)
    return np.array(starts)


def write_text(path: Path, n: int = 600, seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):  # test data only: template sentences
        who, where = rng.choice(["我们", "他们", "李小龙"]), rng.choice(["北京", "上海"])
        lines.append(f"{who}{rng.choice(['今天', '明天'])}去{where}看电影" if rng.random() < 0.5
                     else f"{who}在{where}学习中文很高兴，{rng.choice(['人民日报', '电影'])}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def zh_corpus(tmp_path_factory):
    from ptmkit.data.prepare import prepare
    from ptmkit.tokenization import Tokenizer

    root = tmp_path_factory.mktemp("ernie")
    text = write_text(root / "zh.txt")
    tok = Tokenizer.train([text], "char", 200, min_frequency=1)
    corpus = prepare([text], tok, root / "corpus", workers=1, progress=False, segmenter=segment)
    names = root / "names.txt"
    names.write_text("".join(f"{n} 10 nr\n" for n in NAMES) + "电影 5 n\n", encoding="utf-8")
    return root, corpus, names


def test_ernie_tiny_loss_falls(zh_corpus, tmp_path) -> None:
    from ptmkit.pretrained import load_pretrained
    from ptmkit.workflows.pretrain import pretrain

    root, corpus, names = zh_corpus
    run = pretrain("ernie-tiny", root / "corpus", root / "run", overrides=[*TINY, "train.max_steps=50",
                   f"objective.entities={names}"], verbose=False)
    losses = [r["loss"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert len(losses) == 50 and np.mean(losses[-10:]) < 0.85 * np.mean(losses[:5])  # from about ln(V) at the start
    pre = load_pretrained(run)
    assert pre.config["objective"]["name"] == "ernie" and pre.objective.entity_table is not None
    assert len(pre.objective.entity_table) == len(NAMES)  # 电影 (tag n) is not an entity
    phrases = pre.objective.phrase_table(corpus)
    assert phrases is not None and len(phrases) > 0
    # a BERT with BERT's MLM head: exported as an HF BERT with its head
    from ptmkit.cli import main

    assert main(["export", str(run), "-o", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "config.json").is_file()


class Killed(Exception):
    pass


def test_ernie_resume_is_exact(zh_corpus) -> None:
    """The phrase table is recounted from the corpus on resume, so the masks and losses match."""
    from ptmkit.workflows.pretrain import pretrain

    root, _, names = zh_corpus
    over = [*TINY, "train.max_steps=6", "train.save_every=3", "train.eval_every=0", f"objective.entities={names}"]
    pretrain("ernie-tiny", root / "corpus", root / "full", overrides=over, verbose=False)

    def kill(trainer, step):
        if step == 4:
            raise Killed

    with pytest.raises(Killed):
        pretrain("ernie-tiny", root / "corpus", root / "cut", overrides=over, verbose=False, callbacks=[kill])
    pretrain("ernie-tiny", root / "corpus", root / "cut", overrides=over, verbose=False, resume=True)
    a = [(r["step"], r["loss"]) for r in read_metrics(root / "full" / "metrics.jsonl", "train")]
    b = [(r["step"], r["loss"]) for r in read_metrics(root / "cut" / "metrics.jsonl", "train")]
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 7))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=0, atol=1e-6)
