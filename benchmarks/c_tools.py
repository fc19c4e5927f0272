"""The original C tools as benchmark anchors: Mikolov's word2vec.c and the fastText C++ command.

* ``word2vec.c`` is built from the PyPI ``word2vec`` sdist (which ships the original source; its
  own install compiles it the same way): downloaded with pip, compiled with gcc and the flags
  that package uses (``-Ofast -march=native -funroll-loops -pthread``), cached under
  ``$PTMKIT_HOME/tools/word2vec-c/``.
* ``fasttext`` is the command of Debian's ``fasttext`` package (``apt-get install fasttext``).

``train_c(model, corpus, hp, seed, tmp)`` trains one of bench_static's models with the matching C
tool and the same hyper-parameters and returns the same record as the Python libraries (words/s,
the scores).  word2vec.c builds its vocabulary in an untimed first call (``-save-vocab``) and
trains in the timed one (``-read-vocab``), as the Python side excludes vocabulary building;
fastText has no such switch, so its time includes one reading pass over the corpus (a few per
cent at five epochs; it counts against the C++ tool).  word2vec.c has no seed option (its random
state starts from the thread number), so its seeds differ only by run-to-run scheduling.

    python benchmarks/c_tools.py            # build / find the tools and print their paths
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

W2V_SDIST = "word2vec==0.11.1"
W2V_CFLAGS = "-lm -pthread -Ofast -Wall -march=native -funroll-loops -Wno-unused-result"
# bench_static's model name -> word2vec.c switches (learning rates as word2vec.c's defaults)
W2V_ARGS = {
    "sg_ns": ["-cbow", "0", "-hs", "0", "-negative", "5", "-alpha", "0.025"],
    "cbow_ns": ["-cbow", "1", "-hs", "0", "-negative", "5", "-alpha", "0.05"],
    "sg_hs": ["-cbow", "0", "-hs", "1", "-negative", "0", "-alpha", "0.025"],
    "cbow_hs": ["-cbow", "1", "-hs", "1", "-negative", "0", "-alpha", "0.05"],
}
FASTTEXT_MODELS = {"fasttext": "skipgram"}


def tools_dir() -> Path:
    return Path(os.environ.get("PTMKIT_HOME", Path.home() / ".cache" / "ptmkit")) / "tools"


def word2vec_c() -> Path | None:
    """The compiled word2vec.c binary (built on first use), or ``None`` with a note on stderr."""
    target = tools_dir() / "word2vec-c" / "word2vec"
    if target.is_file():
        return target
    if shutil.which("gcc") is None:
        print("# word2vec.c skipped: no gcc", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d",
                            str(tmp), W2V_SDIST], check=True)
        except subprocess.CalledProcessError as exc:
            print(f"# word2vec.c skipped: cannot download {W2V_SDIST} ({exc})", file=sys.stderr)
            return None
        (sdist,) = tmp.glob("word2vec-*.tar.gz")
        with tarfile.open(sdist) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("includes/word2vec.c"))
            tar.extract(member, tmp, filter="data")
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", str(tmp / member.name), "-o", str(target), *W2V_CFLAGS.split()], check=True)
    return target


def fasttext_cli() -> Path | None:
    found = shutil.which("fasttext")
    if found is None:
        print("# fastText C++ skipped: no `fasttext` command (apt-get install fasttext)", file=sys.stderr)
    return Path(found) if found else None


def available(model: str) -> bool:
    if model in W2V_ARGS:
        return word2vec_c() is not None
    if model in FASTTEXT_MODELS:
        return fasttext_cli() is not None
    return False


def train_c(model: str, corpus: Path, hp: dict, seed: int, tmp: Path) -> tuple[object, float, float, int]:
    """Train ``model`` with its C tool: ``(WordVectors, seconds, cpu_seconds, in-vocabulary corpus words)``."""
    from ptmkit.static.vectors import WordVectors

    out = tmp / f"c-{model}-{seed}"
    common_w2v = ["-size", str(hp["dim"]), "-window", str(hp["window"]), "-sample", str(hp["sample"]),
                  "-threads", str(hp["workers"]), "-iter", str(hp["epochs"]), "-min-count", str(hp["min_count"])]
    if model in W2V_ARGS:
        exe = word2vec_c()
        vocab = tmp / "c-vocab.txt"
        if not vocab.is_file():  # untimed: the vocabulary pass (with one cheap epoch: -iter 0 never ends)
            subprocess.run([str(exe), "-train", str(corpus), "-output", str(tmp / "c-probe.bin"), "-save-vocab", str(vocab),
                            "-size", "1", "-iter", "1", "-negative", "1", "-min-count", str(hp["min_count"]), "-threads", "1"],
                           check=True, stdout=subprocess.DEVNULL)
        cmd = [str(exe), "-train", str(corpus), "-output", f"{out}.bin", "-binary", "1", "-read-vocab", str(vocab),
               *common_w2v, *W2V_ARGS[model]]
        vectors_file = Path(f"{out}.bin")
    elif model in FASTTEXT_MODELS:
        alpha = 0.025 if FASTTEXT_MODELS[model] == "skipgram" else 0.05
        cmd = [str(fasttext_cli()), FASTTEXT_MODELS[model], "-input", str(corpus), "-output", str(out),
               "-dim", str(hp["dim"]), "-ws", str(hp["window"]), "-epoch", str(hp["epochs"]), "-minCount", str(hp["min_count"]),
               "-neg", "5", "-loss", "ns", "-t", str(hp["sample"]), "-minn", "3", "-maxn", "6", "-bucket", str(hp["bucket"]),
               "-lr", str(alpha), "-thread", str(hp["workers"]), "-seed", str(seed), "-verbose", "0"]
        vectors_file = Path(f"{out}.vec")
    else:
        raise ValueError(f"no C tool for {model!r}")
    t0 = time.perf_counter()
    before = os.times()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = os.times()
    seconds = time.perf_counter() - t0
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return WordVectors.load(vectors_file), seconds, cpu, vocabulary_words(corpus, hp["min_count"])


def vocabulary_words(corpus: Path, min_count: int) -> int:
    """Corpus tokens of words kept by ``min_count`` (the words the Python libraries count)."""
    from collections import Counter

    counts: Counter[str] = Counter()
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            counts.update(line.split())
    return sum(c for c in counts.values() if c >= min_count)


if __name__ == "__main__":
    print("word2vec.c:", word2vec_c())
    print("fasttext:", fasttext_cli())
