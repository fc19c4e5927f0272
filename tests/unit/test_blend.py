"""Several prepared corpora in one pre-training run: an epoch of weighted shares (exact proportions
per epoch, each corpus walked without replacement pass by pass), batches that are a pure function
of (seed, epoch, step) so a resumed run continues exactly, and the refusals (weights that do not
fit, corpora of different tokenizers, a streams objective, text files)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import TINY, write_corpus

from ptmkit.cli import main as cli_main
from ptmkit.data.blend import BlendedBatches, join_corpora, member_spans, parse_weights, shares
from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError
from ptmkit.tokenization import Tokenizer

SIZES = (30, 100, 7)  # examples of three corpora
WEIGHTS = "0.5,0.3,0.2"


class DummyObjective:
    """collate returns the span starts (which tell the corpus and the example) and one draw each."""

    def collate(self, corpus, spans, rng):
        return {"x": torch.from_numpy(np.asarray(spans[:, 0]).copy()), "r": torch.from_numpy(rng.random(len(spans)))}


def spans_of(sizes=SIZES):
    """Corpus i's example j starts at 1000 * i + j."""
    starts = np.concatenate([1000 * i + np.arange(n) for i, n in enumerate(sizes)])
    return np.stack([starts, starts + 1], axis=1)


def make(weights=WEIGHTS, sizes=SIZES, objective=None, **kw):
    args = dict(seq_len=10, batch_size=8, seed=7)
    args.update(kw)
    return BlendedBatches(None, objective or DummyObjective(), spans_of(sizes), sizes, weights, **args)


def epoch_examples(src, epoch):
    return torch.cat([src(epoch, s)["x"] for s in range(src.steps_per_epoch)]).numpy()


def test_shares_are_whole_numbers_closest_to_the_weights():
    w = parse_weights("0.5,0.3,0.2", 3)
    assert shares(w, 136).tolist() == [68, 41, 27] and shares(w, 7).sum() == 7
    assert shares(parse_weights([1, 1, 1], 3), 100).tolist() == [34, 33, 33]  # ties go to the earlier corpus
    for total in range(0, 50):
        got = shares(w, total)
        assert got.sum() == total and np.all(np.abs(got - w * total) < 1)


def test_every_epoch_holds_the_stated_proportions_exactly():
    src = make()
    assert src.steps_per_epoch == 137 // 8 and src.counts.tolist() == [68, 41, 27]
    for epoch in range(4):
        corpus = epoch_examples(src, epoch) // 1000
        assert np.bincount(corpus, minlength=3).tolist() == [68, 41, 27]
        assert src.epoch_shares(epoch).tolist() == [68, 41, 27]
    assert make(weights="1,0,0").counts.tolist() == [136, 0, 0]


