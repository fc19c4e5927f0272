"""Gold Turkish dependency trees: the Turkish Web Treebank (TWT; Google Research), PyPI
``turkish-treebanks`` 1.0.0 (Apache-2.0), its two sections ``web.conllu`` (forums and blogs,
2,541 sentences) and ``wiki.conllu`` (Wikipedia, 2,310), annotated by hand.

TWT's tokens are *inflectional groups* (IGs): a derived word is split where a derivation starts
(``Açık|la|nma|yan``), each IG but the last attached to the next by the relation ``ig`` and
written without a space after it.  The analyses read words as running text, so each chain of
IGs joined by ``ig`` is merged back into its surface word (the IGs' forms concatenated); the word
takes the head and relation of its last IG, and a word attached to a non-final IG attaches to
the word holding it (merging connected pieces of a tree leaves a tree).  The punctuation
relation ``p`` is written ``punct``, the label the analyses leave out of UUAS.  Each sentence's
tokens are checked against its ``# text`` line (forms joined with the spaces ``SpaceAfter=No``
leaves) before merging; a sentence that differs is refused.

Split as the package's reader does, per section by sentence index: ``i % 10 < 8`` train,
``== 8`` dev, ``== 9`` test.  Outputs (``$PTMKIT_HOME/data/turkish-treebank/``):
``train/dev/test.jsonl`` with ``tokens``, ``heads`` (1-based, 0 for the root), ``relations``,
``upos`` (of the last IG), ``section``; ``stats.json``.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from ptmkit.analysis.trees import check_tree
from ptmkit.data.sources.base import Package, Source
from ptmkit.errors import PtmError
from ptmkit.registry import register

PACKAGE = "turkish-treebanks==1.0.0"
SHA256 = "5a009c29a8e96e8f7e25059d59ac293c3baead6d746bf0fa4c9d3349b1e37ba0"  # ..-1.0.0-py3-none-any.whl
SECTIONS = ("web", "wiki")
IG, PUNCT = "ig", "p"


def _part(index: int) -> str:
    return "train" if index % 10 < 8 else "dev" if index % 10 == 8 else "test"


def read_conllu(block: str, where: str) -> tuple[str, list[list[str]]]:
    """``(text, token rows)`` of one CoNLL-U sentence, each row the ten columns; the rows' forms
    must give the ``# text`` line back."""
    text, rows = None, []
    for line in block.strip().splitlines():
        if line.startswith("# text = "):
            text = line[len("# text = "):]
        elif line and not line.startswith("#"):
            cols = line.split("\t")
            if len(cols) != 10 or not cols[0].isdigit():
                raise PtmError(f"{where}: expected a CoNLL-U word line (10 columns, an integer id), got {line[:80]!r}")
            rows.append(cols)
    if text is None or not rows:
        raise PtmError(f"{where}: a sentence without a '# text' line or without tokens")
    rebuilt = "".join(r[1] + ("" if "SpaceAfter=No" in r[9] else " ") for r in rows).strip()
    if rebuilt != text.strip():
        raise PtmError(f"{where}: the tokens {rebuilt[:60]!r} do not match the sentence text {text[:60]!r}")
    return text, rows


def merge_igs(rows: list[list[str]], where: str) -> dict[str, Any]:
    """The word-level tree of one sentence's IG rows (see the module docstring)."""
    n = len(rows)
    heads = [int(r[6]) for r in rows]  # 1-based, 0: root
    word_of, words = [0] * n, []  # IG index -> word index
    start = 0
    for i in range(n):
        joined = rows[i][7] == IG
        if joined and (heads[i] != i + 2 or "SpaceAfter=No" not in rows[i][9]):
            raise PtmError(f"{where}: IG {i + 1} is joined by 'ig' to {heads[i]}, not to the next IG of its word")
        word_of[i] = len(words)
        if not joined:
            words.append(i)  # the word's last IG
            start = i + 1
    if start != n:
        raise PtmError(f"{where}: the last IG is joined by 'ig' to nothing")
    out_heads, rels, upos, tokens = [], [], [], []
    first = 0
    for last in words:
        tokens.append("".join(rows[k][1] for k in range(first, last + 1)))
        h = heads[last]
        out_heads.append(0 if h == 0 else word_of[h - 1] + 1)
        rel = rows[last][7]
        rels.append("punct" if rel == PUNCT else rel)
        upos.append(rows[last][3])
        first = last + 1
    try:
        check_tree([h - 1 for h in out_heads])
    except PtmError as exc:
        raise PtmError(f"{where}: merged words do not form a tree ({exc})") from None
    return {"tokens": tokens, "heads": out_heads, "relations": rels, "upos": upos}


@register("source", "turkish-treebank")
class TurkishTreebank(Source):
    name = "turkish-treebank"
    description = ("Turkish Web Treebank, GOLD dependency trees (web + wiki, 4,851 sentences), inflectional groups "
                   "merged into words; the package's 8/1/1 split")
    packages = (Package("pypi", PACKAGE, SHA256),)
    origin = f"PyPI {PACKAGE} (wheel)"
    license = "Apache-2.0 (Google Research, turkish-treebanks)"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (wheel,) = files
        parts: dict[str, list[dict[str, Any]]] = {"train": [], "dev": [], "test": []}
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            for section in SECTIONS:
                member = f"data/{section}.conllu"
                if member not in names:
                    raise PtmError(f"{wheel.name} lacks {member}")
                blocks = [b for b in zf.read(member).decode("utf-8").split("\n\n") if b.strip()]
                for i, block in enumerate(blocks):
                    _, rows = read_conllu(block, f"{member} sentence {i + 1}")
                    row = merge_igs(rows, f"{member} sentence {i + 1}")
                    parts[_part(i)].append({**row, "section": section})
        stats: dict[str, Any] = {"parts": {}}
        for part, rows in parts.items():
            with open(out / f"{part}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            rels = Counter(r for row in rows for r in row["relations"])
            stats["parts"][part] = {"sentences": len(rows), "words": sum(rels.values()), "relations": dict(rels.most_common())}
        (out / "stats.json").write_text(json.dumps(stats, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
