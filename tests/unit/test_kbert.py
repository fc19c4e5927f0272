"""K-BERT (:mod:`ptmkit.tasks.kbert`): the sentence tree, soft positions and visible matrix
against the paper's worked example (Liu et al. 2020, Figure 2 and 4), the visible matrix against
its definition, the property it exists for (the sentence's other tokens do not see the injected
knowledge), packed execution, and fine-tuning through the CLI."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import run_cli, task_file_args, tiny_checkpoint, toy_sentiment

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.tasks.inputs import pad_positions, pad_visible
from ptmkit.tasks.kbert import Injector, Knowledge, Tree, build_tree, normalize


class WordTokenizer:
    """One id per word (the paper's figure counts words): ids from a growing vocabulary."""

    cls_id, sep_id, pad_id = 1, 2, 0

    def __init__(self) -> None:
        self.vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2}

    def encode_batch(self, texts):
        return [[self.vocab.setdefault(w, len(self.vocab)) for w in t.split()] for t in texts]

    def words(self, ids):
        inverse = {v: k for k, v in self.vocab.items()}
        return [inverse[int(i)] for i in ids]


def paper_example():
    kg = Knowledge({"cook": [("CEO", "Apple")], "beijing": [("capital", "China"), ("is_a", "City")]})
    tok = WordTokenizer()
    enc = Injector(kg, tok, "kbert", branches=2).encode(["Tim Cook is visiting Beijing now"], None, 64)
    return tok, enc


def test_the_papers_sentence_tree_soft_positions_and_visible_matrix():
    tok, enc = paper_example()
    words = tok.words(enc.ids[0])
    assert words == ["[CLS]", "Tim", "Cook", "CEO", "Apple", "is", "visiting", "Beijing", "capital", "China",
                     "is_a", "City", "now", "[SEP]"]
    # Figure 2's soft positions (the [SEP] follows the sentence's last soft position)
    assert enc.positions[0].tolist() == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 6, 7, 6, 7]
    v = enc.visible[0]
    at = {w: i for i, w in enumerate(words)}

    def sees(a, b):
        return bool(v[at[a], at[b]])

    assert v.shape == (14, 14) and (v == v.T).all() and v.diagonal().all()
    # Figure 4: the branch [CEO Apple] is visible to Cook and itself only
    assert sees("Cook", "CEO") and sees("Cook", "Apple") and sees("CEO", "Apple")
    assert not sees("Tim", "CEO") and not sees("Tim", "Apple") and not sees("is", "Apple") and not sees("[CLS]", "CEO")
    # Beijing sees both of its branches, which do not see each other
    assert sees("Beijing", "capital") and sees("Beijing", "City")
    assert not sees("capital", "is_a") and not sees("China", "City") and not sees("China", "Cook")
    # the trunk sees the whole sentence, mentions included
    trunk = ["[CLS]", "Tim", "Cook", "is", "visiting", "Beijing", "now", "[SEP]"]
    assert all(sees(a, b) for a in trunk for b in trunk)


def reference_visible(tree: Tree) -> np.ndarray:
    """The visible matrix by its definition, token pair by token pair."""
    n = len(tree.ids)
    out = np.zeros((n, n), dtype=bool)
    for i, j in itertools.product(range(n), repeat=2):
        bi, bj = tree.branch[i], tree.branch[j]
        if bi == bj:
            out[i, j] = True
        elif bi >= 0 and bj == -1:
            out[i, j] = tree.anchor[bi][0] <= j < tree.anchor[bi][1]
        elif bj >= 0 and bi == -1:
            out[i, j] = tree.anchor[bj][0] <= i < tree.anchor[bj][1]
    return out


