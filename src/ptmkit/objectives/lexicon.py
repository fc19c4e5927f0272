"""Lexical resources read by the knowledge-enhanced objectives, as plain TSV files a user can
write (or ``ptm data get wordnet-kg`` writes from WordNet):

* a **supersense lexicon** (SenseBERT): ``word<TAB>supersense`` per line, one line per sense a
  word may take (``dog<TAB>noun.animal``, ``dog<TAB>noun.person``, ``run<TAB>verb.motion``);
* **related word pairs** (LIBERT): ``word<TAB>word`` per line, each a lexical relation the model
  should recognise (synonyms, a hyponym and its hypernym);
* a **word-to-entity alignment** (ERNIE, Tsinghua): ``word<TAB>entity`` per line, the entity
  (a row name of an entity vectors file) a word stands for.

Words are matched lowercased; multi-word entries (``hot dog``) are kept as written.  A malformed
line is an error naming the file and line number.  The name ``wordnet`` instead of a file reads
the ones derived from WordNet 3.0 (:func:`ptmkit.knowledge.lexicons.named_lexicons`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.knowledge.lexicons import ALIGNMENT_FILE, GRAPHS, PAIRS_FILE, SUPERSENSE_FILE, named_lexicons


def _lines(path: str | Path, what: str, setting: str, derived: str) -> list[tuple[int, list[str]]]:
    path = named_lexicons(str(path))[derived] if str(path) in GRAPHS else Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PtmError(f"{setting}={path}: the {what} file does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PtmError(f"{setting}={path}: cannot read the {what} file ({exc}); it must be UTF-8 text") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) != 2 or not all(fields):
            raise PtmError(f"{path}:{n}: expected two tab-separated fields ({what}), got {line[:80]!r}")
        out.append((n, fields))
    if not out:
        raise PtmError(f"{setting}={path}: the {what} file holds no entry")
    return out


def read_supersenses(path: str | Path) -> tuple[dict[str, set[str]], list[str]]:
    """``(word -> its allowed supersenses, the supersense names sorted)`` from a lexicon file."""
    senses: dict[str, set[str]] = {}
    for _, (word, sense) in _lines(path, "supersense lexicon (word<TAB>supersense)", "objective.lexicon",
                                 SUPERSENSE_FILE):
        senses.setdefault(word.lower(), set()).add(sense)
    return senses, sorted({s for v in senses.values() for s in v})


def read_pairs(path: str | Path) -> tuple[list[str], np.ndarray]:
    """``(words, pairs int64 [P, 2])``: the distinct words (lowercased, sorted) and each related
    pair as indices into them (duplicates dropped)."""
    rows = [(a.lower(), b.lower()) for _, (a, b) in _lines(path, "word pairs (word<TAB>word)", "objective.pairs", PAIRS_FILE)]
    words = sorted({w for pair in rows for w in pair})
    index = {w: i for i, w in enumerate(words)}
    pairs = np.unique(np.array([(index[a], index[b]) for a, b in rows if a != b], dtype=np.int64).reshape(-1, 2),
                      axis=0)
    if not len(pairs):
        raise PtmError(f"objective.pairs={path}: no pair of two different words")
    return words, pairs


def read_alignment(path: str | Path) -> dict[str, str]:
    """``word (lowercased) -> entity name`` from an alignment file; the first line of a word wins."""
    out: dict[str, str] = {}
    for _, (word, entity) in _lines(path, "word-to-entity alignment (word<TAB>entity)", "objective.alignment",
                                   ALIGNMENT_FILE):
        out.setdefault(word.lower(), entity)
    return out


def token_words(tokenizer, vocab_size: int) -> list[str | None]:
    """The word each vocabulary entry spells (lowercased), or ``None`` for a special token, a
    word piece that continues a word (``##s``) or an entry the tokenizer cannot name."""
    id_to_token = getattr(tokenizer, "id_to_token", None)
    if id_to_token is None:
        raise PtmError("this objective needs a tokenizer that names its tokens (id_to_token)")
    out: list[str | None] = []
    for i in range(vocab_size):  # once per vocabulary entry, when the objective is built
        tok = id_to_token(i)
        if tok is None or tok.startswith("##") or (tok.startswith("[") and tok.endswith("]")):
            out.append(None)
        else:
            out.append(tok.lstrip("Ġ▁").lower() or None)
    return out


__all__ = ["read_alignment", "read_pairs", "read_supersenses", "token_words"]
