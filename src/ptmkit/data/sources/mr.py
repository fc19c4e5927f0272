"""MR: movie-review sentence polarity, from the VADER ground truth (Hutto & Gilbert, ICWSM 2014).

``vaderSentiment`` ships ``additional_resources/hutto_ICWSM_2014.tar.gz`` whose
``movieReviewSnippets_GroundTruth.txt`` holds 10,605 sentences of Pang & Lee's movie reviews,
each with the mean of >= 20 human ratings on [-4, +4].  The ratings are bimodal (few sentences
near 0), so they are binarised with a neutral band: rating > +0.5 -> label 1 (positive),
rating < -0.5 -> label 0 (negative), |rating| <= 0.5 dropped (562 sentences).  Exact duplicate
texts are kept once (the first).  The rest is shuffled with ``np.random.default_rng(SEED)`` and
split 80/10/10 into train/dev/test.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.errors import PtmError
from ptmkit.registry import register

PACKAGE = "vadersentiment==3.3.2"
SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"  # vaderSentiment-3.3.2.tar.gz
INNER = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
MEMBER = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
NEUTRAL = 0.5  # |rating| <= NEUTRAL is dropped
SEED = 2004  # Pang & Lee (2004)
FRACTIONS = (0.8, 0.1, 0.1)


def parse_ground_truth(text: str) -> list[tuple[int, float, str]]:
    """Rows ``(id, mean_rating, sentence)`` of the tab-separated ground-truth file."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise PtmError(f"{MEMBER}:{n}: expected 3 tab-separated fields, got {len(parts)}")
        rows.append((int(parts[0]), float(parts[1]), parts[2].strip()))
    return rows


def binarise(rows: list[tuple[int, float, str]]) -> list[dict]:
    """Labelled examples: drop the neutral band and duplicate texts."""
    seen: set[str] = set()
    out = []
    for rid, rating, text in rows:
        if abs(rating) <= NEUTRAL or not text or text in seen:
            continue
        seen.add(text)
        out.append({"text": text, "label": int(rating > 0), "rating": rating, "id": rid})
    return out


def split(examples: list[dict], seed: int = SEED) -> dict[str, list[dict]]:
    """Shuffle with ``default_rng(seed)`` and cut 80/10/10."""
    order = np.random.default_rng(seed).permutation(len(examples))
    n_train = int(FRACTIONS[0] * len(examples))
    n_dev = int(FRACTIONS[1] * len(examples))
    cuts = {"train": order[:n_train], "dev": order[n_train : n_train + n_dev], "test": order[n_train + n_dev :]}
    return {name: [examples[i] for i in idx] for name, idx in cuts.items()}


@register("source", "mr")
class MovieReviews(Source):
    name = "mr"
    description = "movie-review sentence polarity (Pang & Lee sentences, VADER human ratings), 80/10/10 split"
    packages = (Package("pypi", PACKAGE, SHA256, sdist=True),)
    origin = f"PyPI {PACKAGE} (sdist), {INNER.split('/', 1)[1]}"
    license = "MIT (vaderSentiment); sentences from Pang & Lee (2004) movie reviews, research use"
    tasks = {"mr": {"type": "classification", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                    "text": "text", "label": "label"},
             # the same sentences scored by their mean human rating in [-4, 4] (|rating| > 0.5)
             "mr-rating": {"type": "regression", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                           "text": "text", "label": "rating"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (archive,) = files
        with tarfile.open(archive) as outer:
            inner = outer.extractfile(INNER)
            if inner is None:
                raise PtmError(f"{archive.name} lacks {INNER}")
            with tarfile.open(fileobj=io.BytesIO(inner.read())) as tar:
                member = tar.extractfile(MEMBER)
                if member is None:
                    raise PtmError(f"{INNER} lacks {MEMBER}")
                text = member.read().decode("utf-8")
        rows = parse_ground_truth(text)
        examples = binarise(rows)
        splits = split(examples)
        stats: dict = {
            "sentences_in_source": len(rows),
            "dropped_neutral": sum(abs(r) <= NEUTRAL for _, r, _t in rows),
            "examples": len(examples),
            "neutral_band": NEUTRAL,
            "seed": SEED,
            "splits": {},
        }
        for name, rows_ in splits.items():
            with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
                for ex in rows_:
                    f.write(json.dumps(ex, ensure_ascii=False) + "\n")
            pos = sum(ex["label"] for ex in rows_)
            stats["splits"][name] = {"n": len(rows_), "positive": pos, "negative": len(rows_) - pos}
        with open(out / "unlabeled_train.txt", "w", encoding="utf-8") as f:
            f.writelines(ex["text"] + "\n" for ex in splits["train"])
        (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
        (out / "README.md").write_text(
            "# MR: movie-review sentence polarity\n\n"
            f"Origin: {self.origin}, sha256 {SHA256}.\n"
            f"{stats['sentences_in_source']} sentences with mean human ratings in [-4, 4] (Hutto & Gilbert 2014).\n"
            f"label 1 = rating > {NEUTRAL}, label 0 = rating < -{NEUTRAL}; {stats['dropped_neutral']} neutral\n"
            f"sentences dropped, duplicates kept once: {len(examples)} examples, shuffled with\n"
            f"numpy default_rng({SEED}) and split 80/10/10.\n\n"
            "Files: train/dev/test.jsonl (`text`, `label`, `rating`, `id`), unlabeled_train.txt (train texts).\n\n"
            + "".join(f"- {k}: {v['n']} ({v['positive']} positive, {v['negative']} negative)\n" for k, v in stats["splits"].items())
        )
