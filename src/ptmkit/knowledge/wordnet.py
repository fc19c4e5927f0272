"""WordNet 3.0's database files as a :class:`~ptmkit.knowledge.graph.KnowledgeGraph`.

Read from the files of ``usr/share/wordnet/`` (Debian ``wordnet-base``), following wndb(5):

- ``data.POS``: one synset per line, ``synset_offset lex_filenum ss_type w_cnt word lex_id ...
  p_cnt [ptr...] [frames...] | gloss``; ``w_cnt`` is two hexadecimal digits, ``lex_id`` one,
  ``p_cnt`` three decimal digits; each pointer is ``pointer_symbol synset_offset pos source/target``,
  where ``source/target`` (four hexadecimal digits) is ``0000`` for a semantic pointer between
  synsets and otherwise names the source and target word numbers of a lexical pointer between
  words.  Both kinds become synset-level triples (as WN18 does: its antonym-free relation set
  includes the lexical ``_derivationally_related_form`` and ``_also_see``).  Entities are synsets,
  named ``offset-pos`` (``02084071-n``; satellite adjectives ``s`` count as ``a``: their offsets
  share ``data.adj``), labelled ``lemma.pos.NN`` as NLTK names them (``dog.n.01``).
- ``lex_filenum`` is the synset's lexicographer file, its *supersense* (:data:`LEXNAMES`, the 45
  names of lexnames(5), which Debian does not ship as a file).
- ``index.POS``: a lemma's synsets in sense order (sense 1 the most frequent in the semantic
  concordances).  ``cntlist.rev`` (``sense_key sense_number tag_cnt``) gives the tag counts: the
  prior of each (surface, synset) candidate; a surface shared by several parts of speech orders
  all its candidates by count (ties keep noun, verb, adjective, adverb and sense order).
- ``POS.exc``: irregular inflections (``mice mouse``) for entity linking.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.knowledge.graph import KnowledgeGraph, normalise, surface_table

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
SS_TYPE_POS = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}  # sense-key ss_type -> index POS

# lexnames(5): lexicographer file number -> name (the supersense).
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact", "noun.attribute",
    "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling", "noun.food", "noun.group",
    "noun.location", "noun.motive", "noun.object", "noun.person", "noun.phenomenon", "noun.plant",
    "noun.possession", "noun.process", "noun.quantity", "noun.relation", "noun.shape", "noun.state",
    "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition", "verb.communication",
    "verb.competition", "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather", "adj.ppl",
)

# wninput(5)'s pointer symbols -> relation names (WN18's names where WN18 has the relation).
POINTERS = {
    "@": "_hypernym", "@i": "_instance_hypernym", "~": "_hyponym", "~i": "_instance_hyponym",
    "#m": "_member_holonym", "#s": "_substance_holonym", "#p": "_part_of",
    "%m": "_member_meronym", "%s": "_substance_meronym", "%p": "_has_part",
    "!": "_antonym", "&": "_similar_to", "+": "_derivationally_related_form", "^": "_also_see",
    "$": "_verb_group", "=": "_attribute", "*": "_entailment", ">": "_cause", "<": "_participle",
    "\\": "_pertainym",  # adjectives: pertains to a noun; adverbs: derived from an adjective
    ";c": "_synset_domain_topic_of", "-c": "_member_of_domain_topic",
    ";r": "_synset_domain_region_of", "-r": "_member_of_domain_region",
    ";u": "_synset_domain_usage_of", "-u": "_member_of_domain_usage",
}
_MARKER = re.compile(r"\((?:a|p|ip)\)$")  # adjective position markers on lemmas: beautiful(a)


def parse_data_line(line: str, where: str = "data file") -> tuple[str, int, str, list[str], list[tuple[str, str, str, str]]] | None:
    """A ``data.POS`` line -> ``(key "offset-pos", lex_filenum, ss_type, words, pointers)`` with
    ``pointers`` as ``(symbol, target key, source/target)``; ``None`` for the licence header."""
    if line.startswith("  ") or not line.strip():
        return None
    fields = line.split(" | ", 1)[0].split()
    try:
        offset, lex_filenum, ss_type = fields[0], int(fields[1]), fields[2]
        w_cnt = int(fields[3], 16)
        words = [_MARKER.sub("", w) for w in fields[4 : 4 + 2 * w_cnt : 2]]
        at = 4 + 2 * w_cnt
        p_cnt = int(fields[at])
        ptr = fields[at + 1 : at + 1 + 4 * p_cnt]
        if len(ptr) != 4 * p_cnt or len(words) != w_cnt:
            raise ValueError("fewer fields than its counts announce")
        pointers = [(ptr[i], f"{ptr[i + 1]}-{'a' if ptr[i + 2] == 's' else ptr[i + 2]}", ptr[i + 3])
                    for i in range(0, len(ptr), 4)]
    except (IndexError, ValueError) as exc:
        raise PtmError(f"{where}: not a WordNet data line ({exc}): {line[:60]!r}") from exc
    pos = "a" if ss_type == "s" else ss_type
    return f"{offset}-{pos}", lex_filenum, ss_type, words, pointers


def read_counts(path: Path) -> dict[tuple[str, str, int], int]:
    """``cntlist.rev`` -> ``{(lemma, pos, sense_number): tag_count}`` (empty when absent)."""
    counts: dict[tuple[str, str, int], int] = {}
    if not path.is_file():
        return counts
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 3 or "%" not in parts[0]:
                raise PtmError(f"{path}:{n}: expected 'sense_key sense_number tag_cnt', got {line.strip()[:60]!r}")
            lemma, _, lex_sense = parts[0].partition("%")
            pos = SS_TYPE_POS.get(lex_sense[:1])
            if pos is not None:
                key = (lemma.lower(), pos, int(parts[1]))
                counts[key] = counts.get(key, 0) + int(parts[2])
    return counts


def read_exceptions(wn: Path) -> dict[str, list[str]]:
    """``POS.exc`` files -> ``{inflected: [base, ...]}`` (normalised surfaces, bases in file order)."""
    out: dict[str, list[str]] = {}
    for name in POS_FILES.values():
        path = wn / f"{name}.exc"
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2:
                    bases = out.setdefault(normalise(parts[0]), [])
                    bases.extend(b for b in map(normalise, parts[1:]) if b not in bases)
    return out


def read_graph(wn: str | Path) -> KnowledgeGraph:
    """The whole of WordNet in directory ``wn`` (``data.*``, ``index.*``, optional ``cntlist.rev``
    and ``*.exc``) as a graph with every pointer relation of :data:`POINTERS`."""
    wn = Path(wn)
    keys: list[str] = []
    lexfile: list[int] = []
    ss_types: list[str] = []
    words_of: list[list[str]] = []
    raw_triples: list[tuple[str, str, str]] = []
    for name in POS_FILES.values():
        path = wn / f"data.{name}"
        if not path.is_file():
            raise PtmError(f"{path} not found: not a WordNet 3.0 database directory (expected data.noun, index.noun, ...)")
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                parsed = parse_data_line(line, f"{path}:{n}")
                if parsed is None:
                    continue
                key, lex, ss_type, words, pointers = parsed
                keys.append(key)
                lexfile.append(lex)
                ss_types.append(ss_type)
                words_of.append(words)
                for symbol, target, _st in pointers:
                    if symbol not in POINTERS:
                        raise PtmError(f"{path}:{n}: unknown pointer symbol {symbol!r} (wninput(5) lists {' '.join(POINTERS)})")
                    raw_triples.append((key, POINTERS[symbol], target))
    entity = {k: i for i, k in enumerate(keys)}
    relations = sorted(set(POINTERS.values()))
    rel = {r: i for i, r in enumerate(relations)}
    missing = [t for _h, _r, t in raw_triples if t not in entity]
    if missing:
        raise PtmError(f"{wn}: a pointer targets synset {missing[0]}, which no data file holds")
    triples = np.array([(entity[h], rel[r], entity[t]) for h, r, t in raw_triples], dtype=np.int64).reshape(-1, 3)
    triples = np.unique(triples, axis=0)  # a lexical and a semantic pointer may join the same synsets

    counts = read_counts(wn / "cntlist.rev")
    pairs: list[tuple[str, int, float]] = []
    sense_number: dict[tuple[str, int], int] = {}  # (lemma, entity) -> sense number, for the labels
    for pos, name in POS_FILES.items():
        with open(wn / f"index.{name}", encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if line.startswith("  "):
                    continue
                fields = line.split()
                try:
                    lemma, n_synsets, n_pointers = fields[0], int(fields[2]), int(fields[3])
                    offsets = fields[4 + n_pointers + 2 :]
                except (IndexError, ValueError) as exc:
                    raise PtmError(f"{wn / f'index.{name}'}:{n}: not a WordNet index line ({exc})") from exc
                if len(offsets) != n_synsets:
                    raise PtmError(f"{wn / f'index.{name}'}:{n}: {lemma!r} lists {len(offsets)} synsets, expected {n_synsets}")
                for sense, off in enumerate(offsets, 1):
                    e = entity.get(f"{off}-{pos}")
                    if e is None:
                        raise PtmError(f"{wn / f'index.{name}'}:{n}: synset {off}-{pos} of {lemma!r} is in no data file")
                    pairs.append((lemma, e, float(counts.get((lemma.lower(), pos, sense), 0))))
                    sense_number[(lemma.lower(), e)] = sense
    surfaces, offsets_, cand, prior = surface_table(pairs)
    labels = []
    for e, (words, ss_type) in enumerate(zip(words_of, ss_types)):
        first = words[0].lower()
        labels.append(f"{first}.{ss_type}.{sense_number.get((first, e), 0):02d}")
    supersense = np.array(lexfile, dtype=np.int16)
    if len(supersense) and (supersense.min() < 0 or supersense.max() >= len(LEXNAMES)):
        raise PtmError(f"{wn}: a synset's lex_filenum {int(supersense.max())} is outside lexnames(5)'s 0..44")
    return KnowledgeGraph(entities=keys, relations=relations, triples=triples, surfaces=surfaces,
                          surface_offsets=offsets_, surface_entities=cand, surface_counts=prior,
                          supersense=supersense, supersense_names=list(LEXNAMES), labels=labels,
                          exceptions=read_exceptions(wn))
