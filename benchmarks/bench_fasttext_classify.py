"""ptmkit's fastText classifier vs the fastText C++ tool (``fasttext supervised``) on MR and brown-genre.

Both train on the same ``__label__`` files (written from the tasks' splits) with the same dim,
epoch, lr, wordNgrams, bucket, loss, seed and threads; each training is a fresh process
(``ptm fasttext-classify train`` / ``fasttext supervised``), the two tools interleaved (ptmkit first
for even seeds, fastText first for odd ones) so that a change in the load of a shared machine hits
both alike.  Reported per task and loss, over seeds: the wall time of the training process
(reading, dictionary, training, saving the model; median), the training throughput in tokens/s/thread
(ptmkit: (tokens + label tokens) × epochs / training seconds, fastText: its own last
``words/sec/thread``, which counts the same; median) and dev/test accuracy (each tool's own
``test``; mean ± sd).  ptmkit's wall time includes about 2 s of Python start-up (imports, loading
the compiled kernels from numba's cache; one untimed run per task fills that cache first).  The
last line is one JSON object: ``<task>_speedup`` (fastText wall time / ptmkit wall time, median over
that task's runs), ``<task>_train_speedup`` (ptmkit / fastText training tokens/s, median),
``<task>_<loss>_speedup``, ``<task>_<loss>_test_delta`` / ``_dev_delta`` (accuracy points, ptmkit
minus fastText) and the raw figures of every run.

    python benchmarks/bench_fasttext_classify.py [--tasks mr,brown-genre] [--losses softmax,hs] [--seeds 3]
        [--threads 1] [--dim 100] [--bucket 2000000] [--fasttext /usr/bin/fasttext] [--tiny]

Per-task hyper-parameters (epoch, lr, wordNgrams) are in ``TASKS``; ``--tiny`` (500 training lines,
1 epoch, dim 10, 10k buckets) only checks that the script runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = {  # the settings of Joulin et al. (2016) style runs: bigrams, a few epochs
    "mr": dict(epoch=10, lr=0.5, word_ngrams=2),
    "brown-genre": dict(epoch=25, lr=0.5, word_ngrams=2),
}
SRC = Path(__file__).resolve().parents[1] / "src"


def write_splits(task: str, out: Path, tiny: bool) -> dict[str, Path]:
    from ptmkit.static.classify_data import LabelledLines, task_lines

    files = {}
    for split in ("train", "dev", "test"):
        lines = task_lines(task, split)
        if tiny:
            n = 500 if split == "train" else 200
            lines = LabelledLines(lines.texts[:n], lines.labels[:n])
        files[split] = out / f"{task}.{split}.txt"
        lines.to_label_file(files[split])
    return files


def _run(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout + proc.stderr


def _accuracy_ours(model: Path, file: Path, env: dict) -> float:
    _, out = _run([sys.executable, "-m", "ptmkit.cli", "fasttext-classify", "test", str(model), str(file)], env)
    return float(re.search(r"accuracy\t([0-9.]+)", out).group(1))


def _accuracy_fasttext(binary: str, model: Path, file: Path) -> float:
    _, out = _run([binary, "test", str(model), str(file)])
    return float(re.search(r"P@1\t([0-9.]+)", out).group(1))


def run_ours(files, hp, loss, seed, threads, work: Path, n_train: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": str(threads)}  # fmt: skip
    model = work / "ours"
    cmd = [sys.executable, "-m", "ptmkit.cli", "fasttext-classify", "train", "--input", str(files["train"]),
           "-o", str(model), "--dim", str(hp["dim"]), "--epoch", str(hp["epoch"]), "--lr", str(hp["lr"]),
           "--wordNgrams", str(hp["word_ngrams"]), "--bucket", str(hp["bucket"]), "--loss", loss,
           "--thread", str(threads), "--seed", str(seed)]  # fmt: skip
    seconds, _ = _run(cmd, env)
    stats = json.loads((model / "scores.json").read_text())["stats"]
    tokens = stats["words"] + hp["epoch"] * n_train  # fastText's count also holds the label tokens
    res = {"seconds": seconds, "train_seconds": stats["seconds"],
           "tokens_per_s_thread": tokens / stats["seconds"] / threads,
           "dev": _accuracy_ours(model, files["dev"], env), "test": _accuracy_ours(model, files["test"], env)}  # fmt: skip
    shutil.rmtree(model)
    return res


def run_fasttext(binary, files, hp, loss, seed, threads, work: Path) -> dict:
    model = work / "ft"
    cmd = [binary, "supervised", "-input", str(files["train"]), "-output", str(model), "-dim", str(hp["dim"]),
           "-epoch", str(hp["epoch"]), "-lr", str(hp["lr"]), "-wordNgrams", str(hp["word_ngrams"]),
           "-bucket", str(hp["bucket"]), "-loss", loss, "-thread", str(threads), "-seed", str(seed),
           "-verbose", "2"]  # fmt: skip
    seconds, out = _run(cmd)
    rates = re.findall(r"words/sec/thread:\s*([0-9]+)", out)
    res = {"seconds": seconds, "tokens_per_s_thread": float(rates[-1]) if rates else float("nan"),
           "dev": _accuracy_fasttext(binary, Path(f"{model}.bin"), files["dev"]),
           "test": _accuracy_fasttext(binary, Path(f"{model}.bin"), files["test"])}  # fmt: skip
    for ext in (".bin", ".vec"):
        Path(f"{model}{ext}").unlink(missing_ok=True)
    return res


def _mean_sd(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{100 * statistics.mean(xs):.2f} ± {100 * sd:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="mr,brown-genre")
    ap.add_argument("--losses", default="softmax,hs")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--bucket", type=int, default=2_000_000)
    ap.add_argument("--fasttext", default=shutil.which("fasttext") or "fasttext")
    ap.add_argument("--tiny", action="store_true", help="500 training lines, 1 epoch, dim 10: a seconds-long check")
    args = ap.parse_args()
    if not shutil.which(args.fasttext):
        raise SystemExit(f"{args.fasttext} not found; install it (Debian: apt-get install fasttext) or pass --fasttext")
    sys.path.insert(0, str(SRC))
    rows, raw, summary = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="bench-ftc-") as tmp:
        work = Path(tmp)
        for task in args.tasks.split(","):
            files = write_splits(task, work, args.tiny)
            n_train = sum(1 for _ in open(files["train"], encoding="utf-8"))
            hp = {**TASKS[task], "dim": args.dim, "bucket": args.bucket}
            if args.tiny:
                hp.update(epoch=1, dim=10, bucket=10_000)
            # untimed: numba compiles the kernels into its cache on a first run
            run_ours(files, {**hp, "epoch": 1, "bucket": min(hp["bucket"], 1000)}, "softmax", 1, args.threads, work, n_train)
            ratios, rate_ratios = [], []
            for loss in args.losses.split(","):
                runs: dict[str, list[dict]] = {"ptmkit": [], "fasttext": []}
                for seed in range(1, args.seeds + 1):
                    order = ["ptmkit", "fasttext"] if seed % 2 == 0 else ["fasttext", "ptmkit"]
                    for tool in order:
                        if tool == "ptmkit":
                            r = run_ours(files, hp, loss, seed, args.threads, work, n_train)
                        else:
                            r = run_fasttext(args.fasttext, files, hp, loss, seed, args.threads, work)
                        runs[tool].append(r)
                        print(f"{task} {loss} seed {seed} {tool}: {r['seconds']:.2f} s, dev {r['dev']:.4f}, "
                              f"test {r['test']:.4f}", file=sys.stderr, flush=True)  # fmt: skip
                key = f"{task}_{loss}"
                med = {t: statistics.median(r["seconds"] for r in runs[t]) for t in runs}
                ratios += [f["seconds"] / o["seconds"] for f, o in zip(runs["fasttext"], runs["ptmkit"])]
                rate_ratios += [o["tokens_per_s_thread"] / f["tokens_per_s_thread"]
                                for f, o in zip(runs["fasttext"], runs["ptmkit"])]  # fmt: skip
                summary[f"{key}_speedup"] = med["fasttext"] / med["ptmkit"]
                for split in ("dev", "test"):
                    summary[f"{key}_{split}_delta"] = 100 * (
                        statistics.mean(r[split] for r in runs["ptmkit"]) - statistics.mean(r[split] for r in runs["fasttext"])
                    )
                raw[key] = {"hyper_parameters": {**hp, "loss": loss, "threads": args.threads}, **runs}
                for tool in ("ptmkit", "fasttext"):
                    rs = runs[tool]
                    rows.append([task, loss, tool, f"{med[tool]:.2f}",
                                 f"{statistics.median(r['tokens_per_s_thread'] for r in rs) / 1e6:.2f}",
                                 _mean_sd([r["dev"] for r in rs]), _mean_sd([r["test"] for r in rs])])  # fmt: skip
            summary[f"{task}_speedup"] = statistics.median(ratios)
            summary[f"{task}_train_speedup"] = statistics.median(rate_ratios)
    head = ["task", "loss", "tool", "wall s (median)", "M tokens/s/thread", "dev acc %", "test acc %"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(json.dumps({**summary, "seeds": args.seeds, "threads": args.threads, "tiny": args.tiny, "raw": raw}))


if __name__ == "__main__":
    main()
