"""Classic analogies answered by Skip-gram vectors trained on english-mix (fixed seed, one thread).

Slow (fetches the 12.6M-word corpus and trains on its first 3M words): ``pytest -m slow``.
"""

from __future__ import annotations

import itertools

import pytest

from ptmkit.data.sources.base import fetch
from ptmkit.static.word2vec import train_word2vec

pytestmark = pytest.mark.slow

CLASSIC = [
    ("man", "king", "woman", "queen"),
    ("man", "father", "woman", "mother"),
    ("go", "went", "come", "came"),
    ("big", "bigger", "small", "smaller"),
    ("france", "french", "germany", "german"),
]


def test_classic_analogies_on_english_mix(tmp_path):
    src = fetch("english-mix") / "english-mix.txt"
    prefix = tmp_path / "prefix.txt"
    n = 0
    with open(src, encoding="utf-8") as f, open(prefix, "w", encoding="utf-8") as out:
        for line in itertools.takewhile(lambda _: n < 3_000_000, f):
            out.write(line)
            n += len(line.split())
    wv = train_word2vec(prefix, {"model": "skipgram", "loss": "ns", "dim": 100, "window": 5, "epochs": 5,
                                 "min_count": 5, "lowercase": True, "seed": 1, "workers": 1}, progress=False)
    top1 = {d: wv.analogy(a, b, c, topn=1)[0][0] for a, b, c, d in CLASSIC}
    assert sum(top1[d] == d for *_, d in CLASSIC) >= 4, top1
    assert top1["queen"] == "queen"
