"""Classical Chinese verse in simplified characters, from npm ``chinese-poetry`` (the chinese-poetry
database: Song ci lyrics and Yuan qu songs; Tang poems are in traditional characters and are
not read).

Read from the package: ``dist/songci/ci.song.N.json`` (21,053 ci of the Song dynasty) and
``dist/yuanqu/yuanqu.json`` (11,057 qu of the Yuan dynasty), each a JSON list of pieces with
``paragraphs`` (the lines), ``author`` and a title (``rhythmic`` / ``title``); about 2.7M
characters.  The anthology ``宋词三百首.json`` repeats pieces of the full set and is skipped.

A piece is a document: its lines one per line (whitespace removed), a blank line after it.
Pieces with the same text are kept once; the rest are shuffled with
``np.random.default_rng(SEED)`` and split 90/5/5 into train/dev/test.

Outputs (``$PTMKIT_HOME/data/chinese-poetry/``): ``text/train.txt``, ``text/dev.txt``,
``text/test.txt`` (pre-training text), ``stats.json``.  Unlabelled: no built-in task.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.errors import PtmError
from ptmkit.registry import register

NPM_SPEC = "chinese-poetry@2.0.1"
NPM_SHA256 = "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86"
SEED = 2016
FRACTIONS = (0.9, 0.05, 0.05)
PARTS = ("train", "dev", "test")
_MEMBER = re.compile(r"^package/dist/(songci/ci\.song\.\d+\.json|yuanqu/yuanqu\.json)$")


def piece_lines(piece: dict) -> list[str]:
    """The non-empty lines of one piece, whitespace removed (Chinese verse has no spaces)."""
    paragraphs = piece.get("paragraphs") or []
    if not isinstance(paragraphs, list):
        return []
    return [t for t in ("".join(str(p).split()) for p in paragraphs) if t]


def unique_pieces(pieces: list[list[str]]) -> list[list[str]]:
    """Pieces in order, each distinct text once (empty pieces dropped)."""
    seen: set[str] = set()
    out = []
    for lines in pieces:
        key = "\n".join(lines)
        if lines and key not in seen:
            seen.add(key)
            out.append(lines)
    return out


@register("source", "chinese-poetry")
class ChinesePoetry(Source):
    name = "chinese-poetry"
    description = "Song ci + Yuan qu (simplified characters, ~2.7M characters), shuffled 90/5/5 by piece"
    packages = (Package("npm", NPM_SPEC, NPM_SHA256),)
    origin = f"npm {NPM_SPEC}, dist/songci/ci.song.*.json and dist/yuanqu/yuanqu.json"
    license = "MIT (chinese-poetry, (c) 2016 JackeyGao); the texts themselves are centuries old"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (tgz,) = files
        pieces: list[list[str]] = []
        counts: dict[str, int] = {}
        with tarfile.open(tgz) as tf:
            for m in tf:  # one pass over the 85 MB archive, reading only the wanted members
                if not (m.isfile() and _MEMBER.match(m.name)):
                    continue
                data = json.loads(tf.extractfile(m).read().decode("utf-8"))  # type: ignore[union-attr]
                group = m.name.split("/")[2]
                counts[group] = counts.get(group, 0) + len(data)
                pieces += [piece_lines(p) for p in data if isinstance(p, dict)]
        if not counts.get("songci") or not counts.get("yuanqu"):
            raise PtmError(f"{tgz.name} lacks the songci or yuanqu files (found {counts})")
        kept = unique_pieces(pieces)
        order = np.random.default_rng(SEED).permutation(len(kept))
        n_train, n_dev = int(FRACTIONS[0] * len(kept)), int(FRACTIONS[1] * len(kept))
        bounds = {"train": order[:n_train], "dev": order[n_train : n_train + n_dev], "test": order[n_train + n_dev :]}
        (out / "text").mkdir(exist_ok=True)
        stats: dict = {"pieces": counts, "distinct": len(kept), "seed": SEED, "fractions": FRACTIONS, "parts": {}}
        for part, idx in bounds.items():
            docs = [kept[i] for i in idx]
            (out / "text" / f"{part}.txt").write_text("".join("\n".join(d) + "\n\n" for d in docs), encoding="utf-8")
            stats["parts"][part] = {"pieces": len(docs), "lines": sum(map(len, docs)),
                                    "characters": sum(len(x) for d in docs for x in d)}
        (out / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