def test_the_visible_matrix_equals_its_definition_on_random_trees():
    rng = np.random.default_rng(0)
    for _ in range(50):
        words = [rng.integers(5, 50, size=rng.integers(1, 4)) for _ in range(rng.integers(1, 8))]
        mentions, i = [], 0
        while i < len(words):
            if rng.random() < 0.4:
                n = int(rng.integers(1, 3))
                mentions.append((i, min(i + n, len(words)), [rng.integers(5, 50, size=rng.integers(1, 4))
                                                             for _ in range(rng.integers(1, 3))]))
                i += n
            else:
                i += 1
        tree = build_tree(words, mentions, start=1)
        assert (tree.visible() == reference_visible(tree)).all()
        trunk = tree.branch == -1
        assert (tree.positions[trunk] == np.arange(1, trunk.sum() + 1)).all()  # the sentence keeps its positions


def test_branches_are_dropped_before_the_sentence_is_cut():
    words = [np.array([10 + i]) for i in range(6)]
    mentions = [(1, 2, [np.array([90, 91]), np.array([92])]), (4, 5, [np.array([93, 94])])]
    tree = build_tree(words, mentions, start=1, budget=8)
    assert tree.ids.tolist() == [10, 11, 90, 91, 12, 13, 14, 15]  # the last mention's branches went first
    assert build_tree(words, mentions, start=1, budget=4).ids.tolist() == [10, 11, 12, 13]


def test_mentions_longest_first_and_normalized():
    kg = Knowledge({"new york": [("is_a", "city")], "york": [("is_a", "town")], "dog": [("is_a", "animal")]})
    found = kg.mentions("I saw a Dog, in New York.".split())
    assert [(a, b, t[0][1]) for a, b, t in found] == [(3, 4, "animal"), (5, 7, "city")]
    assert normalize("“Hello,”  World!") == "hello world"


def test_plain_mode_is_the_same_tokens_with_ordinary_positions_and_attention():
    kg = Knowledge({"cook": [("CEO", "Apple")]})
    tok = WordTokenizer()
    kbert = Injector(kg, tok, "kbert").encode(["Tim Cook now"], ["Cook Tim"], 64)
    plain = Injector(kg, tok, "plain").encode(["Tim Cook now"], ["Cook Tim"], 64)
    assert [a.tolist() for a in kbert.ids] == [a.tolist() for a in plain.ids]
    assert plain.positions is None and plain.visible is None
    assert tok.words(kbert.ids[0]) == ["[CLS]", "Tim", "Cook", "CEO", "Apple", "now", "[SEP]", "Cook", "CEO", "Apple",
                                       "Tim", "[SEP]"]
    assert kbert.types[0].tolist() == [0] * 7 + [1] * 5
    assert kbert.positions[0].tolist() == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 6, 7]  # noqa: E501  # the pair's positions run on


def encoder(layers=1):
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=40, hidden_size=16, num_layers=layers, num_heads=2, intermediate_size=32,
                            max_position=32, dropout=0.0, attention_dropout=0.0)
    return TransformerEncoder(cfg).eval()


def test_the_sentences_other_tokens_do_not_see_the_knowledge():
    """One layer: every trunk token that is not a mention has the state it has without any
    injection (soft positions restore its position, the visible matrix hides the branches)."""
    tok, enc = paper_example()
    bare = Injector(Knowledge({"x": [("y", "z")]}), tok, "kbert").encode(["Tim Cook is visiting Beijing now"], None, 64)
    model = encoder()
    ids = torch.tensor(enc.ids[0])[None]
    out = model(ids, position_ids=torch.tensor(enc.positions[0])[None],
                attn_mask=torch.tensor(enc.visible[0])[None, None]).last_hidden_state[0]
    ref = model(torch.tensor(bare.ids[0])[None]).last_hidden_state[0]
    words = tok.words(enc.ids[0])
    for w in ("[CLS]", "Tim", "is", "visiting", "now", "[SEP]"):
        assert torch.allclose(out[words.index(w)], ref[tok.words(bare.ids[0]).index(w)], atol=1e-5), w
    # the mentions do read their branches
    assert not torch.allclose(out[words.index("Cook")], ref[1 + 1], atol=1e-3)


