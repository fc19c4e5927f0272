"""Parameter-efficient fine-tuning on a real pre-trained model: full fine-tuning vs Houlsby adapters
vs LoRA vs BitFit, each on all-MiniLM-L6-v2, on MR (sentence classification) and brown-pos (tagging).

Stages (each a ``ptm finetune``; a finished run is read back, an interrupted one resumed):

* ``grid``: seed 1 of every method at each of its learning rates; the LR with the best dev score
  (the task's own selection metric) is the method's LR for that task.  The test split is not read
  to choose anything;
* ``seeds``: the chosen LR's run at the other seeds (seed 1 is the grid's run);
* ``speed``: the training step of each method on MR batches (32 sentences, 64 tokens, bf16),
  measured in one process, methods interleaved round by round, median per method.  Run it on an
  idle machine; the accuracy stages do not depend on the load, this one does.

Every method trains the same budget: 2 epochs, batch 32, 64 tokens, bf16, linear warmup (10 %) and
decay, the epoch chosen on dev.  brown-pos reads a fixed 4,000-sentence training subset.

    python benchmarks/peft_table.py [--out runs/peft] [--seeds 1 2 3] [--stages grid,seeds,speed]

Prints a table and, as the last line, one JSON object; writes ``results.json`` there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ptmkit.train.mfu import cpu_name

COMMON = ["epochs=2", "batch_size=32", "max_seq_len=64", "precision=bf16"]
TASKS = {"mr": ["--task", "mr"], "brown-pos": ["--task", "brown-pos", "--train-size", 4000]}
# each method's settings and its learning-rate grid: full fine-tuning around BERT's 2e-5..1e-4; the
# methods that train a small part of the model need larger steps (LoRA's and BitFit's papers use
# 1e-4..1e-3 on BERT/RoBERTa-base for longer schedules; at 2 epochs the grid reaches higher).  A
# grid whose best dev score sat at its edge was extended by one point (full, adapters, LoRA).
METHODS: dict[str, tuple[list[str], list[float]]] = {
    "full": ([], [2e-5, 5e-5, 1e-4, 2e-4]),
    "adapters": (["adapter_size=64"], [1e-4, 3e-4, 1e-3, 3e-3]),
    "lora": (["lora_rank=8"], [3e-4, 1e-3, 3e-3, 1e-2]),
    "bitfit": (["bitfit=true"], [1e-3, 3e-3, 1e-2]),
}
STAGES = ("grid", "seeds", "speed")


def ptm(*args: object) -> None:
    cmd = [sys.executable, "-m", "ptmkit.cli", *map(str, args)]
    print("$ ptm " + " ".join(map(str, args)), flush=True)
    subprocess.run(cmd, check=True)


def minilm(out: Path) -> Path:
    import ptmkit
    from ptmkit.data.sources.base import fetch

    path = out / "minilm"
    if not (path / "config.json").is_file():
        ptmkit.import_hf(fetch("minilm"), path)
    return path


def run_dir(out: Path, task: str, method: str, lr: float) -> Path:
    return out / task / method / f"lr{lr:g}"


def finetune(out: Path, base: Path, task: str, method: str, lr: float, seeds: list[int]) -> list[dict]:
    """The runs of one (task, method, LR) at ``seeds``; seeds added later train beside finished ones."""
    d = run_dir(out, task, method, lr)
    runs = [d / f"pretrained-seed{s}" for s in seeds]
    if not all((r / "results.json").is_file() for r in runs):
        resume = ["--resume"] if d.exists() else []
        ptm("finetune", base, *TASKS[task], "--seeds", *seeds, "-o", d, "--quiet", *COMMON, f"lr={lr:g}",
            *METHODS[method][0], *resume)
    return [json.loads((r / "results.json").read_text()) for r in runs]


def save_entry(path: Path, task: str, method: str, entry: dict) -> None:
    """Write one (task, method) entry into ``results.json``, re-read first: one process per task
    (``--tasks``) may run beside another on the same ``--out``."""
    res = json.loads(path.read_text()) if path.is_file() else {}
    res.setdefault(task, {})[method] = entry
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2) + "\n")
    tmp.replace(path)


def dev_score(result: dict) -> float:
    return float(result["dev"][result["select"]])


def saved_bytes(run: Path) -> int:
    """Bytes of the task model's saved weights (the small weights alone for LoRA and BitFit)."""
    return sum(p.stat().st_size for p in run.glob("*.safetensors"))


# ------------------------------------------------------------------------------------------ speed


