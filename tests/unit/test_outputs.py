"""``ptmkit.outputs`` (which directories ptm may write, what --overwrite removes) and
``ptmkit.fileio`` (atomic writes, staged outputs, disk-full errors)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest
from conftest import look_alikes

from ptmkit import fileio, outputs
from ptmkit.errors import PtmError


def put(path, data="{}"):
    """A file written as ptm writes one (atomically, recorded in the output that holds it)."""
    return fileio.atomic_write_bytes(path, data.encode() if isinstance(data, str) else data)


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---------------------------------------------------------------------------------- check / writing


def manifest(d):
    return json.loads((d / outputs.MARKER).read_text())


def test_new_empty_and_own_directories_are_accepted(tmp_path):
    assert outputs.check(tmp_path / "new", "corpus") == "new"
    (tmp_path / "empty").mkdir()
    assert outputs.check(tmp_path / "empty", "corpus") == "empty"
    run = tmp_path / "run"
    with outputs.writing(run, "run") as session:
        assert session.state == "new"
        put(run / "metrics.jsonl", "{}\n")
    assert outputs.owner(run) == "run"
    assert manifest(run)["files"] == {"metrics.jsonl": [3, (run / "metrics.jsonl").stat().st_mtime_ns]}
    assert outputs.check(run, "run", reuse=True) == "own"
    assert outputs.check(run, "run", overwrite=True) == "own"
    with pytest.raises(PtmError, match="already holds a pre-training run; pass --overwrite"):
        outputs.check(run, "run")
    assert not (run / outputs.LOCK).exists()  # released and removed


def test_foreign_and_other_kind_directories_are_refused_even_with_overwrite(tmp_path):
    foreign = tmp_path / "hf"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    with pytest.raises(PtmError, match=r"hf is not empty \(config.json\) and was not written by ptm") as info:
        outputs.check(foreign, "run", overwrite=True)
    assert "--overwrite" not in str(info.value)  # nothing invites deleting a user's files
    run = tmp_path / "run"
    with outputs.writing(run, "run"):
        put(run / "config.json")
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


def test_nothing_is_recognised_by_its_contents(tmp_path):
    for d in look_alikes(tmp_path).values():
        assert outputs.owner(d) is None and outputs.owned_entries(d) == []
        for kind in outputs.KINDS:
            with pytest.raises(PtmError, match="was not written by ptm"):
                outputs.check(d, kind, overwrite=True, reuse=True)


# ---------------------------------------------------------------------------------- clean / staged


def test_clean_removes_only_what_ptm_wrote(tmp_path):
    run = tmp_path / "run"
    with outputs.writing(run, "run"):
        put(run / "checkpoints" / "step-0000001" / "model.safetensors", b"w")
        put(run / "metrics.jsonl", "{}\n")
        with outputs.staged(run / "data", "corpus") as stage:
            (stage / "tokens.bin").write_bytes(b"\0\0")
    assert manifest(run)["entries"] == ["checkpoints", "data", "metrics.jsonl"]
    (run / "notes.txt").write_text("mine")
    (run / "data" / "readme.txt").write_text("also mine")
    (run / "checkpoints" / "my-plot.png").write_bytes(b"mine too")
    with outputs.writing(run, "run", overwrite=True):
        assert sorted(outputs.clean(run)) == ["checkpoints", "data", "metrics.jsonl"]
    # the prepared corpus keeps its marker (listing the user's file) so that it stays ptm's to write again
    assert tree(run) == [".ptmkit-output.json", "checkpoints", "checkpoints/my-plot.png", "data",
                         "data/.ptmkit-output.json", "data/readme.txt", "notes.txt"]
    assert manifest(run / "data")["files"] == {} and manifest(run / "data")["entries"] == []


def test_overwrite_stops_before_removing_anything_when_a_ptm_file_changed(tmp_path):
    out = tmp_path / "vec"
    with outputs.staged(out, "vectors") as stage:
        (stage / "vectors.bin").write_bytes(b"old")
        (stage / "vocab.txt").write_text("a 1\n")
    (out / "vocab.txt").write_text("a 1\nb 2\n")  # edited by hand
    with pytest.raises(PtmError, match=r"vocab.txt changed since ptm wrote it.*move it away"):
        with outputs.staged(out, "vectors", overwrite=True) as stage:
            (stage / "vectors.bin").write_bytes(b"new")
    assert (out / "vectors.bin").read_bytes() == b"old" and (out / "vocab.txt").read_text() == "a 1\nb 2\n"


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
    m = manifest(out)
    assert m["kind"] == "vectors" and m["entries"] == ["vectors.bin"] and list(m["files"]) == ["vectors.bin"]
    assert "open" not in m


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


def test_failure_removes_only_what_this_command_created(tmp_path):
    """A failed command never removes a sibling's output or a user's notes that appeared in a
    directory it created."""
    exp = tmp_path / "exp"
    with outputs.writing(exp / "a", "run"):
        put(exp / "a" / "config.json")
    with pytest.raises(ValueError):
        with outputs.writing(exp / "b", "run"):
            put(exp / "b" / "config.json")
            raise ValueError
    assert tree(exp) == ["a", "a/.ptmkit-output.json", "a/config.json"]
    with pytest.raises(KeyboardInterrupt):
        with outputs.staged(tmp_path / "newproj" / "corpus", "corpus") as stage:
            (tmp_path / "newproj" / "notes.md").write_text("my notes")  # written while the command ran
            (stage / "tokens.bin").write_bytes(b"x")
            raise KeyboardInterrupt
    assert tree(tmp_path / "newproj") == ["notes.md"]
    kept = tmp_path / "kept"
    with pytest.raises(ValueError):
        with outputs.writing(kept, "run", keep=lambda: True):
            (kept / "checkpoints").mkdir()
            raise ValueError
    assert (kept / "checkpoints").is_dir() and outputs.owner(kept) == "run"


def test_staged_into_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with outputs.staged(".", "export") as stage:
        (stage / "config.json").write_text("{}")
    assert tree(tmp_path) == [".ptmkit-output.json", "config.json"]
    assert outputs.owner(".") == "export"


def test_an_entry_in_the_way_is_refused(tmp_path):
    run = tmp_path / "run"
    with outputs.writing(run, "run"):
        pass
    (run / "checkpoints").mkdir()  # not ptm's
    (run / "checkpoints" / "mine.txt").write_text("x")
    with pytest.raises(PtmError, match=r"checkpoints exists and was not written by ptm"):
        with outputs.writing(run, "run", reuse=True):
            pass
    assert (run / "checkpoints" / "mine.txt").read_text() == "x"


# ---------------------------------------------------------------------------------- lock, kill


LOCK_HOLDER = """
import sys, time
from pathlib import Path
from ptmkit import fileio, outputs
out = Path(sys.argv[1])
with outputs.writing(out, "run"):
    with fileio.atomic_dir(out / "checkpoints" / "step-0000001") as tmp:
        (tmp / "model.safetensors").write_bytes(b"w" * 10)
    fileio.append_text(out / "metrics.jsonl", "{}")
    fileio.make_tmp_dir(out / "checkpoints")  # a checkpoint half-written when the kill comes
    print("ready", flush=True)
    time.sleep(60)
