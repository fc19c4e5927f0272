"""What keying the static models' corpus cache by content costs: the BLAKE2b digest of a text
file against the encoding it lets a second run skip.

Writes a text file of ``--mb`` MB (default 100; Zipf-distributed words from a 20,000-word
vocabulary, 20 words a line) into a temporary directory, then times:

- ``hash_first``: ``content_digest`` right after writing (the pages are in the page cache, so this
  is the hashing cost, not the disk's; a cold read adds the disk's read time);
- ``hash_again``: the median of ``--repeats`` more digests;
- ``stat_key``: what the old key cost (one ``stat``), for scale;
- ``load_miss``: ``load_corpus`` on a cold cache (hash + count + encode + write the cache);
- ``load_hit``: ``load_corpus`` again (hash + read the cached arrays).

The cache lives in the temporary directory (``PTMKIT_HOME``), which is removed afterwards.  A
shared machine's load distorts the figures; the load average is printed with them.  The last
line printed is one JSON object.

    python benchmarks/bench_content_hash.py [--mb 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def write_text(path: Path, n_bytes: int, seed: int = 0) -> int:
    """Zipf-distributed words, 20 a line, until ``n_bytes``; returns the number of words written."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    words = 0
    with open(path, "w", encoding="utf-8") as f:
        while f.tell() < n_bytes:
            ids = np.minimum(rng.zipf(1.2, size=(10_000, 20)) - 1, len(vocab) - 1)
            f.write("\n".join(" ".join(row) for row in vocab[ids].tolist()) + "\n")
            words += ids.size
    return words


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100.0, help="size of the text file in MB (10^6 bytes)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-content-hash-") as tmp:
        os.environ["PTMKIT_HOME"] = str(Path(tmp) / "home")
        from ptmkit.static.vocab import content_digest, load_corpus
        from ptmkit.train.mfu import cpu_name

        text = Path(tmp) / "corpus.txt"
        words = write_text(text, int(args.mb * 1e6))
        size = text.stat().st_size
        hash_first, _ = timed(lambda: content_digest(text))
        hash_again = statistics.median(timed(lambda: content_digest(text))[0] for _ in range(args.repeats))
        stat_key = statistics.median(timed(lambda: text.stat())[0] for _ in range(1000))
        load_miss, (vocab, _) = timed(lambda: load_corpus(text, min_count=1))
        load_hit = statistics.median(timed(lambda: load_corpus(text, min_count=1))[0] for _ in range(args.repeats))
        load = os.getloadavg()

    mb = size / 1e6
    res = {
        "cpu": cpu_name(), "cores": os.cpu_count(), "load_avg_1m": round(load[0], 2), "mb": round(mb, 1),
        "words": words, "vocab": len(vocab),
        "hash_first_s": round(hash_first, 3), "hash_again_s": round(hash_again, 3),
        "hash_mb_per_s": round(mb / hash_again, 1), "stat_key_us": round(stat_key * 1e6, 2),
        "load_miss_s": round(load_miss, 2), "load_hit_s": round(load_hit, 3),
        "hit_share_hashing": round(hash_again / load_hit, 2), "miss_over_hit": round(load_miss / load_hit, 1),
    }
    print(f"{res['cpu']}, {res['cores']} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"text: {mb:.1f} MB, {words:,} words, vocabulary {len(vocab):,}")
    rows = [
        ("BLAKE2b digest, right after writing", f"{hash_first:.3f} s", f"{mb / hash_first:.0f} MB/s"),
        (f"BLAKE2b digest, again (median of {args.repeats})", f"{hash_again:.3f} s", f"{mb / hash_again:.0f} MB/s"),
        ("stat (the old key), median of 1000", f"{stat_key * 1e6:.1f} us", ""),
        ("load_corpus, cache miss (hash + count + encode + write)", f"{load_miss:.2f} s", ""),
        (f"load_corpus, cache hit (hash + read; median of {args.repeats})", f"{load_hit:.3f} s",
         f"hashing {100 * hash_again / load_hit:.0f} % of it"),
    ]
    print("| step | time | |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
