"""The static models' encoded-corpus cache is keyed by the text's content, never by its stat."""

from __future__ import annotations

import hashlib
import os

import numpy as np

from ptmkit.static import vocab as vocab_mod
from ptmkit.static.vocab import cache_root, content_digest, load_corpus


def test_same_size_rewrite_with_the_mtime_restored_gets_a_new_vocabulary(tmp_path, monkeypatch):
    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path / "home"))
    f = tmp_path / "c.txt"
    f.write_text("cat sat mat\ncat sat\n")
    st = f.stat()
    v1, c1 = load_corpus(f, min_count=1)
    assert v1.words == ["cat", "sat", "mat"] and len(list(cache_root().iterdir())) == 1
    f.write_text("dog ran rug\ndog ran\n")  # same byte size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # cp -p, touch -r, a restore
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    v2, c2 = load_corpus(f, min_count=1)
    assert v2.words == ["dog", "ran", "rug"] and len(list(cache_root().iterdir())) == 2
    assert np.array_equal(c1.ids, c2.ids)  # same shape of text, other words


def test_the_same_text_elsewhere_shares_the_entry_and_settings_do_not(tmp_path, monkeypatch):
    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path / "home"))
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("x y x\ny z\n")
    b.write_bytes(a.read_bytes())
    load_corpus(a, min_count=1)
    assert load_corpus(b, min_count=1)[0].words == ["x", "y", "z"]
    assert len(list(cache_root().iterdir())) == 1  # keyed by content, not path
    load_corpus(b, min_count=2)
    assert len(list(cache_root().iterdir())) == 2


def test_content_digest_is_blake2b_of_the_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(vocab_mod, "HASH_BLOCK", 7)  # several blocks, the last one short
    f = tmp_path / "t.txt"
    f.write_bytes(b"some text that spans several blocks\n" * 3)
    assert content_digest(f) == hashlib.blake2b(f.read_bytes(), digest_size=32).hexdigest()


def test_a_damaged_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path / "home"))
    f = tmp_path / "c.txt"
    f.write_text("a b a\nb c\n")
    v1, c1 = load_corpus(f, min_count=1)
    (entry,) = cache_root().iterdir()
    np.save(entry / "counts.npy", v1.counts[:-1])  # one word fewer than words.txt
    v2, c2 = load_corpus(f, min_count=1)
    assert v2.words == v1.words and v2.counts.tolist() == v1.counts.tolist()
    np.save(entry / "ids.npy", np.array([0, 7, 1, 0, 2], dtype=np.int32))  # an id past the vocabulary
    assert load_corpus(f, min_count=1)[1].ids.tolist() == c1.ids.tolist()
    (entry / "sentences.npy").write_bytes(b"\x93NUMPY garbage")
    assert load_corpus(f, min_count=1)[1].sentences.tolist() == c1.sentences.tolist()
