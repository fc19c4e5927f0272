"""``ptmkit.outputs`` (which directories ptm may write, what --overwrite removes) and
``ptmkit.fileio`` (atomic writes, staged outputs, disk-full errors)."""

from __future__ import annotations

import errno
import json

import pytest

from ptmkit import fileio, outputs
from ptmkit.errors import PtmError


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---------------------------------------------------------------------------------- check / claim


def test_new_empty_and_own_directories_are_accepted(tmp_path):
    assert outputs.check(tmp_path / "new", "corpus") == "new"
    (tmp_path / "empty").mkdir()
    assert outputs.check(tmp_path / "empty", "corpus") == "empty"
    run = outputs.claim(tmp_path / "run", "run")
    (run / "metrics.jsonl").write_text("{}\n")
    assert outputs.owner(run) == "run"
    assert outputs.check(run, "run", reuse=True) == "own"
    assert outputs.check(run, "run", overwrite=True) == "own"
    with pytest.raises(PtmError, match="already holds a pre-training run; pass --overwrite"):
        outputs.check(run, "run")


def test_foreign_and_other_kind_directories_are_refused_even_with_overwrite(tmp_path):
    foreign = tmp_path / "hf"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    with pytest.raises(PtmError, match=r"hf is not empty \(config.json\) and was not written by ptm"):
        outputs.check(foreign, "run", overwrite=True)
    run = outputs.claim(tmp_path / "run", "run")
    (run / "config.json").write_text("{}")
    with pytest.raises(PtmError, match="holds a pre-training run .* not a prepared corpus"):
        outputs.check(run, "corpus", overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(PtmError, match="not a directory"):
        outputs.check(tmp_path / "file", "vectors")


def test_inputs_inside_the_output_are_refused(tmp_path):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "in.txt").write_text("text\n")
    (tmp_path / "elsewhere.txt").write_text("text\n")
    (out / "link.txt").symlink_to(tmp_path / "elsewhere.txt")
    for inp in (out / "sub" / "in.txt", out, out / "link.txt"):
        with pytest.raises(PtmError, match="lies inside the output directory"):
            outputs.check(out, "vectors", inputs=[inp], overwrite=True)
    outputs.check_inputs(out, [tmp_path / "elsewhere.txt", tmp_path / "missing.txt", None])


def test_legacy_outputs_without_marker_are_recognised(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-0000002").mkdir(parents=True)
    assert outputs.owner(run) == "run"
    vec = tmp_path / "vec"
    vec.mkdir()
    (vec / "vectors.bin").write_bytes(b"1 1\n")
    (vec / "config.json").write_text(json.dumps({"static": "word2vec"}))
    (vec / "notes.txt").write_text("mine")
    assert outputs.owner(vec) == "vectors"
    assert sorted(p.name for p in outputs.owned_entries(vec)) == ["config.json", "vectors.bin"]


# ---------------------------------------------------------------------------------- clean / staged


def test_clean_removes_only_what_ptm_wrote(tmp_path):
    run = outputs.claim(tmp_path / "run", "run")
    (run / "checkpoints" / "step-0000001").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    (run / "notes.txt").write_text("mine")
    with outputs.staged(run / "data", "corpus") as stage:
        (stage / "tokens.bin").write_bytes(b"\0\0")
    (run / "data" / "readme.txt").write_text("also mine")
    assert sorted(outputs.clean(run)) == ["checkpoints", "data", "metrics.jsonl"]
    assert tree(run) == [".ptmkit-output.json", "data", "data/.ptmkit-output.json", "data/readme.txt", "notes.txt"]


def test_staged_publishes_only_on_success_and_keeps_user_files(tmp_path):
    out = tmp_path / "vec"
    with outputs.staged(out, "vectors") as stage:
        (stage / "vectors.bin").write_bytes(b"old")
        (stage / "vocab.txt").write_text("a 1\n")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError):
        with outputs.staged(out, "vectors", overwrite=True) as stage:
            (stage / "vectors.bin").write_bytes(b"half")
            raise RuntimeError("training broke")
    assert (out / "vectors.bin").read_bytes() == b"old" and (out / "vocab.txt").exists()
    with outputs.staged(out, "vectors", overwrite=True) as stage:
        (stage / "vectors.bin").write_bytes(b"new")
    assert tree(out) == [".ptmkit-output.json", "notes.txt", "vectors.bin"]  # old vocab.txt was ptm's
    assert (out / "vectors.bin").read_bytes() == b"new"
    assert json.loads((out / ".ptmkit-output.json").read_text()) == {"kind": "vectors", "files": ["vectors.bin"]}


