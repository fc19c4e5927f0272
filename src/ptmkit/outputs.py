"""Which directories ptm may write into, and what ``--overwrite`` may remove there.

Every directory a command creates carries a marker file, ``.ptmkit-output.json``, naming its
kind (a pre-training run, a prepared corpus, static vectors, fine-tuning results, an HF export,
an imported checkpoint, a demo) and the entries ptm wrote there.  The rules, the same for every
command:

* ptm writes into a directory only if it is new, empty, or holds ptm's own output of the same
  kind; a non-empty directory ptm did not make, or one of another kind, is refused;
* an input that lies inside the output directory is refused before anything is read or written
  (ptm never writes where it reads, so neither a new output nor ``--overwrite`` can destroy it);
* ``--overwrite`` removes only the entries the marker lists, never the user's other files, and
  only once the new output is complete (:func:`staged`) or the inputs have been read (runs);
* a command that fails removes the directories it created (:func:`staged`, :func:`undo_if_failed`).

Directories written before markers existed are recognised by their contents (``legacy``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ptmkit import fileio
from ptmkit.errors import PtmError

MARKER = ".ptmkit-output.json"
PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Kind:
    """One kind of output directory.

    files: name patterns of the entries ptm writes there (used for directories written in
        place, and for those written before markers existed).
    overwrite: whether its command offers ``--overwrite`` (the refusal message says so).
    legacy: recognises such a directory written by an older ptmkit, which has no marker.
    """

    label: str
    command: str
    files: tuple[str, ...]
    overwrite: bool = True
    legacy: Callable[[Path], bool] | None = None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _legacy_run(d: Path) -> bool:
    ck = d / "checkpoints"
    return ck.is_dir() and any(p.name == "latest" or p.name.startswith("step-") for p in ck.iterdir())


def _legacy_corpus(d: Path) -> bool:
    return (d / "tokens.bin").is_file() and "tokenizer_sha256" in _read_json(d / "meta.json")


def _legacy_vectors(d: Path) -> bool:
    return (d / "vectors.bin").is_file() and "static" in _read_json(d / "config.json")


def _legacy_finetune(d: Path) -> bool:
    return (d / "summary.json").is_file() or any(d.glob("*-seed*/results.json")) or (d / "results.json").is_file()


KINDS: dict[str, Kind] = {
    "run": Kind("pre-training run", "ptm pretrain",
                ("config.json", "metrics.jsonl", "loss.png", "checkpoints", "data", "eval_data"), legacy=_legacy_run),
    "corpus": Kind("prepared corpus", "ptm prepare",
                   ("tokens.bin", "sentences.npy", "documents.npy", "meta.json", "tokenizer.json"), legacy=_legacy_corpus),
    "vectors": Kind("static word-vectors run", "ptm pretrain (static model)",
                    ("vectors.bin", "vocab.txt", "config.json", "fasttext.json", "words.txt", "counts.npy", "input.npy"),
                    legacy=_legacy_vectors),
    "finetune": Kind("fine-tuning output", "ptm finetune",
                     ("summary.json", "*-seed*", "results.json", "predictions.jsonl", "metrics.jsonl", "loss.png",
                      "best.safetensors", "checkpoints", "lr-*"), legacy=_legacy_finetune),
    "export": Kind("HF transformers export", "ptm export", (), overwrite=False),
    "checkpoint": Kind("imported checkpoint", "ptm import", ("config.json", "model.safetensors", "tokenizer.json"),
                       overwrite=False),
    "evaluate": Kind("evaluation", "ptm evaluate",
                     ("results.json", "table.md", "table.png", "learning_curve.json", "learning_curve.md",
                      "learning_curve.png", "n-*")),
    "compare": Kind("comparison", "ptm compare",
                    ("data", "runs", "finetune", "results.json", "table.md", "compare.png")),
    "classifier": Kind("fastText classifier", "ptm fasttext-classify train",
                       ("classifier.json", "input.npy", "output.npy", "scores.json")),
    "demo": Kind("demo output", "ptm demo",
                 ("text", "pretrain", "finetune", "finetune-word2vec", "demo.png", "results.json", "summary.md"),
                 overwrite=False),
}


# ------------------------------------------------------------------------------------- reading


def _kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    return KINDS[kind]


def _content(d: Path) -> list[str]:
    """Names in ``d`` other than ptm's bookkeeping (the marker, leftover scratch directories)."""
    try:
        names = os.listdir(d)
    except OSError as exc:
        raise PtmError(f"cannot read the output directory {d}: {exc.strerror}; choose another directory") from exc
    return sorted(n for n in names if n != MARKER and not n.startswith(fileio.STAGING_PREFIX))


