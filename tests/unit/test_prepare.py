"""Corpus preparation: offsets against a per-line reference, worker invariance, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmkit.cli import main as cli_main
from ptmkit.data.corpus import Corpus, token_dtype
from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError
from ptmkit.tokenization import Tokenizer

DOC_A = ["the cat sat on the mat", "a dog barked", "   ", "", "the end of a story"]
DOC_B = ["another file begins here", "", "", "with two blank lines before", "\x07"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("prep")
    a, b = root / "a.txt", root / "b.txt"
    a.write_text("\n".join(DOC_A) + "\n", encoding="utf-8")
    b.write_bytes(("\r\n".join(DOC_B)).encode("utf-8"))  # CRLF and no final newline
    return [a, b]


@pytest.fixture(scope="module")
def tok(files, tmp_path_factory):
    t = Tokenizer.train(files, "wordpiece", 120, min_frequency=1)
    path = tmp_path_factory.mktemp("tokdir") / "tokenizer.json"
    t.save(path)
    return t, path


def reference(files, tok):
    """Per-line Python reference: (tokens, sentence offsets, document offsets)."""
    tokens, sent, docs = [], [0], [0]
    for f in files:
        for line in f.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n"):
            if not line.strip():
                if len(sent) - 1 > docs[-1]:
                    docs.append(len(sent) - 1)
                continue
            ids = tok.encode(line.strip())
            if ids:
                tokens += ids
                sent.append(len(tokens))
        if len(sent) - 1 > docs[-1]:
            docs.append(len(sent) - 1)
    return np.array(tokens), np.array(sent), np.array(docs)


def test_matches_reference_and_any_worker_count(files, tok, tmp_path):
    t, path = tok
    ref_tokens, ref_sent, ref_docs = reference(files, t)
    one = prepare(files, path, tmp_path / "one", workers=1, progress=False)
    two = prepare(files, t, tmp_path / "two", workers=2, chunk_bytes=16, progress=False)
    for c in (one, two):
        assert c.tokens.dtype == np.uint16
        np.testing.assert_array_equal(c.tokens, ref_tokens)
        np.testing.assert_array_equal(c.sentences, ref_sent)
        np.testing.assert_array_equal(c.documents, ref_docs)
    # "\x07" (a control character) encodes to nothing: skipped, counted
    assert one.meta["skipped_empty_lines"] == 1
    assert (one.n_sentences, one.n_documents) == (5, 4)
    assert t.decode(one.sentence(1)) == "a dog barked"
    assert t.decode(one.document(2)) == "another file begins here"
    meta = json.loads((tmp_path / "one" / "meta.json").read_text())
    assert meta["n_tokens"] == len(ref_tokens) and meta["tokenizer_kind"] == "wordpiece"
    assert Corpus.open(tmp_path / "one").load_tokenizer().encode("the cat") == t.encode("the cat")


def test_uint32_for_large_vocabularies(tmp_path):
    assert token_dtype(65535) == np.uint16 and token_dtype(65536) == np.uint32
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(70_000)]) + "\n")
    big = Tokenizer.from_wordpiece_vocab(vocab)
    text = tmp_path / "t.txt"
    text.write_text("w1 w69999\nw65535 w3\n")
    corpus = prepare([text], big, tmp_path / "c", workers=1, progress=False)
    assert corpus.tokens.dtype == np.uint32
    np.testing.assert_array_equal(corpus.tokens, [6, 70004, 65540, 8])


def _no_leftovers(parent, name):
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}")] == []


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "empty"),
        (b"\n\n  \n", "empty"),
        (b"hello\nwor\x00ld\n", r"NUL byte at byte 9 \(line 2\).*binary"),
        (b"good line\nbad \xff byte\n", r"invalid UTF-8 at byte 14 \(line 2\)"),
    ],
)
def test_bad_input_leaves_nothing(content, match, tok, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    with pytest.raises(PtmError, match=match):
        prepare([bad], tok[0], tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path, "out")


def test_bad_input_in_worker_is_reported(tok, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"line one\n" * 50 + b"\xc3\x28 broken\n")
    with pytest.raises(PtmError, match=r"invalid UTF-8 at byte 450 \(line 51\)"):
        prepare([bad], tok[0], tmp_path / "out", workers=2, chunk_bytes=64, progress=False)
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path, "out")


def test_refuses_to_overwrite(files, tok, tmp_path):
    out = tmp_path / "corpus"
    first = prepare(files[:1], tok[0], out, workers=1, progress=False)
    with pytest.raises(PtmError, match="already holds a prepared corpus"):
        prepare(files, tok[0], out, workers=1, progress=False)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\x00")
    with pytest.raises(PtmError):
        prepare([bad], tok[0], out, workers=1, progress=False, overwrite=True)
    assert Corpus.open(out).n_tokens == first.n_tokens  # the failed run left the old corpus intact
    again = prepare(files, tok[0], out, workers=1, progress=False, overwrite=True)
    assert again.n_tokens > first.n_tokens and _no_leftovers(tmp_path, "corpus")


def test_open_detects_damage(files, tok, tmp_path):
    out = tmp_path / "c"
    prepare(files, tok[0], out, workers=1, progress=False)
    data = (out / "tokens.bin").read_bytes()
    (out / "tokens.bin").write_bytes(data[:-2])
    with pytest.raises(PtmError, match="truncated"):
        Corpus.open(out)
    (out / "tokens.bin").write_bytes(data)
    sent = (out / "sentences.npy").read_bytes()
    (out / "sentences.npy").write_bytes(sent[:-8])
    with pytest.raises(PtmError, match="truncated|damaged"):
        Corpus.open(out)
    (out / "sentences.npy").unlink()
    with pytest.raises(PtmError, match="sentences.npy is missing"):
        Corpus.open(out)
    with pytest.raises(PtmError, match="not found"):
        Corpus.open(tmp_path / "nowhere")


def test_cli_train_and_prepare(files, tmp_path, capsys):
    tok_path = tmp_path / "tok.json"
    assert cli_main(["tokenizer", "train", *map(str, files), "--kind", "char", "--vocab-size", "60", "--min-frequency", "1",
                     "-o", str(tok_path)]) == 0
    assert cli_main(["tokenizer", "train", str(files[0]), "--kind", "char", "-o", str(tok_path)]) == 2  # exists
    assert cli_main(["tokenizer", "train", str(files[0]), "--kind", "bpee", "-o", str(tmp_path / "x.json")]) == 2
    out = tmp_path / "corpus"
    assert cli_main(["prepare", *map(str, files), "-t", str(tok_path), "-o", str(out), "--workers", "1"]) == 0
    corpus = Corpus.open(out)
    assert corpus.meta["tokenizer_kind"] == "char"
    assert Tokenizer.load(tok_path).decode(corpus.sentence(0)) == "the cat sat on the mat"
    assert cli_main(["prepare", str(files[0]), "-t", str(tok_path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'bpe'" in err and "--overwrite" in err


# ---------------------------------------------------------------------------- word starts
WORDY = [
    "unbelievably, the quickest foxes weren't jumping over lazy dogs",
    "tokenization splits rare words into pieces",
    "",
    "an Über-naïve café: 3.14 apples & 12,000 oranges!",
    "我们在北京大学学习 machine learning",
]


def _starts_from_word_ids(tok, lines):
    out = []
    for line in lines:
        w = tok.word_ids(line.strip())
        if w:
            out.append([True] + [a != b for a, b in zip(w[1:], w[:-1])])
    return np.concatenate(out)


@pytest.fixture(scope="module")
def wordy(tmp_path_factory):
    root = tmp_path_factory.mktemp("wordy")
    path = root / "w.txt"
    path.write_text("\n".join(WORDY * 3) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram", "char", "word"])
def test_word_starts_match_word_ids_with_any_worker_count(kind, wordy, tmp_path):
    tok = Tokenizer.train([wordy], kind, 90 if kind != "word" else 40, min_frequency=1)
    lines = wordy.read_text(encoding="utf-8").split("\n")
    expected = _starts_from_word_ids(tok, [line for line in lines if line.strip()])
    one = prepare([wordy], tok, tmp_path / "one", workers=1, progress=False)
    two = prepare([wordy], tok, tmp_path / "two", workers=2, chunk_bytes=16, progress=False)  # many chunks
    for c in (one, two):
        assert c.word_starts is not None and len(c.word_starts) == c.n_tokens
        np.testing.assert_array_equal(np.asarray(c.word_starts), expected)
        assert (tmp_path / "one" / "word_starts.bin").stat().st_size == (c.n_tokens + 7) // 8  # one bit a token
    assert c.word_starts[c.sentences[:-1]].all()  # every sentence begins with a word
    if kind == "wordpiece":  # a WordPiece word start is exactly "not a ## continuation"
        pieces = [tok.id_to_token(int(i)) for i in one.tokens]
        np.testing.assert_array_equal(np.asarray(one.word_starts), [not p.startswith("##") for p in pieces])
    # slices and gathers read the packed bits like an array
    np.testing.assert_array_equal(one.word_starts[5:23], expected[5:23])
    idx = np.array([[0, 7, 9], [len(expected) - 1, 3, 8]])
    np.testing.assert_array_equal(one.word_starts[idx], expected[idx])


def _pairs_of_cjk(text: str) -> np.ndarray:
    """A toy segmenter: CJK characters pair up into two-character words; other text is one
    word per whitespace-separated run."""
    starts, i = [], 0
    while i < len(text):
        starts.append(i)
        if "\u4e00" <= text[i] <= "\u9fff":
            i += 2 if i + 1 < len(text) and "\u4e00" <= text[i + 1] <= "\u9fff" else 1
        else:
            j = i
            while j < len(text) and not ("\u4e00" <= text[j] <= "\u9fff") and not text[j].isspace():
                j += 1
            i = max(j, i + 1) if not text[i].isspace() else i + 1
    return np.array(starts)


def test_word_segmenter_refines_word_starts(tmp_path):
    text = tmp_path / "zh.txt"
    text.write_text("我们在北京大学学习 machine learning\n北京 欢迎你\n", encoding="utf-8")
    tok = Tokenizer.train([text], "wordpiece", 80, min_frequency=1)
    plain = prepare([text], tok, tmp_path / "plain", workers=1, progress=False)
    seg = prepare([text], tok, tmp_path / "seg", workers=2, chunk_bytes=8, progress=False, segmenter=_pairs_of_cjk)
    pieces = [tok.id_to_token(int(i)) for i in seg.tokens]
    assert pieces[:8] == list("我们在北京大学学")
    assert np.asarray(plain.word_starts)[:8].all()  # WordPiece: every CJK character is a word
    # pairs: 我们 / 在北 / 京大 / 学学 / 习; the English words keep their WordPiece starts
    np.testing.assert_array_equal(np.asarray(seg.word_starts)[:9], [1, 0, 1, 0, 1, 0, 1, 0, 1])
    english = [i for i, p in enumerate(pieces) if p.isascii()]
    np.testing.assert_array_equal(np.asarray(seg.word_starts)[english], np.asarray(plain.word_starts)[english])
    assert seg.meta["word_segmenter"] != plain.meta["word_segmenter"] is None
    with pytest.raises(PtmError, match="did you mean 'jieba'"):
        prepare([text], tok, tmp_path / "bad", workers=1, progress=False, segmenter="jeiba")


def test_jieba_segmenter(tmp_path):
    pytest.importorskip("jieba")
    text = tmp_path / "zh.txt"
    text.write_text("我们在北京大学学习\n", encoding="utf-8")
    tok = Tokenizer.train([text], "wordpiece", 40, min_frequency=1)
    c = prepare([text], tok, tmp_path / "c", workers=1, progress=False, segmenter="jieba")
    # jieba: 我们 / 在 / 北京大学 / 学习
    np.testing.assert_array_equal(np.asarray(c.word_starts), [1, 0, 1, 1, 0, 0, 0, 1, 0])
    assert c.meta["word_segmenter"] == "jieba"


def test_corpus_without_word_starts_opens_and_damage_is_caught(files, tok, tmp_path):
    out = tmp_path / "c"
    prepare(files, tok[0], out, workers=1, progress=False)
    bits = (out / "word_starts.bin").read_bytes()
    (out / "word_starts.bin").write_bytes(bits[:-1])
    with pytest.raises(PtmError, match="word_starts.bin.*truncated"):
        Corpus.open(out)
    (out / "word_starts.bin").unlink()
    with pytest.raises(PtmError, match="word_starts.bin is missing"):
        Corpus.open(out)
    # a corpus prepared before word starts were recorded: no file, no meta key
    meta = json.loads((out / "meta.json").read_text())
    del meta["word_starts"], meta["word_segmenter"]
    (out / "meta.json").write_text(json.dumps(meta))
    old = Corpus.open(out)
    assert old.word_starts is None and old.n_tokens > 0


def test_word_starts_are_written_in_bounded_memory(tmp_path):
    """Peak Python memory of prepare does not grow with the corpus: 4x the text, same peak."""
    import tracemalloc

    rng = np.random.default_rng(0)
    words = np.array("the cat sat on a mat while unbelievable foxes jumped over lazy dogs".split())
    line = lambda: " ".join(rng.choice(words, size=12))  # noqa: E731
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    lines = [line() for _ in range(2000)]
    small.write_text("\n".join(lines) + "\n")
    big.write_text("\n".join(lines * 4) + "\n")
    tok = Tokenizer.train([small], "wordpiece", 60, min_frequency=1)
    peaks, sizes = [], []
    for i, path in enumerate((small, big)):
        tracemalloc.start()
        c = prepare([path], tok, tmp_path / f"c{i}", workers=1, chunk_bytes=16 << 10, progress=False)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        sizes.append(c.n_tokens)
        assert len(c.word_starts) == c.n_tokens
    print(peaks, sizes)
    # any per-token array of the whole corpus (even one byte a token) would add >= 3 x small's tokens
    assert peaks[1] - peaks[0] < (sizes[1] - sizes[0]) / 2, (peaks, sizes)
    small_bits = np.asarray(Corpus.open(tmp_path / "c0").word_starts)
    np.testing.assert_array_equal(np.asarray(c.word_starts)[: len(small_bits)], small_bits)


def test_text_the_tokenizer_does_not_cover_is_flagged_with_its_unknown_rate(tmp_path, caplog):
    """Chinese text through a tokenizer trained on English only: a warning gives the [UNK] rate and
    the fix; meta.json records the count."""
    (tmp_path / "en.txt").write_text("the cat sat on the mat\na dog ran in the park\n" * 20, encoding="utf-8")
    tok = Tokenizer.train([tmp_path / "en.txt"], kind="wordpiece", vocab_size=60, min_frequency=1)
    (tmp_path / "zh.txt").write_text("我们今天去公园散步\n天气很好\nthe cat\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="ptmkit.data.prepare"):
        corpus = prepare([tmp_path / "zh.txt"], tok, tmp_path / "zh", workers=1, progress=False)
    meta = json.loads((tmp_path / "zh" / "meta.json").read_text())
    n = len(corpus.tokens)
    assert meta["unk_tokens"] == int((np.asarray(corpus.tokens) == tok.unk_id).sum()) and meta["unk_tokens"] >= 13
    (message,) = [r.getMessage() for r in caplog.records if "[UNK]" in r.getMessage()]
    assert f"{100 * meta['unk_tokens'] / n:.1f}% of the tokens" in message and "ptm tokenizer train" in message
    caplog.clear()
    with caplog.at_level("WARNING", logger="ptmkit.data.prepare"):
        prepare([tmp_path / "en.txt"], tok, tmp_path / "en", workers=1, progress=False)
    assert not any("[UNK]" in r.getMessage() for r in caplog.records)  # covered text: no warning
