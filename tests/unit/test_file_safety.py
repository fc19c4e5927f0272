"""The file-safety properties every writing command shares (docs/outputs.md), each on the
smallest case that shows it:

* names from data become path parts only through ``fileio.path_part``;
* every file and directory ptm creates gets the umask's mode, atomic writes included, and
  ``--private`` makes them 600 / 700;
* a file is ptm's only if ptm recorded it when it wrote it: not because it was found in one of
  ptm's directories after a kill or a failed command;
* a marker that cannot be read, or names a path outside its directory, is refused, and a
  failed ``--overwrite`` leaves the marker exactly as it was;
* a record that cannot be read (a run's inputs, a corpus's sources, a finished fine-tuning's
  results) is never taken as "no constraint".
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY, checksums, run_cli, write_corpus

from ptmkit import fileio, outputs
from ptmkit.errors import PtmError


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def manifest(d: Path) -> dict:
    return json.loads((d / outputs.MARKER).read_text())


@pytest.fixture
def umask():
    """Set the process umask for one test (restored after)."""
    old = os.umask(0o022)
    yield lambda m: os.umask(m)
    os.umask(old)


# ---------------------------------------------------------------------------------- path parts


@pytest.mark.parametrize("name, why", [
    ("..", "is not a name"), (".", "is not a name"), ("", "is not a name"), ("a/b", "path separator"),
    ("/etc", "path separator"), ("a\\b", "path separator"), ("a\0b", "control character"),
    ("x" * 256, "longer than 255 bytes"), ("é" * 128, "longer than 255 bytes"),
    (".ptmkit-output.json", "bookkeeping"), (".tmp-x", "bookkeeping"),
])
def test_a_name_from_data_that_cannot_be_a_path_part_is_refused(name, why):
    with pytest.raises(PtmError, match=f"the model label .* cannot name a file or directory: it .*{why}"):
        fileio.path_part(name, "model label")


def test_ordinary_names_pass_and_case_twins_are_refused():
    for name in ("bert-tiny", "run 1", "モデル", "a.b+c", "x" * 255):
        assert fileio.path_part(name) == name
    with pytest.raises(PtmError, match="differ only by case"):
        fileio.distinct_parts(["Bert", "bert"], "model label")


def test_a_model_label_is_the_resolved_name_of_dot_and_dot_dot(tmp_path, monkeypatch):
    (tmp_path / "run" / "work").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "run" / "work")
    label = fileio.path_label
    assert label("..") == "run" and label(".") == "work" and label("../") == "run" and label("/") == "model"


# ---------------------------------------------------------------------------------- modes


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_every_writer_gives_the_umask_mode(tmp_path, umask, mask):
    umask(mask)
    out = tmp_path / "out"
    with outputs.writing(out, "run"):
        fileio.atomic_write_text(out / "config.json", "{}")
        fileio.append_text(out / "metrics.jsonl", "{}\n")
        with fileio.atomic_dir(out / "checkpoints" / "step-0000001") as tmp:
            (tmp / "model.safetensors").write_bytes(b"w")
    for p in [out, *out.rglob("*")]:
        want = (0o777 if p.is_dir() else 0o666) & ~mask
        assert mode(p) == want, (p, oct(mode(p)), oct(want))


def test_private_makes_a_run_readable_by_its_owner_alone(tmp_path, capsys, umask):
    umask(0o022)
    corpus = write_corpus(tmp_path / "corpus.txt")
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", tmp_path / "run", "--private", *TINY], capsys)
    assert rc == 0, err
    made = [tmp_path / "run", *(tmp_path / "run").rglob("*")]
    assert {oct(mode(p)) for p in made if p.is_dir()} == {"0o700"}
    assert {oct(mode(p)) for p in made if p.is_file()} == {"0o600"}
    assert os.umask(0o022) == 0o022  # the command put the caller's umask back


# ---------------------------------------------------------------------------------- ownership


def test_a_users_file_in_a_seed_directory_survives_a_failed_overwrite_and_the_next_one(tmp_path):
    """A fine-tuning output with one seed; the user saves notes into the seed's directory; an
    --overwrite fails half-way (after removing ptm's files); the notes are not claimed, and a
    second --overwrite keeps them."""
    out = tmp_path / "ft"

    def run_once(fail: bool) -> None:
        with outputs.writing(out, "finetune", overwrite=True, names=["summary.json"]):
            outputs.clean(out)
            with outputs.writing(out / "pretrained-seed0", "finetune", overwrite=True):
                outputs.clean(out / "pretrained-seed0")
                if fail:
                    raise ValueError("the task's file is missing")
                fileio.atomic_write_text(out / "pretrained-seed0" / "results.json", "{}")
            fileio.atomic_write_text(out / "summary.json", "{}")

    run_once(fail=False)
    (out / "pretrained-seed0" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError):
        run_once(fail=True)
    assert "pretrained-seed0/notes.txt" not in manifest(out)["files"]
    run_once(fail=False)
    assert (out / "pretrained-seed0" / "notes.txt").read_text() == "mine"
    assert "notes.txt" not in manifest(out / "pretrained-seed0")["files"]


KILLED = """
import os, sys
from pathlib import Path
from ptmkit import fileio, outputs
out = Path(sys.argv[1])
with outputs.writing(out, "run"):
    with fileio.atomic_dir(out / "checkpoints" / "step-0000001") as tmp:
        (tmp / "model.safetensors").write_bytes(b"w")
    fileio.atomic_write_text(out / "checkpoints" / "latest", "step-0000001\\n")
    os.kill(os.getpid(), 9)
"""


def test_a_file_saved_into_checkpoints_after_a_kill_stays_the_users(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", KILLED, str(out)])
    assert proc.returncode == -9
    (out / "checkpoints" / "my-notes.txt").write_text("what I tried")
    with outputs.writing(out, "run", overwrite=True):
        assert sorted(outputs.clean(out)) == ["checkpoints"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["my-notes.txt"]
    assert list(manifest(out)["foreign"]) == ["checkpoints/my-notes.txt"]
    with outputs.writing(out, "run", overwrite=True):  # and the next overwrite again
        outputs.clean(out)
    assert (out / "checkpoints" / "my-notes.txt").read_text() == "what I tried"


@pytest.mark.parametrize("edit", [
    lambda m: {**m, "entries": [*m["entries"], "../victim"]},
    lambda m: {**m, "files": {**m["files"], "checkpoints/../../victim/data.txt": [4, 0]}},
    lambda m: {**m, "entries": ["/abs"]},
    lambda m: {**m, "files": {"/abs/x": [1, 1]}},
    lambda m: {**m, "files": {"other/x": [1, 1]}},  # under no entry
])
def test_a_marker_naming_a_path_outside_its_directory_is_refused(tmp_path, capsys, edit):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("keep")
    run = tmp_path / "run"
    with outputs.writing(run, "run"):
        fileio.atomic_write_text(run / "config.json", "{}")
        fileio.atomic_write_text(run / "checkpoints" / "latest", "step-0000001\n")
    (run / outputs.MARKER).write_text(json.dumps(edit(manifest(run))))
    before = checksums(tmp_path)
    with pytest.raises(PtmError, match=r"the marker .*\.ptmkit-output\.json is damaged .*changes nothing"):
        with outputs.writing(run, "run", overwrite=True):
            outputs.clean(run)
    corpus = write_corpus(tmp_path / "c" / "corpus.txt")
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", run, "--overwrite", *TINY], capsys)
    assert rc == 2 and "is damaged" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
    after = checksums(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("c/")} == before


def test_a_link_out_of_the_output_is_not_followed_by_overwrite(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.safetensors").write_bytes(b"w")  # same size as ptm's file below
    run = tmp_path / "run"
    with outputs.writing(run, "run"):
        fileio.atomic_write_bytes(run / "checkpoints" / "step-0000001" / "model.safetensors", b"w")
    st = os.stat(run / "checkpoints" / "step-0000001" / "model.safetensors")
    os.utime(victim / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
    import shutil

    shutil.rmtree(run / "checkpoints" / "step-0000001")
    (run / "checkpoints" / "step-0000001").symlink_to(victim)  # the directory replaced by a link
    with outputs.writing(run, "run", overwrite=True):
        outputs.clean(run)
    assert (victim / "model.safetensors").read_bytes() == b"w"
    assert (run / "checkpoints" / "step-0000001").is_symlink()  # the link is not ptm's either
    # a record that leads through the link is not followed either
    assert not outputs.Manifest.read(run).files and outputs.discard(run / "checkpoints" / "step-0000001") is None
    assert (victim / "model.safetensors").exists()


def test_an_unreadable_marker_is_refused_not_taken_for_no_marker(tmp_path):
    run = tmp_path / "run"
    with outputs.writing(run, "run"):
        fileio.atomic_write_text(run / "config.json", "{}")
    (run / outputs.MARKER).write_text('{"kind": "run", "ver')
    for call in (lambda: outputs.check(run, "run", overwrite=True), lambda: outputs.owner(run)):
        with pytest.raises(PtmError, match=r"\.ptmkit-output\.json is damaged \(unreadable"):
            call()


def test_a_failed_overwrite_leaves_the_marker_byte_for_byte(tmp_path):
    run = tmp_path / "run"
    with outputs.writing(run, "run"):
        fileio.atomic_write_text(run / "config.json", "{}")
        fileio.atomic_write_text(run / "metrics.jsonl", "{}\n")
    (run / "config.json").write_text('{"edited": true}')  # changed by the user: --overwrite refuses
    before = (run / outputs.MARKER).read_bytes()
    with pytest.raises(PtmError, match="config.json changed since ptm wrote it"):
        with outputs.writing(run, "run", overwrite=True):
            outputs.clean(run)
    assert (run / outputs.MARKER).read_bytes() == before
    assert not (run / outputs.JOURNAL).exists() and not (run / outputs.LOCK).exists()


def test_a_failed_command_removes_only_what_it_wrote_from_the_entries_it_created(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ValueError):
        with outputs.writing(run / "sub", "run"):
            fileio.atomic_write_text(run / "sub" / "checkpoints" / "latest", "x")
            (run / "sub" / "checkpoints" / "mine.txt").write_text("saved while it ran")
            raise ValueError
    assert sorted(checksums(run)) == ["sub/.ptmkit-output.json", "sub/checkpoints/mine.txt"]
    m = manifest(run / "sub")
    assert m["files"] == {} and list(m["foreign"]) == ["checkpoints/mine.txt"] and "open" not in m


# ---------------------------------------------------------------------------------- records


def test_resume_refuses_a_run_whose_input_record_is_missing_or_damaged(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    run = tmp_path / "run"
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", run, *TINY], capsys)
    assert rc == 0, err
    more = [a if not a.startswith("train.max_steps") else "train.max_steps=4" for a in TINY]
    for damage, fragment in ((lambda: (run / "inputs.json").unlink(), "inputs.json is missing"),
                             (lambda: (run / "data" / "meta.json").write_text("{"), "meta.json cannot be read")):
        saved = {p: p.read_bytes() for p in (run / "inputs.json", run / "data" / "meta.json")}
        damage()
        rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", run, "--resume", *more], capsys)
        assert rc == 2 and fragment in err and "Traceback" not in err, err
        for p, b in saved.items():
            p.write_bytes(b)
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", run, "--resume", *more], capsys)
    assert rc == 0, err


def test_a_damaged_record_is_an_error_naming_it():
    with pytest.raises(PtmError, match=r"results.json is missing; resume"):
        fileio.read_record(Path("/nonexistent/results.json"), "resume")
    assert fileio.read_record(Path("/nonexistent/results.json"), "x", missing_ok=True) is None