def test_padded_and_packed_batches_equal_each_example_alone():
    tok = WordTokenizer()
    kg = Knowledge({"cook": [("CEO", "Apple")], "beijing": [("capital", "China")]})
    enc = Injector(kg, tok, "kbert").encode(["Tim Cook is visiting Beijing now", "Cook", "a b c d e f g h i j k"],
                                           None, 64)
    model = encoder(layers=2)
    index = np.arange(3)
    T = int(enc.lengths.max())
    ids = torch.zeros(3, T, dtype=torch.long)
    mask = torch.zeros(3, T, dtype=torch.long)
    for r, a in enumerate(enc.ids):
        ids[r, : len(a)] = torch.tensor(a)
        mask[r, : len(a)] = 1
    kw = dict(attention_mask=mask, position_ids=pad_positions(enc.positions, index, T),
              attn_mask=pad_visible(enc.visible, index, T))
    for pack in (True, False):
        model.pack_padding = pack
        out = model(ids, **kw).last_hidden_state
        for r, a in enumerate(enc.ids):
            alone = model(torch.tensor(a)[None], position_ids=torch.tensor(enc.positions[r])[None],
                          attn_mask=torch.tensor(enc.visible[r])[None, None]).last_hidden_state[0]
            assert torch.allclose(out[r, : len(a)], alone, atol=1e-5), (pack, r)


# ---------------------------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("kbert")
    task = toy_sentiment((48, 24, 24))
    ck = tiny_checkpoint(root / "model", task.train.texts)
    kg = root / "kg.tsv"
    kg.write_text("good\tmeans\tpositive\nbad\tmeans\tnegative\nthe film\tis_a\twork\n")
    return root, ck, task_file_args(task, root), kg


@pytest.mark.parametrize("mode", ["kbert", "plain"])
def test_finetune_with_injected_knowledge(toy, tmp_path, capsys, mode):
    root, ck, files, kg = toy
    rc, err = run_cli(["finetune", ck, *files, "-o", tmp_path / mode, "epochs=1", "batch_size=16", "max_seq_len=32",
                       f"knowledge={kg}", f"knowledge_mode={mode}", "--seeds", "0", "--quiet"], capsys)
    assert rc == 0, err
    # the saved task model reloads with its knowledge, and scores the same
    import json

    run = tmp_path / mode / "pretrained-seed0"
    rc2, err2 = run_cli(["finetune", run, *files, "-o", tmp_path / "again", "--eval-only", "--quiet"], capsys)
    assert rc2 == 0, err2
    first = json.loads((run / "results.json").read_text())["test"]["accuracy"]
    again = json.loads(next((tmp_path / "again").rglob("results.json")).read_text())["test"]["accuracy"]
    assert first == again


def test_bad_knowledge_is_refused_in_one_line(toy, tmp_path, capsys):
    root, ck, files, kg = toy
    bad = tmp_path / "bad.tsv"
    bad.write_text("good\tmeans\tpositive\nbad\tmeans\n")
    args = [*files, "-o", tmp_path / "o", "epochs=1", "max_seq_len=32", "--seeds", "0", "--quiet"]
    for extra, fragment in (([f"knowledge={bad}"], "bad.tsv:2: expected head<TAB>relation<TAB>tail"),
                            ([f"knowledge={tmp_path / 'none.tsv'}"], "none.tsv does not exist"),
                            ([f"knowledge={kg}", "knowledge_mode=tree"], "knowledge_mode must be one of kbert, plain")):
        rc, err = run_cli(["finetune", ck, *args, *extra], capsys)
        assert rc == 2 and fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    rel = tiny_checkpoint(tmp_path / "rel", ["good film", "bad film"], positions="relative")
    rc, err = run_cli(["finetune", rel, *args, f"knowledge={kg}"], capsys)
    assert rc == 2 and "soft positions need absolute position embeddings" in err and "knowledge_mode=plain" in err, err


def test_knowledge_that_matches_nothing_is_warned_about(caplog):
    with caplog.at_level("WARNING"):
        Injector(Knowledge({"zebra": [("is_a", "animal")]}), WordTokenizer()).encode(["a b c", "d e"], None, 16)
    assert "matched no word of 2 texts" in caplog.text
    with pytest.raises(PtmError, match="knowledge_branches must be >= 1"):
        Injector(Knowledge({}), WordTokenizer(), branches=0)