def owner(d: PathLike) -> str | None:
    """The kind of ptm output ``d`` holds (from its marker, else recognised by its contents), or ``None``."""
    d = Path(d)
    marker = _read_json(d / MARKER)
    if marker.get("kind") in KINDS:
        return marker["kind"]
    for name, spec in KINDS.items():
        if spec.legacy is not None and spec.legacy(d):
            return name
    return None


def owned_entries(d: PathLike) -> list[Path]:
    """The entries of ``d`` that ptm wrote (by the marker's list, else the kind's usual names)."""
    d = Path(d)
    kind = owner(d)
    if kind is None:
        return []
    marker = _read_json(d / MARKER)
    patterns = marker.get("files") if isinstance(marker.get("files"), list) else KINDS[kind].files
    return [d / n for n in _content(d) if any(fnmatch.fnmatchcase(n, str(p)) for p in patterns)]


# ------------------------------------------------------------------------------------- checking


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_inputs(out: PathLike, inputs: Iterable[PathLike | None]) -> None:
    """Refuse an input that lies inside ``out`` (or is ``out``): whatever ptm writes or removes
    there could destroy it.  Missing inputs are left to the command's own message."""
    out = Path(out)
    roots = {Path(os.path.abspath(out)), out.resolve()}
    for inp in inputs:
        if inp is None or str(inp) == "":
            continue
        p = Path(inp)
        if not p.exists():
            continue
        # Both the path as given (a link inside ``out``) and the file it names.
        for candidate in {Path(os.path.abspath(p)), p.resolve()}:
            if any(_inside(candidate, root) for root in roots):
                raise PtmError(
                    f"the input {inp} lies inside the output directory {out}; ptm never writes where its "
                    f"inputs are (a new output or --overwrite could destroy them): choose an output directory "
                    f"outside your inputs"
                )


def _a(label: str) -> str:
    """``label`` with its indefinite article ("an HF transformers export", "a prepared corpus")."""
    return ("an " if label[0] in "aeiou" or label.startswith("HF") else "a ") + label


def _sample(names: list[str], n: int = 3) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def check(out: PathLike, kind: str, inputs: Iterable[PathLike | None] = (), overwrite: bool = False,
          reuse: bool = False) -> str:
    """Raise :class:`PtmError` unless a ``kind`` output may be written into ``out``.

    Returns ``"new"`` (``out`` does not exist), ``"empty"`` or ``"own"`` (it holds ptm's output of
    this kind; allowed only with ``overwrite``, or ``reuse`` for a command that continues it,
    as ``--resume`` does).
    """
    spec = _kind(kind)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PtmError(f"{out} exists and is not a directory; give a directory for {_a(spec.label)}")
    check_inputs(out, inputs)
    if not out.exists():
        return "new"
    content = _content(out)
    if not content:
        return "empty"
    found = owner(out)
    if found is None:
        raise PtmError(
            f"{out} is not empty ({_sample(content)}) and was not written by ptm; ptm writes only into a new "
            f"or empty directory or one holding its own {spec.label}, so none of your files is replaced "
            f"(--overwrite only removes files ptm wrote): choose a new output directory"
        )
    if found != kind:
        other = KINDS[found]
        raise PtmError(
            f"{out} holds {_a(other.label)} (written by `{other.command}`), not {_a(spec.label)}; "
            f"choose another output directory"
        )
    if not (overwrite or reuse):
        if spec.overwrite:
            raise PtmError(
                f"{out} already holds {_a(spec.label)}; pass --overwrite to replace it (ptm removes only the "
                f"files it wrote there), or choose another output directory"
            )
        raise PtmError(f"{out} already holds {_a(spec.label)}; choose a new output directory (nothing is overwritten)")
    return "own"


