"""Quiet logs: when the output is not a terminal every progress display prints sparse lines (at
most one per 5 % of a stage, none longer than 200 characters, no carriage returns), as
``make demo > log 2>&1`` writes them; ``--quiet`` silences them and the info logging, after the
sub-command as before it."""

from __future__ import annotations

import io
import logging
import random
import re

import pytest
from conftest import TINY, W2V, write_corpus

from ptmkit import verbosity
from ptmkit.cli import main
from ptmkit.train.progress import MAX_LINE, LineProgress, progress, progress_iter

PROGRESS = re.compile(r"^(?P<stage>[^:]+): \S+/\S+.* \((?P<pct>\d+)%\) elapsed ")


@pytest.fixture(autouse=True)
def loud():
    verbosity.set_quiet(False)
    yield
    verbosity.set_quiet(False)


def stages(log: str) -> dict[str, list[int]]:
    """Progress lines by stage: the percentages each printed."""
    out: dict[str, list[int]] = {}
    for line in log.splitlines():
        m = PROGRESS.match(line)
        if m:
            out.setdefault(m["stage"], []).append(int(m["pct"]))
    return out


def assert_sparse(log: str) -> dict[str, list[int]]:
    assert "\r" not in log
    assert max(len(line) for line in log.splitlines()) <= MAX_LINE
    found = stages(log)
    for stage, pcts in found.items():
        assert len(pcts) <= 20 and pcts == sorted(pcts), (stage, pcts)
    return found


def test_line_progress_prints_at_most_one_line_per_five_percent():
    rng = random.Random(0)
    for total in (7, 30, 1000, 123_457):
        stream = io.StringIO()
        bar = LineProgress(total, desc="x" * 300, stream=stream, unit="w", unit_scale=True)
        n = 0
        while n < total:
            k = min(total - n, rng.choice([1, 1, 2, total // 50 + 1, total // 7 + 1]))
            n += k
            bar.set_postfix(alpha="0." + "9" * 400)  # long values are cut, not wrapped
            bar.update(k)
        bar.close()
        lines = stream.getvalue().splitlines()
        assert 1 <= len(lines) <= 20 and all(len(line) <= MAX_LINE for line in lines), (total, len(lines))
    stream = io.StringIO()
    bar = LineProgress(1000, desc="co-occurrence", stream=stream)
    for pos in range(0, 1001, 3):  # a count set directly, then refreshed (the co-occurrence pass)
        bar.n = pos
        bar.refresh()
    bar.close()
    assert 1 <= len(stream.getvalue().splitlines()) <= 20


def test_iterating_prints_sparse_lines_with_the_item_shown(capsys):
    capsys.readouterr()
    items = list(progress_iter(range(100), 100, "english-mix", "source", postfix=lambda i: {"source": f"s{i}"}))
    err = capsys.readouterr().err
    assert items == list(range(100))
    assert stages(err) == {"english-mix": list(range(5, 101, 5))} and "source=s99" in err.splitlines()[-1]


def test_word2vec_stage_writes_sparse_lines_to_a_log(tmp_path, capsys):
    text = write_corpus(tmp_path / "text.txt", docs=400, sentences=10)
    capsys.readouterr()
    assert main(["pretrain", "word2vec", "--data", str(text), "-o", str(tmp_path / "w2v"),
                 *[w.replace("epochs=1", "epochs=5") for w in W2V]]) == 0
    log = "".join(capsys.readouterr())
    found = assert_sparse(log)
    assert any(stage.startswith("word2vec") for stage in found), log[:500]


def test_pretraining_and_preparation_write_sparse_lines(tmp_path, capsys):
    text = write_corpus(tmp_path / "text.txt", docs=30)
    capsys.readouterr()
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(tmp_path / "run"), *TINY,
                 "train.max_steps=40", "train.log_every=1"]) == 0
    found = assert_sparse("".join(capsys.readouterr()))
    assert {"train", "prepare"} <= set(found) and found["train"][-1] == 100


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_silences_progress_and_info(tmp_path, capsys, where):
    text = write_corpus(tmp_path / "text.txt", docs=30)
    argv = ["pretrain", "word2vec", "--data", str(text), "-o", str(tmp_path / "w2v"), *W2V]
    argv = ["--quiet", *argv] if where == "before" else [*argv, "--quiet"]
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert not stages(err) and " INFO " not in err
    assert logging.getLogger("ptmkit").getEffectiveLevel() >= logging.WARNING or logging.root.level >= logging.WARNING
    assert not verbosity.quiet()  # main() gives the process back as it was
    verbosity.set_quiet(True)
    assert isinstance(progress(10), type(progress(10, disable=True)))  # every display is silent


def test_quiet_and_verbose_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["--quiet", "runs", ".", "--verbose"])
    assert "exclude each other" in capsys.readouterr().err
