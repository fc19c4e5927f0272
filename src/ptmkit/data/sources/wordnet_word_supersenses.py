"""Which supersenses can a word take?  Multi-label classification of WordNet 3.0's polysemous noun
and verb lemmas (Debian ``wordnet-base``).

A *supersense* is a synset's lexicographer file (lexnames(5): ``noun.animal``, ``verb.motion``
..., 26 for nouns and 15 for verbs; :mod:`~ptmkit.data.sources.wordnet_supersense`).  Each lemma
with at least two noun or verb synsets (``index.noun`` and ``index.verb``, its spelling whatever
its part of speech: ``bank``'s ten noun and eight verb senses make one example) is one example:
its text is the lemma (underscores as spaces: ``dog food``), its labels the set of supersenses of
all its noun and verb synsets (``bank``: ``noun.act``, ``noun.artifact``, ``noun.group``,
``noun.object``, ``noun.possession``, ``verb.cognition``, ``verb.contact``, ``verb.motion``,
``verb.possession``).  The input is the word alone, no
definition or example, so a model answers from what it knows of the word; a lemma with one synset
would be a single-label example, and these are left out.

Split **by lemma** (80/10/10 of the lemmas in sorted order, shuffled by
``np.random.default_rng(SEED)``): each lemma is one example, so no word of dev or test is seen in
training (compounds may share words: ``dog`` and ``dog food`` can fall in different parts).

Outputs (``$PTMKIT_HOME/data/wordnet-word-supersenses/``): ``train/dev/test.jsonl`` with ``text``,
``labels`` (sorted), ``synsets`` (the number of noun and verb synsets); ``stats.json`` (examples,
labels, label cardinality, the share with more than one label and each label's count, per part;
and two baselines: the training split's most frequent label set, and the ``k`` most frequent
labels for every example with ``k`` chosen on dev by micro-F1).  Built-in task:
``wordnet-word-supersenses`` (multi_label).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.parts import cut, write_parts
from ptmkit.data.sources.wordnet_supersense import supersenses
from ptmkit.data.sources.wordnet_wsd import read_wordnet
from ptmkit.errors import PtmError
from ptmkit.registry import register
from ptmkit.tasks.metrics import multi_hot, multi_label_scores

SEED = 2006  # Ciaramita & Altun (2006), supersense tagging
FRACTIONS = (0.8, 0.1, 0.1)
POS = ("n", "v")
MIN_SYNSETS = 2


def lemma_rows(senses: dict[tuple[str, str], list[str]], supersense: dict[str, str]) -> list[dict]:
    """One row per lemma with at least :data:`MIN_SYNSETS` noun and verb synsets (``senses``:
    ``(lemma, pos) -> [offset-pos]``), in sorted lemma order."""
    labels: dict[str, set[str]] = defaultdict(set)
    count: Counter = Counter()
    for (lemma, pos), keys in senses.items():
        if pos in POS:
            labels[lemma].update(supersense[k] for k in keys)
            count[lemma] += len(keys)
    return [{"text": lemma.replace("_", " "), "labels": sorted(labels[lemma]), "synsets": count[lemma]}
            for lemma in sorted(labels) if count[lemma] >= MIN_SYNSETS]


def part_stats(rows: list[dict]) -> dict:
    """Examples, labels, label cardinality, the share with more than one label, each label's count."""
    counts = Counter(x for r in rows for x in r["labels"])
    sizes = [len(r["labels"]) for r in rows]
    return {"examples": len(rows), "labels": len(counts), "cardinality": round(float(np.mean(sizes)), 4),
            "more_than_one": round(float(np.mean([s > 1 for s in sizes])), 4), "counts": dict(sorted(counts.items()))}


def _scores(rows: list[dict], predicted: set[str]) -> dict:
    """micro-F1, macro-F1 (labels gold or predicted) and exact match of predicting ``predicted`` for every row."""
    names = sorted({x for r in rows for x in r["labels"]} | predicted)
    gold = multi_hot([r["labels"] for r in rows], names)
    pred = multi_hot([sorted(predicted)] * len(rows), names)
    return {k: round(v, 4) for k, v in multi_label_scores(gold, pred).items()}


def baselines(parts: dict[str, list[dict]]) -> dict:
    """The training split's most frequent label set, and its ``k`` most frequent labels (``k`` of
    1..10 chosen by dev micro-F1), predicted for every example: their scores on dev and test."""
    train = parts["train"]
    top_set = Counter(tuple(r["labels"]) for r in train).most_common(1)[0][0]
    ranked = [x for x, _ in Counter(x for r in train for x in r["labels"]).most_common()]
    k = max(range(1, 11), key=lambda n: (_scores(parts["dev"], set(ranked[:n]))["micro_f1"], -n))
    return {"most_frequent_set": {"labels": list(top_set),
                                  **{p: _scores(parts[p], set(top_set)) for p in ("dev", "test")}},
            "frequent_labels": {"k": k, "labels": ranked[:k],
                                **{p: _scores(parts[p], set(ranked[:k])) for p in ("dev", "test")}}}


@register("source", "wordnet-word-supersenses")
class WordNetWordSupersenses(Source):
    name = "wordnet-word-supersenses"
    description = ("multi-label: the supersenses (noun and verb lexicographer files) of all senses of a polysemous "
                   "WordNet 3.0 lemma, from the word alone; split by lemma")
    packages = (Package("debian", "wordnet-base"),)
    license = "WordNet 3.0 licence (Princeton University, BSD-like)"
    tasks = {"wordnet-word-supersenses": {"type": "multi_label", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                                          "text": "text", "label": "labels"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        _, senses = read_wordnet(files[0], work)  # unpacks into work/root
        rows = lemma_rows(senses, supersenses(work / "root/usr/share/wordnet"))
        parts = {p: [rows[i] for i in idx] for p, idx in cut(len(rows), np.random.default_rng(SEED), FRACTIONS).items()}
        train = {x for r in parts["train"] for x in r["labels"]}
        unseen = sorted({x for p in ("dev", "test") for r in parts[p] for x in r["labels"]} - train)
        if unseen:  # the multi_label reader refuses them; WordNet 3.0 has none
            raise PtmError(f"wordnet-word-supersenses: {', '.join(unseen)} occur in dev or test but not in training")
        write_parts(parts, out, {"examples": len(rows), "seed": SEED, "min_synsets": MIN_SYNSETS, "pos": list(POS),
                                 **part_stats(rows), "baselines": baselines(parts)}, part_stats)