# ------------------------------------------------------------------------------------- writing


def mark(d: PathLike, kind: str, files: Iterable[str] | None = None) -> None:
    """Write ``d``'s marker: its kind and the entries (or name patterns) ptm writes there."""
    spec = _kind(kind)
    listed = sorted(set(files)) if files is not None else list(spec.files)
    fileio.atomic_write_text(Path(d) / MARKER, json.dumps({"kind": kind, "files": listed}, indent=1) + "\n", durable=False)


def claim(out: PathLike, kind: str, inputs: Iterable[PathLike | None] = (), overwrite: bool = False,
          reuse: bool = False) -> Path:
    """:func:`check`, then create ``out`` and mark it, for an output written in place (a run,
    whose checkpoints appear one by one).  Removes nothing: see :func:`clean`."""
    out = Path(out)
    check(out, kind, inputs, overwrite, reuse)
    fileio.make_dirs(out)
    if _read_json(out / MARKER).get("kind") != kind:
        mark(out, kind)
    return out


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        if owner(entry) is not None and (entry / MARKER).is_file():
            clean(entry)  # a ptm output inside (a run's prepared corpus): only its own files
            leftover = _content(entry)
            if leftover:
                return
            (entry / MARKER).unlink(missing_ok=True)
            shutil.rmtree(entry, ignore_errors=True)  # only scratch directories are left
        else:
            shutil.rmtree(entry)
    else:
        entry.unlink(missing_ok=True)


def clean(out: PathLike, keep: Iterable[str] = ()) -> list[str]:
    """Remove the entries ptm wrote in ``out`` (``--overwrite``), except the names in ``keep``;
    every other file stays.  Returns the names removed."""
    keep = set(keep)
    removed = []
    for entry in owned_entries(out):
        if entry.name not in keep:
            _remove(entry)
            removed.append(entry.name)
    return removed


@contextlib.contextmanager
def staged(out: PathLike, kind: str, inputs: Iterable[PathLike | None] = (), overwrite: bool = False) -> Iterator[Path]:
    """Check ``out`` (:func:`check`), then yield a scratch directory to write the whole output
    into.  When the block succeeds, ptm's previous output in ``out`` (with ``overwrite``) is
    removed and the new entries move into ``out`` with a marker listing them; when it fails,
    nothing in ``out`` has changed and a directory created for it is removed again."""
    out = Path(out)
    inputs = list(inputs)
    state = check(out, kind, inputs, overwrite)

    def publish(names: list[str]) -> None:
        owned = {e.name for e in owned_entries(out)} if state == "own" else set()
        clash = [n for n in names if n != MARKER and (out / n).exists() and n not in owned]
        if clash:
            raise PtmError(
                f"{out / clash[0]} exists and was not written by ptm; move it away or choose another output "
                f"directory (the new {KINDS[kind].label} was not saved)"
            )
        if state == "own":
            clean(out)

    with fileio.staged_dir(out, publish) as tmp:
        yield tmp
        mark(tmp, kind, [p.name for p in tmp.iterdir()])


@contextlib.contextmanager
def undo_if_failed(out: PathLike, keep: Callable[[], bool] | None = None, enabled: bool = True) -> Iterator[None]:
    """Remove ``out`` (and the parents created with it) if the block fails and ``out`` did not
    exist before it, unless ``keep()`` says the partial output is worth keeping (a run with a
    checkpoint to resume from): a corrected retry then finds no half-written directory."""
    created = fileio.first_missing(Path(out).absolute())
    try:
        yield
    except BaseException:
        if enabled and created is not None and created.exists() and not (keep is not None and keep()):
            shutil.rmtree(created, ignore_errors=True)
        raise


__all__ = ["KINDS", "MARKER", "check", "check_inputs", "claim", "clean", "mark", "owned_entries", "owner", "staged",
           "undo_if_failed"]