def test_failed_staged_output_leaves_nothing(tmp_path):
    with pytest.raises(PtmError):
        with outputs.staged(tmp_path / "a" / "b" / "out", "corpus") as stage:
            (stage / "tokens.bin").write_bytes(b"x")
            raise PtmError("bad input")
    assert tree(tmp_path) == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(KeyboardInterrupt):
        with outputs.staged(tmp_path / "empty", "corpus"):
            raise KeyboardInterrupt
    assert tree(tmp_path) == ["empty"]


def test_staged_into_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with outputs.staged(".", "export") as stage:
        (stage / "config.json").write_text("{}")
    assert tree(tmp_path) == [".ptmkit-output.json", "config.json"]
    assert outputs.owner(".") == "export"


def test_undo_if_failed_removes_only_a_directory_it_created(tmp_path):
    with pytest.raises(ValueError):
        with outputs.undo_if_failed(tmp_path / "new" / "run"):
            outputs.claim(tmp_path / "new" / "run", "run")
            raise ValueError
    assert tree(tmp_path) == []
    kept = tmp_path / "kept"
    with pytest.raises(ValueError):
        with outputs.undo_if_failed(kept, keep=lambda: True):
            kept.mkdir()
            raise ValueError
    assert kept.is_dir()


# ---------------------------------------------------------------------------------- fileio


def test_atomic_write_and_dir(tmp_path):
    target = fileio.atomic_write_text(tmp_path / "sub" / "a.txt", "one")
    fileio.atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    final = tmp_path / "ck"
    with fileio.atomic_dir(final) as tmp:
        (tmp / "x").write_text("1")
    with pytest.raises(RuntimeError):
        with fileio.atomic_dir(final) as tmp:
            (tmp / "x").write_text("2")
            raise RuntimeError
    assert (final / "x").read_text() == "1"
    assert tree(tmp_path) == ["ck", "ck/x", "sub", "sub/a.txt"]


def test_disk_full_is_a_user_error_naming_the_path(tmp_path):
    final = tmp_path / "checkpoints" / "step-0000004"
    with pytest.raises(PtmError, match=r"could not write .*step-0000004: No space left on device; the disk is full"):
        with fileio.atomic_dir(final) as tmp:
            raise OSError(errno.ENOSPC, "No space left on device")
    # a file written inside the checkpoint fails: the message names the checkpoint, not a temp file
    with pytest.raises(PtmError, match=r"could not write .*step-0000005: No space left .*\(step-0000005 was not written\)") as info:
        with fileio.atomic_dir(final.with_name("step-0000005")) as tmp:
            raise fileio.write_error(OSError(errno.ENOSPC, "No space left on device"), tmp / "tokenizer.json")
    assert ".tmp-" not in str(info.value)
    # safetensors reports a full disk in its own exception type
    err = fileio.write_error(RuntimeError("I/O error: No space left on device (os error 28)"), final)
    assert err is not None and "disk is full" in str(err)
    assert fileio.write_error(RuntimeError("a bug"), final) is None
    assert fileio.write_error(OSError(errno.EBADF, "Bad file descriptor"), final) is None
    (tmp_path / "f").write_text("x")
    with pytest.raises(PtmError, match="f exists and is not a directory"):
        fileio.atomic_write_text(tmp_path / "f" / "g.txt", "y")
    with pytest.raises(PtmError, match="a component of the path is a file"):
        fileio.atomic_write_text(tmp_path / "f" / "g" / "h.txt", "y")
