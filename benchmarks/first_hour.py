"""A new user's first hour, timed: a fresh clone, set-up, a small pre-training on "their own" text,
fine-tuning on "their own" CSV files, and ``ptm predict`` on new text; and the same CSV fine-tuned
from the real MiniLM weights (``ptm data get minilm``), the start most users want.

Each step is the command a user types (printed before it runs), timed by the wall clock, in a
clone of this repository (``--repo``, default this checkout) under ``--workdir``.  The stand-ins for
the user's data are made from the data cache before the clock starts (``ptm data get brown mr``
first): "your text" is Brown's training text (4.3 MB, 57,000 lines), "your CSV" MR's training,
dev and test splits written as ``sentence,label`` files (8,032 / 1,004 / 1,005 rows), "new text"
the first 1,000 lines of Brown's test text.  Set-up is ``make setup``: a virtual environment and
``pip install -e .[test]``, from pip's local cache when it holds the wheels (say so when
reporting a figure: a first install downloads them).

    python benchmarks/first_hour.py [--workdir /tmp/first-hour] [--repo .] [--steps 300]

Prints a table and, as the last line, one JSON object (seconds per step).  Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from ptmkit.data.sources.base import fetch
from ptmkit.data.tasks import load_task
from ptmkit.train.mfu import cpu_name


def stand_ins(work: Path) -> None:
    """``my.txt``, ``train.csv`` / ``dev.csv`` / ``test.csv`` and ``new.txt`` in ``work``."""
    brown = fetch("brown")
    shutil.copyfile(brown / "train.txt", work / "my.txt")
    with open(brown / "test.txt", encoding="utf-8") as f, open(work / "new.txt", "w", encoding="utf-8") as g:
        lines = [line for line in f if line.strip()][:1000]
        g.writelines(lines)
    mr = load_task("mr")
    for split in ("train", "dev", "test"):
        part = mr.split(split)
        with open(work / f"{split}.csv", "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["sentence", "label"])
            w.writerows(zip(part.texts, (mr.label_names[i] for i in part.labels)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/first-hour"))
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--steps", type=int, default=300, help="pre-training steps of bert-tiny")
    args = ap.parse_args()
    work: Path = args.workdir
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    stand_ins(work)
    clone = work / "ptmkit"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    env.pop("VIRTUAL_ENV", None)
    ptm = str(clone / ".venv" / "bin" / "ptm")
    csv_args = f"--train {work}/train.csv --dev {work}/dev.csv --test {work}/test.csv --text-column sentence " \
               f"--label-column label"
    steps = [
        ("clone", f"git clone -q {args.repo} {clone}"),
        ("set-up (make setup)", f"make -C {clone} setup"),
        ("ptm --help", f"{ptm} --help"),
        ("pre-train bert-tiny on my.txt", f"{ptm} pretrain bert-tiny --data {work}/my.txt -o {work}/runs/bert "
                                          f"train.max_steps={args.steps}"),
        ("fine-tune it on my CSV", f"{ptm} finetune {work}/runs/bert {csv_args} -o {work}/runs/mine epochs=3"),
        ("predict new text", f"{ptm} predict {work}/runs/mine/pretrained-seed0 --input {work}/new.txt "
                             f"-o {work}/predictions.jsonl"),
        ("get and import MiniLM", f"{ptm} data get minilm && {ptm} import "
                                  f"${{PTMKIT_HOME:-$HOME/.cache/ptmkit}}/data/minilm -o {work}/runs/minilm"),
        ("fine-tune MiniLM on my CSV", f"{ptm} finetune {work}/runs/minilm {csv_args} -o {work}/runs/mine-minilm "
                                       f"epochs=2 lr=5e-5 max_seq_len=64"),
        ("predict new text (MiniLM)", f"{ptm} predict {work}/runs/mine-minilm/pretrained-seed0 --input "
                                      f"{work}/new.txt -o {work}/predictions-minilm.jsonl"),
    ]
    load = Path("/proc/loadavg").read_text().split()[0]
    seconds: dict[str, float] = {}
    for name, command in steps:
        print(f"$ {command}", flush=True)
        start = time.perf_counter()
        subprocess.run(["bash", "-c", command], check=True, env=env, cwd=work, stdout=subprocess.DEVNULL)
        seconds[name] = time.perf_counter() - start
        print(f"  {name}: {seconds[name]:.1f} s", flush=True)
    scores = {}
    for run in ("mine", "mine-minilm"):
        r = json.loads((work / "runs" / run / "pretrained-seed0" / "results.json").read_text())
        scores[run] = {"dev": r["dev"]["accuracy"], "test": r["test"]["accuracy"]}
    print(f"\nCPU: {cpu_name()}, load at start {load}, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}")
    for name, s in seconds.items():
        print(f"{name:32s} {s:8.1f} s")
    print(f"{'total':32s} {sum(seconds.values()):8.1f} s")
    for run, s in scores.items():
        print(f"{run}: dev accuracy {s['dev']:.4f}, test {s['test']:.4f}")
    print(json.dumps({"cpu": cpu_name(), "load_at_start": load, "seconds": seconds, "scores": scores,
                      "commands": dict(steps)}))


if __name__ == "__main__":
    main()