"""


def start_holder(out):
    proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_second_writer_is_refused_and_a_killed_one_releases_the_lock(tmp_path):
    out = tmp_path / "run"
    proc = start_holder(out)
    try:
        with pytest.raises(PtmError, match=rf"being written by another ptm process \(PID {proc.pid}: .*-c"):
            with outputs.writing(out, "run", reuse=True):
                pass
        with pytest.raises(PtmError, match="being written by another ptm process"):
            with outputs.staged(out / "data", "corpus"):  # inside it, a nested output waits its turn too
                pass
    finally:
        proc.kill()
        proc.wait()
    # killed mid-write: the next command adopts what its journal records (and removes its
    # temporaries), and --overwrite removes exactly that; files the user saved there stay
    (out / "notes.txt").write_text("mine")  # the user's, beside ptm's entries
    (out / "checkpoints" / "my-plot.png").write_text("mine too")  # inside one of ptm's directories
    with outputs.writing(out, "run", overwrite=True):
        removed = outputs.clean(out)
    assert sorted(removed) == ["checkpoints", "metrics.jsonl"]
    assert tree(out) == [".ptmkit-output.json", "checkpoints", "checkpoints/my-plot.png", "notes.txt"]
    assert list(manifest(out)["foreign"]) == ["checkpoints/my-plot.png"]


def test_a_marker_of_an_earlier_ptmkit_is_read_by_exact_names(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("step-0000001\n")
    (run / "lr-sweep-plan.md").write_text("mine")
    (run / outputs.MARKER).write_text(json.dumps({"kind": "run", "files": ["checkpoints", "lr-*", "config.json"]}))
    assert outputs.owner(run) == "run"
    with outputs.writing(run, "run", overwrite=True):
        assert outputs.clean(run) == ["checkpoints"]  # patterns are not ownership
    assert tree(run) == [".ptmkit-output.json", "lr-sweep-plan.md"]


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
