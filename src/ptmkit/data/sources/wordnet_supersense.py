"""Supersense tagging of held-out lemmas, from WordNet 3.0's example sentences (Debian ``wordnet-base``).

A *supersense* is a synset's lexicographer file (lexnames(5): ``noun.animal``, ``verb.motion``
...), the coarse sense classes of Ciaramita & Johnson (2003) and Ciaramita & Altun (2006).  Each
example sentence in the gloss of a noun or verb synset ("the dog barked all night", sense 1 of
``dog``) whose text holds one of the synset's lemmas is a tagged sentence: the words of that
lemma get the BIO tags of the synset's supersense (``B-noun.animal``; a multi-word lemma ``B-``
then ``I-``), every other word ``O``.  Nouns and verbs only: their 26 + 15 lexicographer files are
semantic classes, where those of adjectives and adverbs (``adj.all``, ``adj.pert``, ``adj.ppl``,
``adv.all``) name little but the part of speech.

The lemma is found as ``wordnet-wsd`` finds it
(:func:`~ptmkit.data.sources.wordnet_wsd.lemma_pattern`: the lemma or a regular inflection of its
last word, case-insensitive, on word boundaries; the longest of the synset's lemmas that occurs),
but every lemma counts here, not only polysemous ones, and every occurrence of it in the sentence
is tagged.  Examples without any of their synset's lemmas are dropped.  Words: runs of letters and
digits (with inner hyphens and apostrophes), dashes (``--``), ellipses and single punctuation
marks, split further where the lemma's match begins or ends (``dog's`` -> ``dog`` ``'s``).  The
input does not mark which word the example illustrates, so a tagger must find the target as well
as its class; the other nouns and verbs of a sentence are ``O`` although they have supersenses too.

Split **by lemma** (80/10/10 of the shuffled lemmas, the lemma's spelling whatever its part of
speech, ``np.random.default_rng(SEED)``): no lemma tagged in dev or test is tagged in training,
so the task asks for the supersense of words the tagger was not trained on.

Outputs (``$PTMKIT_HOME/data/wordnet-supersense/``): ``train/dev/test.jsonl`` with ``tokens``,
``tags``, ``lemma``, ``pos``, ``synset`` (``offset-pos``) and ``supersense``; ``stats.json``
(sentences, lemmas, tokens and tagged spans per part, spans per supersense, supersenses of dev
or test absent from training).  Built-in task: ``wordnet-supersense`` (tagging).
Caution: the ``english-mix`` corpus includes WordNet's examples.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.parts import split_groups, write_parts
from ptmkit.data.sources.wordnet_wsd import lemma_pattern, read_wordnet
from ptmkit.errors import PtmError
from ptmkit.knowledge.wordnet import LEXNAMES, POS_FILES, parse_data_line
from ptmkit.registry import register

SEED = 2003  # Ciaramita & Johnson (2003), supersense tagging of unknown nouns
FRACTIONS = (0.8, 0.1, 0.1)
TAGGED_POS = ("n", "v")
_WORD = re.compile(r"\w+(?:[-'’]\w+)*|\.\.\.+|--+|[^\w\s]")


def supersenses(wn: Path) -> dict[str, str]:
    """``offset-pos -> supersense`` (the lexicographer file's name) of every synset in directory ``wn``."""
    out = {}
    for name in POS_FILES.values():
        path = wn / f"data.{name}"
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                parsed = parse_data_line(line, f"{path}:{n}")
                if parsed is not None:
                    key, lex = parsed[0], parsed[1]
                    if not 0 <= lex < len(LEXNAMES):
                        raise PtmError(f"{path}:{n}: lex_filenum {lex} is outside lexnames(5)'s 0..{len(LEXNAMES) - 1}")
                    out[key] = LEXNAMES[lex]
    return out


def words(text: str, cuts: Collection[int] = ()) -> list[tuple[int, int]]:
    """Character spans of the words of ``text`` (see the module docstring), a word also split
    at each offset in ``cuts`` that falls inside it."""
    spans = []
    for m in _WORD.finditer(text):
        at = [m.start()] + sorted(c for c in cuts if m.start() < c < m.end()) + [m.end()]
        spans.extend(zip(at[:-1], at[1:]))
    return spans


def tag_sentence(text: str, lemma: str, supersense: str) -> tuple[list[str], list[str]] | None:
    """``(tokens, BIO tags)`` of ``text`` with every occurrence of ``lemma`` tagged ``supersense``;
    ``None`` when the lemma does not occur."""
    found = [(m.start(), m.end()) for m in lemma_pattern(lemma).finditer(text)]
    if not found:
        return None
    spans = words(text, {c for span in found for c in span})
    tags = ["O"] * len(spans)
    for start, end in found:
        inside = [i for i, (s, e) in enumerate(spans) if start <= s and e <= end]
        for k, i in enumerate(inside):
            tags[i] = f"{'I' if k else 'B'}-{supersense}"
    if all(t == "O" for t in tags):
        return None
    return [text[s:e] for s, e in spans], tags


def tagged_examples(synsets: dict[str, tuple], supersense: dict[str, str]) -> list[dict]:
    """Tagged sentences from ``synsets`` (``offset-pos -> parsed synset``, as ``wordnet-wsd`` reads
    them) and each synset's supersense: one per example of a noun or verb synset holding one of
    its lemmas (the longest that occurs)."""
    out = []
    for key, (_offset, pos, lemmas, _definition, examples) in synsets.items():
        if pos not in TAGGED_POS:
            continue
        candidates = sorted(set(lemmas), key=lambda s: (-len(s), s))
        for text in examples:
            for lemma in candidates:
                tagged = tag_sentence(text, lemma, supersense[key])
                if tagged is not None:
                    out.append({"tokens": tagged[0], "tags": tagged[1], "lemma": lemma, "pos": pos,
                                "synset": key, "supersense": supersense[key]})
                    break
    return out


def split_by_lemma(rows: list[dict], rng: np.random.Generator) -> dict[str, list[dict]]:
    """Shuffle the lemmas (their spelling, over both parts of speech) and cut them 80/10/10; a
    lemma's sentences stay in its part."""
    by_lemma: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_lemma[r["lemma"]].append(r)
    return split_groups([by_lemma[k] for k in sorted(by_lemma)], rng, FRACTIONS)


def part_stats(rows: list[dict]) -> dict:
    """Sentences, lemmas, tokens, tagged spans and the spans of each supersense."""
    spans = Counter(t[2:] for r in rows for t in r["tags"] if t.startswith("B-"))
    return {"sentences": len(rows), "lemmas": len({r["lemma"] for r in rows}),
            "tokens": sum(len(r["tokens"]) for r in rows), "spans": sum(spans.values()),
            "supersenses": dict(sorted(spans.items()))}


@register("source", "wordnet-supersense")
class WordNetSupersense(Source):
    name = "wordnet-supersense"
    description = "supersense tagging (BIO, 41 noun and verb lexicographer files) of WordNet 3.0 examples, split by lemma"
    packages = (Package("debian", "wordnet-base"),)
    license = "WordNet 3.0 licence (Princeton University, BSD-like)"
    tasks = {"wordnet-supersense": {"type": "tagging", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                                    "tokens": "tokens", "tags": "tags"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        synsets, _ = read_wordnet(files[0], work)  # unpacks into work/root
        rows = tagged_examples(synsets, supersenses(work / "root/usr/share/wordnet"))
        parts = split_by_lemma(rows, np.random.default_rng(SEED))
        train = {r["supersense"] for r in parts["train"]}
        unseen = {p: sorted({r["supersense"] for r in parts[p]} - train) for p in ("dev", "test")}
        write_parts(parts, out, {"sentences": len(rows), "lemmas": len({r["lemma"] for r in rows}), "seed": SEED,
                                 "tagged_pos": list(TAGGED_POS), "supersenses_missing_from_train": unseen},
                    part_stats)
