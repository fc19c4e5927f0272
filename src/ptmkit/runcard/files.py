"""Reading what a run directory holds without loading a model: JSON files, the last records of
``metrics.jsonl``, parameter counts from the safetensors header, tokenizer sizes from
``tokenizer.json``, the word2vec header of ``vectors.bin``.  Nothing here imports torch, so
``ptm info`` and ``ptm runs`` answer at once."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from ptmkit.outputs.kinds import MARKER

SAFETENSORS_INDEX = "model.safetensors.index.json"  # HF's sharded weights


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable (a card says what it can)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


RECORDS = (MARKER, "config.json", "inputs.json", "results.json", "task_model.json", "settings.json", "summary.json")


def unreadable_records(d: Path) -> list[str]:
    """The records in ``d`` (JSON files ptm wrote) that exist but cannot be read: a card says so
    rather than leaving their facts out as if the run had none."""
    bad = []
    for name in RECORDS:
        p = Path(d) / name
        if p.exists() and not isinstance(read_json(p), dict):
            bad.append(name)
    return bad


def marker_kind(d: Path) -> str | None:
    """The output kind in ptm's marker (``run``, ``finetune``, ``vectors``, ...), or ``None``."""
    marker = read_json(d / MARKER)
    return marker.get("kind") if isinstance(marker, dict) else None


def last_records(metrics: Path) -> dict[str, dict[str, Any]]:
    """The last record of each split of a ``metrics.jsonl`` (``train``, ``eval``, ``dev``, ...)."""
    last: dict[str, dict[str, Any]] = {}
    try:
        lines = Path(metrics).read_text(encoding="utf-8").splitlines()
    except OSError:
        return last
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a line cut by a kill
            continue
        if isinstance(rec, dict):
            last[str(rec.get("split", "train"))] = rec
    return last


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a ``.safetensors`` header (8-byte length, then JSON), or from every
    shard an HF ``model.safetensors.index.json`` names; ``{}`` when there is none."""
    path = Path(path)
    if path.name == SAFETENSORS_INDEX:
        index = read_json(path) or {}
        shapes: dict[str, list[int]] = {}
        for shard in sorted(set((index.get("weight_map") or {}).values())):
            shapes.update(safetensors_shapes(path.parent / shard))
        return shapes
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error):
        return {}
    return {k: list(v.get("shape", [])) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}


def count_parameters(shapes: dict[str, list[int]], prefix: str = "") -> int:
    """Elements of the tensors whose names start with ``prefix`` (shared tensors are stored once)."""
    return sum(math.prod(s) for k, s in shapes.items() if k.startswith(prefix))


def weights_file(d: Path) -> Path | None:
    """``model.safetensors`` (or HF's shard index) in ``d``."""
    for name in ("model.safetensors", SAFETENSORS_INDEX):
        if (d / name).is_file():
            return d / name
    return None


def tokenizer_summary(path: Path) -> str | None:
    """``WordPiece, 8,000 entries`` from a ``tokenizer.json`` (HF tokenizers' format)."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return None
    model = data["model"]
    vocab = model.get("vocab")
    size = len(vocab) if isinstance(vocab, (dict, list)) else None
    ids = {t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)}
    if size is not None and isinstance(vocab, dict):
        size += len(ids - set(vocab.values()))
    kind = model.get("type") or "tokenizer"
    return f"{kind}, {size:,} entries" if size is not None else str(kind)


def vectors_header(path: Path) -> tuple[int, int] | None:
    """``(words, dimensions)`` from the first line of a word2vec file."""
    try:
        with open(path, "rb") as f:
            n, dim = f.readline().split()[:2]
        return int(n), int(dim)
    except (OSError, ValueError):
        return None


def count_lines(path: Path) -> int | None:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def number(value: Any) -> str:
    """A metric as a card shows it: four significant decimals, integers with separators."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"
