"""Word-in-Context (Pilehvar & Camacho-Collados 2019) built from WordNet 3.0's example sentences.

WiC asks whether a word means the same in two sentences.  Its authors drew the pairs from
WordNet, VerbNet and Wiktionary examples; this recipe draws them from WordNet alone, through the
annotation of ``wordnet-wsd`` (:func:`~ptmkit.data.sources.wordnet_wsd.instances`: an example
sentence of a synset in which one of the synset's polysemous lemmas was found).  For each lemma
(with its part of speech) having examples of at least two of its senses:

- label 1: two example sentences of the *same* synset containing the lemma;
- label 0: example sentences of two *different* synsets of the lemma;

as many of each per lemma (the smaller number of the two, drawn with ``np.random.default_rng``),
so the task is balanced and a lemma's prior cannot answer it.  The target occurrence is marked
in both sentences (``the *dog* barked all night``), as WiC gives its position.

Split **by lemma** (80/10/10 of the shuffled lemmas): no lemma of dev or test occurs in training,
so a model must judge the senses of words it was not trained on.  The majority-class baseline
is in ``stats.json``.

Outputs (``$PTMKIT_HOME/data/wordnet-wic/``): ``train/dev/test.jsonl`` with ``text``,
``text_pair`` (the two marked sentences), ``label``, ``lemma``, ``pos``, ``synsets`` (the two);
``stats.json``.  Built-in task: ``wordnet-wic`` (sentence-pair classification).
Caution: the ``english-mix`` corpus includes WordNet's examples.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.parts import split_groups, write_parts
from ptmkit.data.sources.wordnet_wsd import instances, read_wordnet
from ptmkit.registry import register

SEED = 2019  # Pilehvar & Camacho-Collados (2019)
FRACTIONS = (0.8, 0.1, 0.1)


def mark(row: dict) -> str:
    """The instance's sentence with its target occurrence between asterisks."""
    t = row["text"]
    return f"{t[: row['start']]}*{t[row['start'] : row['end']]}*{t[row['end'] :]}"


def wic_pairs(rows: list[dict], rng: np.random.Generator) -> dict[tuple[str, str], list[dict]]:
    """``wordnet-wsd`` instances -> balanced WiC pairs grouped by ``(lemma, pos)``."""
    by_lemma: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by_lemma[(r["lemma"], r["pos"])].append(r)
    out = {}
    for key in sorted(by_lemma):
        group = by_lemma[key]
        same = [(a, b) for a, b in combinations(group, 2) if a["synset"] == b["synset"] and a["text"] != b["text"]]
        differ = [(a, b) for a, b in combinations(group, 2) if a["synset"] != b["synset"]]
        k = min(len(same), len(differ))
        if k == 0:
            continue
        chosen = [(p, 1) for p in (same[i] for i in rng.permutation(len(same))[:k])]
        chosen += [(p, 0) for p in (differ[i] for i in rng.permutation(len(differ))[:k])]
        pairs = []
        for (a, b), label in chosen:
            if rng.random() < 0.5:  # which sentence comes first carries no signal
                a, b = b, a
            pairs.append({"text": mark(a), "text_pair": mark(b), "label": label, "lemma": key[0], "pos": key[1],
                          "synsets": [a["synset"], b["synset"]]})
        out[key] = [pairs[i] for i in rng.permutation(len(pairs))]
    return out


def split_by_lemma(groups: dict[tuple[str, str], list[dict]], rng: np.random.Generator) -> dict[str, list[dict]]:
    """Shuffle the lemmas and cut them 80/10/10; a lemma's pairs stay in its part."""
    return split_groups([groups[k] for k in sorted(groups)], rng, FRACTIONS)


def part_stats(rows: list[dict]) -> dict:
    """Pairs, positives, the majority-class accuracy, and the lemmas or the kinds of pair."""
    positive = sum(r["label"] for r in rows)
    out = {"pairs": len(rows), "positive": positive,
           "majority_accuracy": round(max(positive, len(rows) - positive) / max(len(rows), 1), 4)}
    if rows and "lemma" in rows[0]:
        out["lemmas"] = len({(r["lemma"], r["pos"]) for r in rows})
    if rows and "kind" in rows[0]:
        kinds = [r["kind"] for r in rows]
        out["kinds"] = {k: kinds.count(k) for k in sorted(set(kinds))}
    return out


@register("source", "wordnet-wic")
class WordNetWiC(Source):
    name = "wordnet-wic"
    description = "Word-in-Context from WordNet 3.0 examples: same sense of a lemma in two sentences? balanced, split by lemma"
    packages = (Package("debian", "wordnet-base"),)
    license = "WordNet 3.0 licence (Princeton University, BSD-like)"
    tasks = {"wordnet-wic": {"type": "classification", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                             "text": "text", "text_pair": "text_pair", "label": "label"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        synsets, senses = read_wordnet(files[0], work)
        rng = np.random.default_rng(SEED)
        groups = wic_pairs(instances(synsets, senses), rng)
        write_parts(split_by_lemma(groups, rng), out, {"lemmas": len(groups), "seed": SEED}, part_stats)
