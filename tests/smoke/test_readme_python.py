"""Every Python block of the README runs as written, in a fresh directory holding the text files
it names (``corpus.txt``, ``text.txt``).  A built-in task a block loads is replaced by a small
task of the same shape (two labels, train / dev / test), so that the block runs in seconds and
needs no data download."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import write_corpus

import ptmkit
from ptmkit.data.tasks import TaskData, TaskSplit

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)


def toy_task(name: str) -> TaskData:
    rng = np.random.default_rng(0)

    def split(n: int) -> TaskSplit:
        y = rng.integers(0, 2, n)
        return TaskSplit([("a charming film " if v else "a dull plot ") + "today" for v in y], y)

    return TaskData(name, [0, 1], split(32), split(16), split(16))


def test_the_readme_has_python_blocks():
    assert BLOCKS


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_a_readme_python_block_runs_as_written(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # one-sentence documents: short examples, and the 128 that bert-tiny's batch needs
    write_corpus(tmp_path / "corpus.txt", docs=300, sentences=1)
    words = ("man", "king", "woman", "queen", "boy", "girl", "prince", "princess", "rules", "walks", "the", "a")
    write_corpus(tmp_path / "text.txt", docs=50, words=words)
    monkeypatch.setattr(ptmkit, "load_task", lambda name, *args, **kwargs: toy_task(name))
    exec(compile(block, "README.md", "exec"), {"__name__": "__readme__"})