def test_each_corpus_is_walked_pass_by_pass_without_replacement():
    src = make()
    seen = [Counter() for _ in SIZES]
    for epoch in range(3):
        for x in epoch_examples(src, epoch).tolist():
            seen[x // 1000][x % 1000] += 1
        for i, n in enumerate(SIZES):
            draws = (epoch + 1) * int(src.counts[i])
            full, extra = divmod(draws, n)  # every example `full` times, `extra` of them once more
            counts = Counter(seen[i][j] for j in range(n))
            assert counts == Counter({full + 1: extra, full: n - extra} if extra else {full: n}), (epoch, i)


def test_batches_are_a_pure_function_of_seed_epoch_step():
    src = make()
    later = src(3, 4)
    fresh = make()  # as after a resume: straight to the same batch
    for epoch, step in [(3, 4), (0, 0), (3, 4), (1, 16)]:
        a, b = src(epoch, step), fresh(epoch, step)
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(make()(3, 4)["x"], later["x"])
    assert not torch.equal(make(seed=8)(3, 4)["x"], later["x"])
    assert not torch.equal(src(4, 4)["x"], later["x"])
    parts = [make(rank=r, world_size=2)(2, 5) for r in range(2)]  # ranks split the same global batch
    assert torch.equal(torch.cat([p["x"] for p in parts]), src(2, 5)["x"])


def test_bad_weights_and_objectives():
    with pytest.raises(PtmError, match="2 weight.*for 3 corpora"):
        make(weights="0.5,0.5")
    for bad in ("1,-1,1", "0,0,0", "1,nan,1"):
        with pytest.raises(PtmError, match="finite, not negative, and not all zero"):
            make(weights=bad)
    with pytest.raises(PtmError, match="numbers separated by commas"):
        make(weights="a,b,c")
    with pytest.raises(PtmError, match="corpus 3 of --data has a weight but no training example"):
        make(sizes=(30, 100, 0))
    assert make(weights="1,1,0", sizes=(30, 100, 0)).counts[2] == 0

    class Streams(DummyObjective):
        reads_streams = True
        name = "awd_lm"

    with pytest.raises(PtmError, match="'awd_lm' reads its corpus as parallel streams"):
        make(objective=Streams())


# ---------------------------------------------------------------------------- real corpora
@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("blend")
    a = write_corpus(root / "a.txt", docs=40, seed=1)
    b = write_corpus(root / "b.txt", docs=15, seed=2, lengths=(8, 20))
    tok = Tokenizer.train([a, b], "wordpiece", 200, min_frequency=1)
    tok.save(root / "tok.json")
    ca = prepare([a], root / "tok.json", root / "A", workers=1, progress=False)
    cb = prepare([b], root / "tok.json", root / "B", workers=1, progress=False, shard_tokens=300)  # a sharded set
    return root, ca, cb


def test_joined_corpora_keep_their_examples_apart(corpora):
    root, ca, cb = corpora
    joined = join_corpora([root / "A", root / "B"])
    assert joined.n_tokens == ca.n_tokens + cb.n_tokens and joined.n_documents == ca.n_documents + cb.n_documents
    assert joined.meta["members"] == [str(root / "A"), str(root / "B")]

    class Sentences:  # one example per sentence
        def example_spans(self, corpus, seq_len):
            s = np.asarray(corpus.sentences)
            return np.stack([s[:-1], s[1:]], axis=1)

    pa, pb = member_spans(Sentences(), joined, 64)
    assert len(pa) == ca.n_sentences and len(pb) == cb.n_sentences and pb.min() >= ca.n_tokens
    for (st, en), (st0, en0) in zip(pb[:: 7], np.asarray(Sentences().example_spans(cb, 64))[:: 7]):
        np.testing.assert_array_equal(joined.tokens[st:en], cb.tokens[st0:en0])
        np.testing.assert_array_equal(joined.word_starts[np.arange(st, en)], cb.word_starts[np.arange(st0, en0)])
    assert join_corpora([root / "A"]) is not None and member_spans(Sentences(), ca, 64)[0].shape == (ca.n_sentences, 2)


def test_corpora_of_different_tokenizers_are_refused(corpora, tmp_path):
    root, _, _ = corpora
    other = Tokenizer.train([root / "a.txt"], "wordpiece", 150, min_frequency=1)
    prepare([root / "b.txt"], other, tmp_path / "C", workers=1, progress=False)
    with pytest.raises(PtmError, match=r"A and .*C were prepared with different tokenizers"):
        join_corpora([root / "A", tmp_path / "C"])


def _losses(run):
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if r.get("split") == "train"]


def test_cli_blend_trains_and_resumes_exactly(corpora, tmp_path, capsys):
    root, _, _ = corpora
    data = ["--data", str(root / "A"), str(root / "B")]
    tiny = [o for o in TINY if not o.startswith("train.max_steps")] + ["train.log_every=1", "train.eval_every=100"]
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    argv = ["pretrain", "bert-tiny", *data, "--data-weights", "0.25,0.75", *tiny]
    assert cli_main([*argv, "-o", str(straight), "train.max_steps=4"]) == 0
    assert "blend: A " in capsys.readouterr().out
    assert cli_main([*argv, "-o", str(cut), "train.max_steps=2", "train.save_every=2"]) == 0
    assert cli_main([*argv, "-o", str(cut), "train.max_steps=4", "train.save_every=2", "--resume"]) == 0
    assert len(_losses(straight)) == 4 and _losses(cut)[-2:] == _losses(straight)[-2:]
    assert json.loads((cut / "inputs.json").read_text())["data_weights"] == [0.25, 0.75]
    # other weights are other data: no silent resume
    assert cli_main(["pretrain", "bert-tiny", *data, "--data-weights", "0.5,0.5", *tiny, "-o", str(cut),
                     "train.max_steps=6", "train.save_every=2", "--resume"]) == 2
    assert "data_weights" in capsys.readouterr().err
    # without weights the corpora are simply read together; weights need prepared corpora
    assert cli_main(["pretrain", "bert-tiny", *data, "--eval-data", str(root / "B"), str(root / "A"), *tiny,
                     "-o", str(tmp_path / "union"), "train.max_steps=1"]) == 0
    assert "train / 153 eval examples" in capsys.readouterr().out  # every example of both as eval data
    assert cli_main(["pretrain", "bert-tiny", "--data", str(root / "a.txt"), "--data-weights", "1", *tiny,
                     "-o", str(tmp_path / "text")]) == 2
    assert "weighs prepared corpora" in capsys.readouterr().err
    assert cli_main(["pretrain", "bert-tiny", "--data", str(root / "A"), str(root / "a.txt"), *tiny,
                     "-o", str(tmp_path / "mixed")]) == 2
    assert "mixes prepared corpora" in capsys.readouterr().err
