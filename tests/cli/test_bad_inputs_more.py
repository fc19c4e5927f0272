"""More bad inputs through the CLI that used to hang or end in a traceback: each ends with exit
status 2, a message the user can act on, no traceback, and nothing written; and output piped into
``head`` ends quietly."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from conftest import TINY, write_corpus

from ptmkit.cli import main
from ptmkit.errors import PtmError


def call(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse errors
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """Text, a tokenizer, and an HF BERT directory whose pytorch_model.bin is a pickle holding a
    Python object besides tensors (what torch.load(weights_only=True) refuses)."""
    ws = tmp_path_factory.mktemp("bad-inputs-more")
    write_corpus(ws / "corpus.txt")
    assert main(["tokenizer", "train", str(ws / "corpus.txt"), "--vocab-size", "120", "--min-frequency", "1",
                 "-o", str(ws / "tok.json")]) == 0
    hf = ws / "hf-pickle"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 120, '
                                    '"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, '
                                    '"intermediate_size": 16, "max_position_embeddings": 16}\n')
    torch.save({"bert.embeddings.word_embeddings.weight": torch.zeros(120, 8), "note": Fraction(1, 3)},
               hf / "pytorch_model.bin")
    (ws / "home").mkdir()
    return ws


@dataclass
class Case:
    argv: list
    fragments: tuple[str, ...]
    absent: tuple[str, ...] = ()  # must not appear in the output
    needs_no_cuda: bool = False


CASES = {
    # B4: --chunk-mb 0 was rounded to 1-byte reads
    "prepare-chunk-mb-zero": Case(["prepare", "corpus.txt", "-t", "tok.json", "-o", "c", "--chunk-mb", "0"],
                                  ("argument --chunk-mb: must be between 0.0625 (64 KiB) and 1024 MB, got 0",)),
    "prepare-chunk-mb-nan": Case(["prepare", "corpus.txt", "-t", "tok.json", "-o", "c", "--chunk-mb", "nan"],
                                 ("argument --chunk-mb: must be between", "got nan")),
    "prepare-chunk-mb-huge": Case(["prepare", "corpus.txt", "-t", "tok.json", "-o", "c", "--chunk-mb", "1e9"],
                                  ("argument --chunk-mb: must be between", "got 1e9")),
    # B5: --budget 1e30 set ~1e22 training steps
    "compare-budget-flops": Case(["compare", "bert-tiny", "--data", "corpus.txt", "--budget", "1e30", "-o", "cmp"],
                                 ("--budget 1e30 (1e+30 FLOPs) is beyond the sanity limit of 1e+21 FLOPs per objective",
                                  "about 3.17e+08 years each", "give a smaller budget")),
    "compare-budget-minutes": Case(["compare", "a=bert-tiny", "b=bert-tiny", "--data", "corpus.txt", "--budget",
                                    "20000min", "-o", "cmp"],
                                   ("beyond the sanity limit of 10080 minutes (a week) per objective",
                                    "13.9 days each, 27.8 days in all")),
    "compare-budget-infinite": Case(["compare", "bert-tiny", "--data", "corpus.txt", "--budget", "1e400", "-o", "cmp"],
                                    ("--budget 1e400 is not a finite number",)),
    # B6: 100000 layers built for minutes
    "too-many-layers": Case(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", "run", *TINY,
                             "model.num_layers=100000"],
                            ("model.num_layers=100000 is beyond the sanity limit of 1024 layers",
                             "about 8.54e+08 parameters, 3.42 GB in float32")),
    "weights-larger-than-memory": Case(["pretrain", "bert-tiny", "--data", "corpus.txt", "-o", "run", *TINY,
                                        "model.hidden_size=200000", "model.num_heads=2"],
                                       ("would have about 3.6e+11 parameters: 1.44 TB in float32 for the weights alone",
                                        "of memory available", "model.hidden_size=200000")),
    # B7: --device
    "device-cuda-without-cuda": Case(["generate", "no-run", "the cat", "--device", "cuda"],
                                     ("--device cuda but this is", "use --device cpu"), needs_no_cuda=True),
    "device-banana": Case(["generate", "no-run", "the cat", "--device", "banana"],
                          ("--device 'banana' is not a device; use one of: cpu",)),
    "device-meta": Case(["generate", "no-run", "the cat", "--device", "meta"],
                        ("--device 'meta': ptm runs on cpu, cuda or mps",)),
    # B8: a pickle that torch.load(weights_only=True) refuses; its message advised weights_only=False
    "hf-pickle-with-objects": Case(["import", "hf-pickle", "-o", "ck"],
                                   ("hf-pickle/pytorch_model.bin could not be loaded safely",
                                    "a Python object of type fractions.Fraction", "convert the weights to safetensors"),
                                   absent=("weights_only=False", "Weights only load failed")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, ws, capsys, monkeypatch):
    case = CASES[name]
    if case.needs_no_cuda and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    monkeypatch.chdir(ws)
    monkeypatch.setenv("PTMKIT_HOME", str(ws / "home"))
    before = snapshot(ws)
    rc, output = call(case.argv, capsys)
    assert rc == 2, output
    for fragment in case.fragments:
        assert fragment in output, output
    for fragment in ("Traceback", *case.absent):
        assert fragment not in output, output
    assert snapshot(ws) == before  # nothing written, nothing removed


# -- B6: the size estimate behind the check ------------------------------------------------------------
@pytest.mark.parametrize("encoder, keys", [
    ("transformer", {"hidden_size": 64, "num_heads": 4, "intermediate_size": 128, "num_layers": 5, "vocab_size": 300}),
    ("transformer", {"hidden_size": 64, "num_heads": 4, "intermediate_size": 128, "num_layers": 5, "vocab_size": 300,
                     "sharing": "all", "embedding_size": 16}),
    ("lstm", {"vocab_size": 300, "num_layers": 3, "hidden_size": 32, "projection_size": 16}),
    ("awd_lstm", {"vocab_size": 300, "num_layers": 4, "hidden_size": 48, "embedding_size": 16}),
    ("encoder_decoder", {"vocab_size": 300, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                         "encoder_layers": 3, "decoder_layers": 4}),
    ("xlnet", {"vocab_size": 300, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "num_layers": 4}),
])
def test_parameter_estimate_is_exact(encoder, keys):
    """Built on the meta device with 2 and 3 layers per stack and extrapolated: the real count."""
    from ptmkit import registry
    from ptmkit.build import encoder_config
    from ptmkit.model_size import estimate_parameters

    name, cfg = encoder_config({"encoder": encoder, **keys})
    cls = registry.get("encoder", name)
    assert estimate_parameters(cls, cfg) == sum(p.numel() for p in cls(cfg).parameters())


def test_size_check_uses_the_available_memory(monkeypatch):
    from ptmkit import model_size
    from ptmkit.build import build_encoder

    section = {"encoder": "transformer", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "num_layers": 2,
               "vocab_size": 300}
    # embeddings 300x32 + 512x32 + 2x32 + LN 64, two layers of 8544, pooler 1056: 44256 parameters, 177 kB
    monkeypatch.setattr(model_size, "available_memory", lambda: 100_000)
    with pytest.raises(PtmError, match=r"about 4.43e\+04 parameters: 0.177 MB in float32 for the weights alone, more "
                                       r"than the 0.1 MB of memory available \(model.vocab_size=300, model.hidden_size=32"):
        build_encoder(section)
    monkeypatch.setattr(model_size, "available_memory", lambda: 200_000)
    assert sum(p.numel() for p in build_encoder(section).parameters()) == 44256
    monkeypatch.setattr(model_size, "available_memory", lambda: None)  # unknown: only the layer limit applies
    assert sum(p.numel() for p in build_encoder(section).parameters()) == 44256


# -- B8: a plain pickle of tensors still imports ----------------------------------------------------------
def test_pickle_of_tensors_passes_the_safety_check(tmp_path):
    from ptmkit.interop.hf_common import check_pickled_weights

    torch.save({"w": torch.ones(2, 3)}, tmp_path / "pytorch_model.bin")
    check_pickled_weights(tmp_path)  # no error
    torch.save({"w": torch.ones(2, 3)}, tmp_path / "pytorch_model-00002-of-00002.bin",
               _use_new_zipfile_serialization=False)  # the legacy format cannot be memory-mapped
    check_pickled_weights(tmp_path)
    (tmp_path / "pytorch_model-00003-of-00003.bin").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(PtmError, match=r"pytorch_model-00003-of-00003.bin is damaged or not a PyTorch weights file"):
        check_pickled_weights(tmp_path)


# -- B9: non-UTF-8 input to tokenizer encode ---------------------------------------------------------------
def test_tokenizer_encode_refuses_non_utf8_stdin(ws, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"the cat\r\nsat \xe9t\xe9\n"), encoding="utf-8"))
    rc, output = call(["tokenizer", "encode", "-t", ws / "tok.json"], capsys)
    assert rc == 2, output
    assert '"tokens": ["the", "cat"]' in output  # the good line before it was encoded
    assert "error: stdin line 2 is not UTF-8 text (byte 0xe9 at byte 5 of the line)" in output
    assert "Traceback" not in output
    rc, output = call(["tokenizer", "encode", "-t", ws / "tok.json", "the cat", "sat \udce9"], capsys)
    assert rc == 2 and "error: text argument 2 is not UTF-8" in output, output


# -- B10: | head -----------------------------------------------------------------------------------------------
def ptm(args: list[str], home: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PTMKIT_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "ptmkit.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, **kw)


def test_output_into_a_closed_pipe_ends_quietly(ws, tmp_path):
    """``ptm tokenizer encode ... | head -1``: the reader takes one line and goes; ``ptm data list``
    into a pipe nobody reads.  Both end with 141 (128 + SIGPIPE) and print nothing on stderr."""
    lines = tmp_path / "lines.txt"
    lines.write_text("the cat sat on the mat\n" * 20_000)  # ~1.8 MB of JSON out: far more than a pipe holds
    with open(lines, "rb") as stdin:
        proc = ptm(["tokenizer", "encode", "-t", str(ws / "tok.json")], tmp_path / "home", stdin=stdin)
        first = proc.stdout.readline()
        proc.stdout.close()
        rc = proc.wait(timeout=120)
    assert first.startswith(b'{"ids": ')
    assert (rc, proc.stderr.read()) == (141, b"")

    proc = ptm(["data", "list"], tmp_path / "home")
    proc.stdout.close()  # before the command writes anything
    rc = proc.wait(timeout=120)
    assert (rc, proc.stderr.read()) == (141, b"")
