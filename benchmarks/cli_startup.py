"""How long ``ptm`` takes to answer: ``ptm --help``, every ``ptm SUB --help`` and ``ptm data list``,
each a fresh process (the time a user waits), the median of ``--repeats`` runs.

Help texts list registered components by reading ``@register`` lines of the source files
(:func:`ptmkit.registry.declared`), so they import no model code; the commands whose help lists
HF formats (``export``, ``import``) still instantiate the HF families.  The target is under 1 s
on 2 cores.  The load average is printed with the figures (a loaded machine slows every start);
the last line printed is one JSON object.

    python benchmarks/cli_startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def sub_commands() -> list[str]:
    code = ("from ptmkit.cli import build_parser\nimport argparse\np = build_parser()\n"
            "a = next(x for x in p._actions if isinstance(x, argparse._SubParsersAction))\nprint(' '.join(a.choices))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def timed(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ptmkit.cli", *argv], capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    load = os.getloadavg()[0]
    cases = [["--help"], *([s, "--help"] for s in sub_commands()), ["data", "list"]]
    results = {}
    for argv in cases:
        results[" ".join(argv)] = round(timed(argv, args.repeats), 3)
        print(f"ptm {' '.join(argv):32s} {results[' '.join(argv)]:.2f} s", flush=True)
    slow = sorted(k for k, v in results.items() if v >= 1.0)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load:.2f}; "
          f"{len(slow)} of {len(results)} at 1 s or more: {', '.join(slow) or 'none'}")
    print(json.dumps({"benchmark": "cli_startup", "load_average": round(load, 2), "seconds": results,
                      "max_s": max(results.values()), "over_1s": slow}))


if __name__ == "__main__":
    main()
