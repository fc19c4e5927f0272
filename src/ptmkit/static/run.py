"""Entry point used by ``ptm pretrain`` for the static-embedding models (word2vec, fastText, ...)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ptmkit import registry
from ptmkit.config import from_dict


def run_static(name: str, data_files: Sequence[str | os.PathLike], out_dir: str | os.PathLike, overrides: dict[str, Any] | None = None, progress: bool = True):
    """Train registered static model ``name`` (e.g. ``"word2vec"``, ``"fasttext"``) on ``data_files``.

    ``overrides``: config keys of the model's ``config_class`` (unknown keys raise PtmError naming the
    nearest).  Writes ``out_dir/vectors.bin`` (word2vec binary), ``config.json`` and ``vocab.txt``;
    returns what the model's ``train`` returns (WordVectors or FastTextModel).
    """
    entry = registry.get("static", name)
    cfg = from_dict(entry.config_class, dict(overrides or {}), where=name)
    return entry.train(list(data_files), cfg, out=out_dir, progress=progress)
