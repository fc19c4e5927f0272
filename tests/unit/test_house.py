"""The house numbers of src/ptmkit, read from the source with ``ast`` (tools/house_numbers.py):
no import cycles, function-local imports within a stated budget and only where they must be,
no source file over 500 lines but the numba kernels, and no core module importing a workflow."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "ptmkit"

# Function-local imports allowed: the optional dependencies where they are first needed, and the
# commands' lazy imports of their workflow (so `ptm --help` and `ptm data list` start without torch).
LOCAL_IMPORT_BUDGET = 39  # + ptm predict's and ptm encode's workflows; ptm quantize's workflow, torchao; ptm analyse's workflow; spaCy;
# pyarrow and zstandard (Parquet and zstd corpora);
# torch in Tokenizer.__call__(return_tensors="pt") (tokenizing and preparing text need no torch);
# FSDP and DCP (sharding, checkpoints, rank 0's weights handed out at sharding);
# onnx and onnxruntime (ptm export --format onnx) and that command's lazy import of the exporter
# torch.distributed.fsdp and .checkpoint register the DTensor operators on import (about 0.7 s), which
# only sharded runs need: imported where first used, like an optional package.
# A core package imported where it is first needed, for start-up: the tokenizer (used by
# `ptm tokenizer` and `ptm prepare`, which need no torch) makes torch tensors only when asked.
LAZY_CORE = {"ptmkit/tokenization/tokenizer.py": ("torch",)}
OPTIONAL = ("transformers", "jieba", "sacrebleu", "rouge_score", "gensim", "seqeval", "torch.utils.tensorboard",
            "torchao", "spacy", "torch.distributed.fsdp", "torch.distributed.checkpoint", "onnx", "pyarrow",
            "zstandard")
LAZY_FOR_START_UP = ("ptmkit/commands/", "ptmkit/cli.py")
MAX_LINES = 500


@pytest.fixture(scope="module")
def house():
    spec = importlib.util.spec_from_file_location("house_numbers", ROOT / "tools" / "house_numbers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def numbers(house):
    return house.house_numbers(PACKAGE, MAX_LINES)


def test_no_import_cycles(numbers):
    assert numbers["cycles"] == []


def test_function_local_imports_within_budget(numbers):
    assert numbers["local_imports"] <= LOCAL_IMPORT_BUDGET, numbers["local_imports_by_file"]


def test_function_local_imports_only_for_optional_packages_or_start_up(numbers):
    """Outside the commands layer a function imports only an optional dependency; a core
    dependency or a ptmkit module goes to the top of the file."""
    stray = {}
    for path, entries in numbers["local_imports_by_file"].items():
        if path.startswith(LAZY_FOR_START_UP):
            continue
        allowed = (*OPTIONAL, *LAZY_CORE.get(path, ()))
        bad = [e for e in entries if not any(f"import {m}" in e or f"from {m}" in e for m in allowed)]
        if bad:
            stray[path] = bad
    assert not stray


def test_no_long_source_files_but_numba_kernels(numbers):
    assert numbers["long_files"] == {}


def test_core_modules_never_import_a_workflow(house):
    modules = house.read_package(PACKAGE)
    outside = {m.name: sorted(i for i in m.imports if i.startswith("ptmkit.workflows"))
               for m in modules.values()
               if not m.name.startswith(("ptmkit.workflows", "ptmkit.commands")) and m.name != "ptmkit"}
    assert {k: v for k, v in outside.items() if v} == {}


def test_the_check_finds_what_it_looks_for(house, tmp_path):
    """A cycle, a function-local import and a long file planted in a toy package are all found."""
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from toy import b\n")
    (pkg / "b.py").write_text("def f():\n    import toy.a\n" + "x = 1\n" * 600)
    (pkg / "kernels").mkdir()
    (pkg / "kernels" / "__init__.py").write_text("")
    (pkg / "kernels" / "k.py").write_text("y = 1\n" * 600)
    found = house.house_numbers(pkg, MAX_LINES)
    assert found["cycles"] == [["toy.a", "toy.b"]]
    assert found["local_imports"] == 1
    assert found["long_files"] == {"toy/b.py": 602}
