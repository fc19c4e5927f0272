"""word2vec text/binary and GloVe formats: round trips with gensim, bit-exact for binary."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit.errors import PtmError
from ptmkit.interop.word2vec_format import detect_format, read_vectors
from ptmkit.static.vectors import WordVectors

gensim = pytest.importorskip("gensim")
from gensim.models import KeyedVectors  # noqa: E402


@pytest.fixture
def wv() -> WordVectors:
    rng = np.random.default_rng(0)
    words = ["the", "de", "naïve", "東京", "x1", "Z"] + [f"w{i}" for i in range(50)]
    return WordVectors(words, rng.standard_normal((len(words), 13)).astype(np.float32) * 3)


def test_binary_round_trip_with_gensim_bit_exact(wv, tmp_path):
    ours = tmp_path / "ours.bin"
    wv.save(ours)
    kv = KeyedVectors.load_word2vec_format(str(ours), binary=True)
    assert kv.index_to_key == wv.words
    assert np.array_equal(kv.vectors.view(np.uint32), wv.vectors.view(np.uint32))
    theirs = tmp_path / "theirs.bin"
    kv.save_word2vec_format(str(theirs), binary=True)
    assert theirs.read_bytes() == ours.read_bytes()  # byte-identical files
    back = WordVectors.load(theirs)
    assert back.words == wv.words and np.array_equal(back.vectors.view(np.uint32), wv.vectors.view(np.uint32))


def test_binary_with_newlines_after_vectors(wv, tmp_path):
    """word2vec.c writes a newline after every binary vector."""
    path = tmp_path / "c.bin"
    parts = [f"{len(wv)} {wv.dim}\n".encode()]
    parts += [w.encode() + b" " + v.astype("<f4").tobytes() + b"\n" for w, v in zip(wv.words, wv.vectors)]
    path.write_bytes(b"".join(parts))
    back = WordVectors.load(path)
    assert back.words == wv.words and np.array_equal(back.vectors, wv.vectors)


def test_text_round_trip_with_gensim(wv, tmp_path):
    ours = tmp_path / "ours.txt"
    wv.save(ours, format="word2vec")
    assert detect_format(ours) == "word2vec"
    kv = KeyedVectors.load_word2vec_format(str(ours), binary=False)
    assert kv.index_to_key == wv.words and np.array_equal(kv.vectors, wv.vectors)  # %.9g is exact for float32
    theirs = tmp_path / "theirs.txt"
    kv.save_word2vec_format(str(theirs), binary=False)
    back = WordVectors.load(theirs)
    assert back.words == wv.words and np.array_equal(back.vectors, wv.vectors)


def test_glove_round_trip(wv, tmp_path):
    path = tmp_path / "glove.txt"
    wv.save(path, format="glove")
    assert detect_format(path) == "glove"
    kv = KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=True)
    assert kv.index_to_key == wv.words and np.array_equal(kv.vectors, wv.vectors)
    back = WordVectors.load(path)
    assert back.words == wv.words and np.array_equal(back.vectors, wv.vectors)


def test_wrong_format_files(wv, tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(PtmError, match="not a word-vectors file"):
        WordVectors.load(junk)
    ours = tmp_path / "ours.bin"
    wv.save(ours)
    truncated = tmp_path / "trunc.bin"
    truncated.write_bytes(ours.read_bytes()[:-7])
    with pytest.raises(PtmError, match="truncated"):
        WordVectors.load(truncated)
    short = tmp_path / "short.txt"
    short.write_text("3 4\na 1 2 3 4\nb 1 2 3\nc 1 2 3 4\n")
    with pytest.raises(PtmError, match="line 3"):
        read_vectors(short)
    missing_rows = tmp_path / "rows.txt"
    missing_rows.write_text("5 2\na 1 2\n")
    with pytest.raises(PtmError, match="announces 5"):
        read_vectors(missing_rows)
    with pytest.raises(PtmError, match="not found"):
        WordVectors.load(tmp_path / "nope.bin")
    with pytest.raises(PtmError, match="unknown vectors format"):
        WordVectors.load(ours, format="fasttext-bin")


def test_save_never_overwrites(wv, tmp_path):
    path = tmp_path / "v.bin"
    wv.save(path)
    before = path.read_bytes()
    with pytest.raises(PtmError, match="exists"):
        wv.save(path, format="word2vec")
    assert path.read_bytes() == before
    wv.save(path, format="word2vec", overwrite=True)
    assert detect_format(path) == "word2vec"
    with pytest.raises(PtmError, match="whitespace"):
        WordVectors(["a b"], np.zeros((1, 2), np.float32)).save(tmp_path / "ws.bin")
