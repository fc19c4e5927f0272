"""ptm prepare --memory-budget: a corpus ten times the budget is prepared under a hard memory limit
of the budget (which the unbounded path breaks at once), the processes' measured peak stays within
it, and bad budgets, too small budgets and lines too long for the budget are refused clearly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ptmkit.cli import main as cli_main
from ptmkit.data import memory
from ptmkit.data.corpus import Corpus
from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError
from ptmkit.tokenization import Tokenizer

LINUX = sys.platform.startswith("linux") and Path("/proc/self/status").is_file()
BUDGET = "2.5M"

# Runs `ptm prepare` twice in one process: a warm-up on a few lines (the same code paths, the
# encoder's threads), then, under RLIMIT_DATA = the data segment now + the budget, the big corpus.
# RLIMIT_DATA counts every private writable mapping (malloc, numpy, the Rust encoder), so memory
# that grew with the text beyond the budget fails the run (MemoryError, or an abort in Rust).
DRIVER = r"""
import json, resource, sys
from ptmkit.cli import main
tiny, big, tok, out, budget, limit = sys.argv[1:7]
extra = [] if budget == "none" else ["--memory-budget", budget]
assert main(["-q", "prepare", tiny, "-t", tok, "-o", out + "-warm", "--workers", "1", *extra]) == 0
data = int(next(l for l in open("/proc/self/status") if l.startswith("VmData")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_DATA, (data + int(limit), data + int(limit)))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rc = main(["-q", "prepare", big, "-t", tok, "-o", out, "--workers", "1", *extra])
growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"rc": rc, "peak_growth": growth}))
"""


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """A word tokenizer (the fastest encoder), a few lines, and a corpus > 10x BUDGET: one synthetic
    block of sentences repeated."""
    root = tmp_path_factory.mktemp("mem")
    rng = np.random.default_rng(0)
    words = np.array("the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split())
    lines = [" ".join(rng.choice(words, size=rng.integers(20, 60))) for _ in range(400)]
    block = ("\n".join(lines[:200]) + "\n\n" + "\n".join(lines[200:]) + "\n\n").encode()
    big = root / "big.txt"
    need = 10 * memory.parse_size(BUDGET) + 1
    with open(big, "wb") as f:
        for _ in range(-(-need // len(block))):
            f.write(block)
    (root / "block.txt").write_bytes(block)
    tiny = root / "tiny.txt"
    tiny.write_text("\n".join(lines[:5]) + "\n")
    tok = Tokenizer.train([tiny], "word", 40, min_frequency=1)
    tok_path = root / "tok.json"
    tok.save(tok_path)
    return tiny, big, tok_path


def _limited(texts, tmp_path, budget: str) -> subprocess.CompletedProcess:
    tiny, big, tok = texts
    limit = memory.parse_size(BUDGET)
    return subprocess.run([sys.executable, "-c", DRIVER, str(tiny), str(big), str(tok), str(tmp_path / "out"), budget,
                           str(limit)], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not LINUX, reason="RLIMIT_DATA and /proc/self/status are Linux's")
def test_corpus_ten_times_the_budget_prepares_under_a_hard_limit_of_the_budget(texts, tmp_path):
    tiny, big, tok = texts
    assert big.stat().st_size >= 10 * memory.parse_size(BUDGET)
    done = _limited(texts, tmp_path, BUDGET)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rc"] == 0
    assert result["peak_growth"] <= memory.parse_size(BUDGET), result  # the kernel's high-water mark
    corpus = Corpus.open(tmp_path / "out")
    one = prepare([big.parent / "block.txt"], tok, tmp_path / "one", workers=1, progress=False)
    reps = big.stat().st_size // (big.parent / "block.txt").stat().st_size
    assert (corpus.n_tokens, corpus.n_documents) == (reps * one.n_tokens, reps * one.n_documents)
    np.testing.assert_array_equal(corpus.tokens[-one.n_tokens:], one.tokens)


@pytest.mark.skipif(not LINUX, reason="RLIMIT_DATA is Linux's")
def test_the_limit_bites_without_the_budget(texts, tmp_path):
    """The same limit without --memory-budget (blocks of 1 MiB): the first block already needs more."""
    done = _limited(texts, tmp_path, "none")
    assert done.returncode != 0, done.stdout
    assert "MemoryError" in done.stderr or "memory allocation" in done.stderr or done.returncode < 0, done.stderr[-2000:]


def _measured(text: str) -> tuple[float, float]:
    m = re.search(r"peak memory for the text in flight (\S+) .*?(?:budget (\S+)|no budget)", text)
    assert m, text[-2000:]
    return memory.parse_size(m.group(1)), memory.parse_size(m.group(2)) if m.group(2) else float("inf")


@pytest.mark.skipif(not LINUX, reason="the peak is read from /proc/self/status")
def test_two_workers_stay_within_the_budget_together(texts, tmp_path):
    """Parent and workers together (each one's resident high-water mark above its start), as the
    command measures and logs it; without a budget the same text takes far more."""
    tiny, big, tok = texts
    part = tmp_path / "part.txt"
    with open(big, "rb") as f:
        part.write_bytes(f.read(3 << 20))
    cmd = [sys.executable, "-m", "ptmkit.cli", "prepare", str(part), "-t", str(tok), "--workers", "2"]
    bounded = subprocess.run([*cmd, "-o", str(tmp_path / "a"), "--memory-budget", "4M"], capture_output=True,
                             text=True, timeout=300)
    assert bounded.returncode == 0, bounded.stderr[-2000:]
    peak, budget = _measured(bounded.stderr)
    assert "2 worker(s)" in bounded.stderr and budget == 4 << 20 and 0 < peak <= budget, bounded.stderr[-1000:]
    free = subprocess.run([*cmd, "-o", str(tmp_path / "b"), "--verbose"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert free.returncode == 0, free.stderr[-2000:]
    assert _measured(free.stderr)[0] > 4 * budget


# ---------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("text, value", [("512M", 512 << 20), ("2G", 2 << 30), ("1.5GiB", 3 << 29), ("64k", 64 << 10),
                                         ("4096", 4096), (" 3 MB ", 3 << 20)])
def test_sizes(text, value):
    assert memory.parse_size(text) == value


@pytest.mark.parametrize("bad", ["12Q", "-1M", "0", "abc", "1.5.2G", "", "M"])
def test_bad_budget_is_refused_by_the_command(bad, texts, tmp_path, capsys):
    tiny, _, tok = texts
    with pytest.raises(SystemExit) as exc:
        cli_main(["prepare", str(tiny), "-t", str(tok), "-o", str(tmp_path / "c"), f"--memory-budget={bad}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--memory-budget" in err and ("512M" in err or "positive" in err), err
    assert not (tmp_path / "c").exists()


def test_too_small_a_budget_names_the_minimum(texts, tmp_path):
    tiny, _, tok = texts
    one, two = memory.format_size(memory.minimum(1)), memory.format_size(memory.minimum(2))
    with pytest.raises(PtmError, match=rf"too small.*at least {re.escape(one)}.*--memory-budget {re.escape(one)}"):
        prepare([tiny], tok, tmp_path / "c", workers=1, memory_budget="1M", progress=False)
    with pytest.raises(PtmError, match=rf"2 workers prepare needs at least {re.escape(two)} \({re.escape(one)} with "
                                       r"--workers 1\)"):
        prepare([tiny], tok, tmp_path / "c", workers=2, memory_budget="3M", progress=False)
    assert not (tmp_path / "c").exists()
    assert memory.parse_size(one) >= memory.minimum(1)  # the minimum shown is rounded up


def test_budget_picks_fewer_workers_unless_they_are_given():
    fitted = memory.plan(memory.parse_size("3M"), 8, workers_given=False)
    assert fitted.workers == 1 and fitted.estimate <= 3 << 20
    big = memory.plan(memory.parse_size("512M"), 8, workers_given=False)
    assert big.workers == 8 and big.in_flight == 16 and big.block_bytes <= 1 << 20 and big.estimate <= 512 << 20
    for budget in ("4M", "16M", "100M"):
        for w in (1, 2, 4):
            try:
                p = memory.plan(memory.parse_size(budget), w, workers_given=True)
            except PtmError:
                assert memory.minimum(w) > memory.parse_size(budget)
                continue
            assert p.workers == w and p.estimate <= p.budget and p.encode_bytes <= p.block_bytes
            larger = p.block_bytes + 4096
            assert memory.estimate(w, larger, memory._encode_size(larger), p.in_flight) > p.budget or \
                p.block_bytes == 1 << 20  # the largest block that fits


def test_a_line_longer_than_the_budget_allows_is_refused(texts, tmp_path):
    _, _, tok = texts
    text = tmp_path / "long.txt"
    text.write_text("a short line\nanother\n" + "cat " * 40_000 + "\nend\n")
    with pytest.raises(PtmError, match=r"long.txt: line 3 is longer than [\d,]+ bytes.*--memory-budget 2.5M"):
        prepare([text], tok, tmp_path / "c", workers=1, memory_budget=BUDGET, progress=False)
    assert not (tmp_path / "c").exists()
    assert prepare([text], tok, tmp_path / "c", workers=1, memory_budget="64M", progress=False).n_sentences == 4


def test_budget_and_shards_do_not_change_the_corpus(texts, tmp_path):
    """The same files whatever the budget, the workers or the blocks; a set's shards hold the same bytes."""
    tiny, big, tok = texts
    part = tmp_path / "part.txt"
    with open(big, "rb") as f:
        part.write_bytes(f.read(300_000) + b"no newline at the end")
    files = [part, tiny]
    names = ("tokens.bin", "word_starts.bin", "sentences.npy", "documents.npy", "meta.json", "tokenizer.json")
    ref = prepare(files, tok, tmp_path / "ref", workers=1, progress=False)
    digest = {n: (ref.path / n).read_bytes() for n in names}
    for i, kw in enumerate([dict(workers=1, memory_budget=BUDGET), dict(workers=2, memory_budget="4M"),
                            dict(workers=2, memory_budget="64M", chunk_bytes=5000)]):
        out = prepare(files, tok, tmp_path / f"c{i}", progress=False, **kw)
        assert {n: (out.path / n).read_bytes() for n in names} == digest, kw
    sharded = prepare(files, tok, tmp_path / "set", workers=1, progress=False, shard_tokens=10**12)
    assert len(sharded.shards) == 1
    shard = sharded.shards[0]
    assert {n: (shard / n).read_bytes() for n in names} == digest