def step_times(base: Path, rounds: int, steps: int) -> dict[str, float]:
    """Median seconds per training step of each method on MR (batch 32, 64 tokens, bf16)."""
    from ptmkit.data.tasks import load_task
    from ptmkit.tasks.finetune import finetune as finetune_api
    from ptmkit.tasks.finetune_config import FinetuneConfig

    data = load_task("mr")
    few = np.arange(32)
    data = replace(data, train=data.train.subset(np.arange(32 * (steps + 2))), dev=data.dev.subset(few),
                   test=data.test.subset(few))
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    for r in range(rounds):
        for method, (settings, lrs) in METHODS.items():
            stamps: list[float] = []
            overrides = {k: (True if v == "true" else int(v)) for k, v in (s.split("=") for s in settings)}
            cfg = FinetuneConfig(epochs=1, lr=lrs[0], batch_size=32, max_seq_len=64, precision="bf16", **overrides)
            finetune_api(str(base), data, None, cfg, seed=r + 1, progress=False,
                         callbacks=(lambda trainer, step: stamps.append(time.perf_counter()),))
            deltas = np.diff(stamps)[1:]  # the first step pays for warm-up (allocations, oneDNN primitives)
            times[method].append(float(np.median(deltas)))
            print(f"  round {r + 1} {method}: {1e3 * times[method][-1]:.1f} ms/step", flush=True)
    return {m: statistics.median(t) for m, t in times.items()}


# ------------------------------------------------------------------------------------------- main


def mean_sd(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/peft"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--rounds", type=int, default=3, help="speed: interleaved rounds")
    ap.add_argument("--steps", type=int, default=12, help="speed: timed steps per method and round")
    args = ap.parse_args()
    stages = set(args.stages.split(","))
    tasks = args.tasks.split(",")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    res_path = out / "results.json"
    base = minilm(out)
    first, rest = args.seeds[0], args.seeds[1:]

    for task in tasks:
        for method, (_, lrs) in METHODS.items():
            entry: dict = {}
            if "grid" in stages or "seeds" in stages:
                grid = {lr: finetune(out, base, task, method, lr, [first])[0] for lr in lrs}
                entry["grid"] = {f"{lr:g}": dev_score(r) for lr, r in grid.items()}
                lr = max(grid, key=lambda x: dev_score(grid[x]))
                entry["lr"] = lr
                runs = [grid[lr]]
                if "seeds" in stages and rest:
                    runs += finetune(out, base, task, method, lr, rest)
                entry["seeds"] = [r["seed"] for r in runs]
                entry["test"] = [float(r["test"][r["select"]]) for r in runs]
                entry["dev"] = [dev_score(r) for r in runs]
                entry["metric"] = runs[0]["select"]
                entry["trainable_parameters"] = runs[0]["trainable_parameters"]
                entry["num_parameters"] = runs[0]["num_parameters"]
                entry["saved_bytes"] = saved_bytes(run_dir(out, task, method, lr) / f"pretrained-seed{first}")
                entry["time_s"] = [r["time_s"] for r in runs]
                save_entry(res_path, task, method, entry)
    res = json.loads(res_path.read_text()) if res_path.is_file() else {}
    res["cpu"] = cpu_name()
    if "speed" in stages:
        load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
        res["speed"] = {"seconds_per_step": step_times(base, args.rounds, args.steps), "load_at_start": load,
                        "threads": __import__("torch").get_num_threads()}
        res_path.write_text(json.dumps(res, indent=2) + "\n")

    print(f"\nCPU: {res['cpu']}")
    speed = res.get("speed", {}).get("seconds_per_step", {})
    print(f"{'method':10s} {'trainable':>11s} {'saved MB':>9s} {'ms/step':>8s} " +
          " ".join(f"{t + ' test (LR)':>28s}" for t in tasks))
    for method in METHODS:
        cells = []
        for task in tasks:
            e = res.get(task, {}).get(method, {})
            if e.get("test"):
                m, s = mean_sd(e["test"])
                cells.append(f"{m:.4f} ± {s:.4f} ({e['lr']:g}) n={len(e['test'])}")
            else:
                cells.append("-")
        e0 = res.get(tasks[0], {}).get(method, {})
        step = f"{1e3 * speed[method]:.0f}" if method in speed else "-"
        print(f"{method:10s} {e0.get('trainable_parameters', 0):>11,d} {e0.get('saved_bytes', 0) / 1e6:>9.2f} "
              f"{step:>8s} " + " ".join(f"{c:>28s}" for c in cells))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
