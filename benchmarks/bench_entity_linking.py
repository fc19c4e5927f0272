"""What entity linking against WordNet costs: ``link_corpus`` over real text, streamed.

Loads the ``wordnet-kg`` graph (``ptm data get wordnet-kg``), builds the :class:`Linker` (surface
keys per span length), then links text files given as arguments (default: the Penn Treebank's
training text and the Brown corpus of the data cache, about 2M words) chunk by chunk, and reports:

- ``load_s`` (the graph's npz + json), ``linker_s`` (the linker's keys), ``link_s`` and
  ``words_per_s`` (the linking itself: type lookups, keys, ``searchsorted``, maximal munch);
- ``linked_share``: the share of words inside a linked span, ``spans``, ``multiword_spans``;
- ``rss_before_linking_mb`` (the process with the graph and linker, and the packages the data
  cache's registry imports) and ``peak_rss_mb`` after linking: the difference is bounded by the
  chunk, not the text.

A shared machine's load distorts the figures; the load average is printed with them.  The last
line printed is one JSON object.

    python benchmarks/bench_entity_linking.py [FILE ...] [--chunk-words 1048576]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np

from ptmkit import paths
from ptmkit.data.sources.wordnet_kg import load_wordnet_graph
from ptmkit.knowledge.linking import CHUNK_WORDS, Linker, link_corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--chunk-words", type=int, default=CHUNK_WORDS)
    args = parser.parse_args()
    data = paths.data_dir()
    files = args.files or [data / "ptb" / "train.txt", data / "brown" / "brown.txt"]
    t0 = time.perf_counter()
    graph = load_wordnet_graph()
    t1 = time.perf_counter()
    linker = Linker(graph)
    t2 = time.perf_counter()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # torch, imported by the registry, included
    words = spans = linked = multi = 0
    for f in files:
        result = link_corpus(f, linker, chunk_words=args.chunk_words)
        words += len(result.entities)
        spans += result.spans
        linked += result.linked_words
        multi += result.linked_words - result.spans  # words beyond the first of each span
    t3 = time.perf_counter()
    out = {"files": [str(f) for f in files], "words": words, "load_s": round(t1 - t0, 2), "linker_s": round(t2 - t1, 2),
           "link_s": round(t3 - t2, 2), "words_per_s": round(words / (t3 - t2)), "spans": spans,
           "linked_share": round(linked / max(words, 1), 4), "words_beyond_first_in_spans": multi,
           "rss_before_linking_mb": round(rss_before),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "load_average": [round(x, 2) for x in os.getloadavg()], "chunk_words": args.chunk_words,
           "max_span": int(linker.max_len), "graph_words": len(linker.vocab), "numpy": np.__version__}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
