"""Extractive span QA built from WordNet 3.0's sense-annotated example sentences.

No package registry carries an extractive QA corpus (SQuAD and its kin are downloaded from the
web at run time by every library that offers them), so this is the closest real span-extraction
task that registry data allows.  It uses the annotation of ``wordnet-wsd``: an example sentence
illustrates one sense of a polysemous lemma, and the lemma's word in it is known.

One question per such lemma sense: the *question* is the sense's definition; the *context* holds
one example sentence for each sense of the lemma that has one (at least two), in random order;
the *answer* is the target word in the sentence of the defined sense.  A reader must find the
sentence whose usage fits the definition and point at the word (always the same lemma, so
string matching alone cannot tell the senses apart)::

    question: "the quality of being physically deep"
    context:  "the profundity of his thought. the profundity of the mine was almost a mile. ..."
    answer:   "profundity" (the second occurrence, character 49)

Answers are character offsets into the context, SQuAD style.  Lemmas are shuffled with
``np.random.default_rng(SEED)`` and split 80/10/10 by lemma, so a context never appears in two
splits.  ``stats.json`` gives the share answered by picking the first sentence's target.

Outputs (``$PTMKIT_HOME/data/wordnet-qa/``): ``train/dev/test.jsonl`` with ``id``, ``question``,
``context``, ``answers`` (``[{"text", "start"}]``), ``lemma``; ``stats.json``.
Built-in task: ``wordnet-qa`` (span QA).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.parts import split_groups, write_parts
from ptmkit.data.sources.wordnet_wsd import instances, read_wordnet
from ptmkit.registry import register

SEED = 2016  # SQuAD (Rajpurkar et al. 2016)
FRACTIONS = (0.8, 0.1, 0.1)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text[-1:] in ".!?" else text + "."


def questions(rows: list[dict], rng: np.random.Generator) -> list[list[dict]]:
    """QA items grouped by lemma (a group shares one context), from ``wordnet-wsd`` instances."""
    by_lemma: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:  # one example sentence per sense: the first found
        by_lemma.setdefault((r["lemma"], r["pos"]), {}).setdefault(r["synset"], r)
    groups = []
    for (lemma, pos), per_sense in sorted(by_lemma.items()):
        if len(per_sense) < 2:
            continue
        chosen = list(per_sense.values())
        chosen = [chosen[i] for i in rng.permutation(len(chosen))]
        context, starts = "", []
        for r in chosen:
            starts.append(len(context) + (1 if context else 0))
            context = (context + " " if context else "") + _sentence(r["text"])
        group = []
        for r, offset in zip(chosen, starts):
            start = offset + r["start"]
            assert context[start : start + len(r["target"])] == r["target"]
            group.append({
                "id": f"{lemma}.{pos}.{r['synset']}", "question": r["choices"][r["label"]], "context": context,
                "answers": [{"text": r["target"], "start": start}], "lemma": lemma,
                "first_sentence": r is chosen[0],
            })
        groups.append(group)
    return groups


def part_stats(items: list[dict]) -> dict:
    """Contexts (lemmas), questions, the exact match of answering from the first sentence, and
    the mean context length."""
    return {
        "contexts": len({q["id"].rsplit(".", 1)[0] for q in items}),  # id: lemma.pos.synset
        "questions": len(items),
        "first_sentence_baseline_em": round(float(np.mean([q["first_sentence"] for q in items])), 4),
        "mean_context_words": round(float(np.mean([len(q["context"].split()) for q in items])), 1),
    }


@register("source", "wordnet-qa")
class WordNetQA(Source):
    name = "wordnet-qa"
    description = "span QA: find the word used in the defined sense among a lemma's WordNet example sentences"
    packages = (Package("debian", "wordnet-base"),)
    license = "WordNet 3.0 licence (Princeton University, BSD-like)"
    tasks = {"wordnet-qa": {"type": "span_qa", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                            "question": "question", "context": "context", "answers": "answers"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        synsets, senses = read_wordnet(files[0], work)
        rng = np.random.default_rng(SEED)
        groups = questions(instances(synsets, senses), rng)
        write_parts(split_groups(groups, rng, FRACTIONS), out,
                    {"contexts": len(groups), "questions": sum(map(len, groups)), "seed": SEED}, part_stats,
                    drop=("first_sentence",))
