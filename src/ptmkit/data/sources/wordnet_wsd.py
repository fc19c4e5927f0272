"""Word-sense disambiguation from WordNet 3.0's example sentences (Debian ``wordnet-base``).

Many synsets carry example sentences in their gloss (``dog``, sense 1: "the dog barked all
night").  Each example that contains one of its synset's lemmas, where that lemma (with its part
of speech) has at least two senses, becomes an instance labelled by the synset it illustrates.
It is framed as multiple choice over the lemma's senses: the choices are the definitions of the
lemma's synsets (each read after the target word, ``"dog: a member of the genus Canis"``, which
tells the model which word of the sentence to disambiguate) in WordNet's sense order (``index.POS``:
sense 1 is the most frequent in SemCor),
the answer is the illustrated one, so a model must match the context to the right definition
(GlossBERT's framing, Huang et al. 2019).  Always answering choice 0 is the most-frequent-sense
baseline, which ``stats.json`` reports.

The target is found in the sentence as the lemma (``_`` read as a space) or an inflection of it
(``-s``, ``-es``, ``-ed``, ``-d``, ``-ing``, ``-ies``/``-ied`` for a final ``y``, a doubled final
consonant), case-insensitively and on word boundaries; examples without such a match are
dropped.  Where several lemmas match, the longest is the target.  Instances are shuffled with
``np.random.default_rng(SEED)`` and split 80/10/10.

Caution: the ``english-mix`` pre-training corpus includes WordNet's glosses and examples; a
model pre-trained on it has read this task's test sentences.

Outputs (``$PTMKIT_HOME/data/wordnet-wsd/``): ``train/dev/test.jsonl`` with ``text``, ``target``,
``start``/``end`` (character offsets of the target), ``lemma``, ``pos``, ``choices`` (definitions),
``label`` (the answer's index), ``synset`` (``offset-pos``); ``stats.json``.
Built-in task: ``wordnet-wsd`` (multiple choice).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source, _run
from ptmkit.data.sources.parts import cut, write_parts
from ptmkit.errors import PtmError
from ptmkit.registry import register

SEED = 1995  # WordNet (Miller 1995)
FRACTIONS = (0.8, 0.1, 0.1)
POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}


def parse_synset(line: str) -> tuple[str, str, list[str], str, list[str]] | None:
    """A ``data.POS`` line -> ``(offset, pos, lemmas, definition, examples)`` (``None`` for the
    licence header).  Satellite adjectives (``s``) count as adjectives (``a``)."""
    if line.startswith("  ") or " | " not in line:
        return None
    head, gloss = line.split(" | ", 1)
    fields = head.split()
    offset, pos, count = fields[0], fields[2].replace("s", "a"), int(fields[3], 16)
    lemmas = [re.sub(r"\([a-z]+\)$", "", w).lower() for w in fields[4 : 4 + 2 * count : 2]]
    definition, examples = [], []
    for part in gloss.strip().split(";"):
        part = part.strip()
        if part.startswith('"'):
            text = part.strip('"').split('"')[0].strip()
            if text:
                examples.append(text)
        elif part:
            definition.append(part)
    return offset, pos, lemmas, "; ".join(definition), examples


def parse_index(line: str) -> tuple[str, str, list[str]] | None:
    """An ``index.POS`` line -> ``(lemma, pos, synset offsets in sense order)``."""
    if line.startswith("  "):
        return None
    fields = line.split()
    lemma, pos, n_synsets, n_pointers = fields[0], fields[1].replace("s", "a"), int(fields[2]), int(fields[3])
    offsets = fields[4 + n_pointers + 2 :]
    if len(offsets) != n_synsets:
        raise PtmError(f"WordNet index line for {lemma!r} lists {len(offsets)} synsets, expected {n_synsets}")
    return lemma, pos, offsets


def lemma_pattern(lemma: str) -> re.Pattern:
    """Word-bounded, case-insensitive: the lemma or a regular inflection of its last word."""
    words = lemma.replace("_", " ").split()
    last = re.escape(words[-1])
    forms = [last + r"(?:s|es|ed|d|ing)?"]
    if words[-1].endswith("y"):
        forms.append(re.escape(words[-1][:-1]) + r"(?:ies|ied)")
    if len(words[-1]) > 2 and words[-1][-1] not in "aeiouwxy":
        forms.append(last + re.escape(words[-1][-1]) + r"(?:ed|ing|er)")
    prefix = "".join(re.escape(w) + r"\s+" for w in words[:-1])
    return re.compile(r"(?<![\w-])" + prefix + "(?:" + "|".join(forms) + r")(?![\w-])", re.IGNORECASE)


def instances(synsets: dict[str, tuple], senses: dict[tuple[str, str], list[str]]) -> list[dict]:
    """Labelled instances from ``synsets`` (``offset-pos -> parsed synset``) and the sense
    inventory ``senses`` (``(lemma, pos) -> [offset-pos in sense order]``)."""
    out = []
    for key, (_offset, pos, lemmas, _definition, examples) in synsets.items():
        candidates = sorted((lm for lm in set(lemmas) if len(senses.get((lm, pos), ())) >= 2), key=lambda s: (-len(s), s))
        for text in examples:
            for lemma in candidates:
                found = lemma_pattern(lemma).search(text)
                if found is None:
                    continue
                inventory = senses[(lemma, pos)]
                out.append({
                    "text": text, "target": found.group(0), "start": found.start(), "end": found.end(),
                    "lemma": lemma, "pos": pos, "choices": [synsets[s][3] for s in inventory],
                    "label": inventory.index(key), "synset": key,
                })
                break
    return out


def part_stats(rows: list[dict]) -> dict:
    """Instances, mean number of choices, and the most-frequent-sense and random baselines."""
    return {
        "instances": len(rows),
        "mean_choices": round(float(np.mean([len(r["choices"]) for r in rows])), 2),
        "most_frequent_sense_accuracy": round(float(np.mean([r["label"] == 0 for r in rows])), 4),
        "random_accuracy": round(float(np.mean([1 / len(r["choices"]) for r in rows])), 4),
    }


def read_wordnet(deb: Path, work: Path) -> tuple[dict[str, tuple], dict[tuple[str, str], list[str]]]:
    """Unpack ``wordnet-base`` and read every synset (``offset-pos -> parsed line``) and the
    sense inventory (``(lemma, pos) -> [offset-pos in sense order]``)."""
    root = work / "root"
    root.mkdir(exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(root)], "Debian package wordnet-base (unpacking)")
    return read_wordnet_dir(root / "usr/share/wordnet")


def read_wordnet_dir(wn: Path) -> tuple[dict[str, tuple], dict[tuple[str, str], list[str]]]:
    """:func:`read_wordnet` of an unpacked database directory (``data.noun``, ``index.noun`` ...)."""
    synsets: dict[str, tuple] = {}
    senses: dict[tuple[str, str], list[str]] = {}
    for name in POS_FILES.values():
        with open(wn / f"data.{name}", encoding="utf-8", errors="replace") as f:
            for line in f:
                parsed = parse_synset(line)
                if parsed:
                    synsets[f"{parsed[0]}-{parsed[1]}"] = parsed
        with open(wn / f"index.{name}", encoding="utf-8", errors="replace") as f:
            for line in f:
                parsed_index = parse_index(line)
                if parsed_index:
                    lemma, p, offsets = parsed_index
                    senses[(lemma, p)] = [f"{o}-{p}" for o in offsets]
    return synsets, senses


@register("source", "wordnet-wsd")
class WordNetWSD(Source):
    name = "wordnet-wsd"
    description = "word-sense disambiguation on WordNet 3.0 example sentences, multiple choice over definitions"
    packages = (Package("debian", "wordnet-base"),)
    license = "WordNet 3.0 licence (Princeton University, BSD-like)"
    tasks = {"wordnet-wsd": {"type": "multiple_choice", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                             "text": "text", "choices": "choices", "label": "label", "prefix": "target"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        synsets, senses = read_wordnet(files[0], work)
        rows = instances(synsets, senses)
        parts = {part: [rows[i] for i in idx] for part, idx in cut(len(rows), np.random.default_rng(SEED), FRACTIONS).items()}
        write_parts(parts, out, {"synsets": len(synsets), "instances": len(rows), "seed": SEED}, part_stats)
