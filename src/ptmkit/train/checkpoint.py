"""Checkpoint directories: written atomically, validated on load.

Layout::

    RUN_DIR/checkpoints/step-0000200/   config.json  model.safetensors  tokenizer.json  trainer_state.pt
    RUN_DIR/checkpoints/latest          text file naming the newest complete checkpoint

A checkpoint is first written into ``checkpoints/.tmp-XXXX`` (every file fsync'ed), then renamed
to its final name, and only then is ``latest`` replaced (temp file + ``os.replace``).  A process
killed at any moment therefore leaves the previous checkpoint complete and ``latest`` pointing at
it; leftover ``.tmp-*`` directories are ignored by readers and removed by the next save.

Tied weights (the MLM/LM decoder shares the word embeddings) are stored once:
``safetensors.torch.save_model`` drops the aliases and ``load_model`` restores them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from ptmkit import fileio, outputs
from ptmkit.artefacts import check_state, load_state
from ptmkit.errors import PtmError

# The trainer writes metrics.jsonl through ``ckpt.atomic_write_text``; checkpoints use both.
from ptmkit.fileio import atomic_dir, atomic_write_text, fsync_path, make_tmp_dir, replace_dir
from ptmkit.train import distributed as dist
from ptmkit.train import sharded_checkpoint as sharded
from ptmkit.train.distributed import unwrap

CHECKPOINTS = "checkpoints"
LATEST = "latest"
CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
STATE_FILE = "trainer_state.pt"
TMP_PREFIX = fileio.TMP_PREFIX  # what atomic_dir / atomic_write_text leave behind when killed
_STEP_RE = re.compile(r"^step-(\d+)$")

Extra = Callable[[Path], None] | dict[str, Any] | None


def step_name(step: int) -> str:
    return f"step-{step:07d}"


# -- writing pieces -------------------------------------------------------------------------


def write_config(directory: Path, config: dict[str, Any]) -> None:
    (Path(directory) / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_tokenizer(directory: Path, tokenizer: Any) -> None:
    """Save a tokenizer object (``.save(path)``) or copy a ``tokenizer.json`` file; ``None`` skips."""
    if tokenizer is None:
        return
    target = Path(directory) / TOKENIZER_FILE
    if isinstance(tokenizer, (str, os.PathLike)):
        shutil.copyfile(tokenizer, target)
    else:
        tokenizer.save(target)


def write_extra(directory: Path, extra: Extra) -> None:
    """``extra`` is a callable writing into ``directory`` or a dict with ``config`` and ``tokenizer``."""
    if extra is None:
        return
    if callable(extra):
        extra(Path(directory))
        return
    if "config" in extra and extra["config"] is not None:
        write_config(directory, extra["config"])
    write_tokenizer(directory, extra.get("tokenizer"))


def write_model(directory: Path, model: nn.Module) -> None:
    save_model(unwrap(model), str(Path(directory) / MODEL_FILE))


# -- run directories ------------------------------------------------------------------------


def checkpoint_steps(run_dir: Path) -> list[tuple[int, Path]]:
    """Completed checkpoints of a run, oldest first (temporary directories are ignored)."""
    ckdir = Path(run_dir) / CHECKPOINTS
    if not ckdir.is_dir():
        return []
    out = []
    for p in ckdir.iterdir():
        m = _STEP_RE.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint named by ``checkpoints/latest`` (else the highest-numbered one), or ``None``."""
    ckdir = Path(run_dir) / CHECKPOINTS
    pointer = ckdir / LATEST
    if pointer.is_file():
        name = pointer.read_text(encoding="utf-8").strip()
        if _STEP_RE.match(name) and (ckdir / name).is_dir():
            return ckdir / name
    steps = checkpoint_steps(run_dir)
    return steps[-1][1] if steps else None


def clean_stale(run_dir: Path) -> None:
    """Remove temporary directories/files left by a process killed while saving."""
    ckdir = Path(run_dir) / CHECKPOINTS
    if not ckdir.is_dir():
        return
    for p in ckdir.iterdir():
        if p.name.startswith(TMP_PREFIX):
            outputs.discard(p)  # only what ptm recorded making: a user's file of that name stays


def prune(run_dir: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest checkpoints (never the one ``latest`` names)."""
    current = latest_checkpoint(run_dir)
    steps = checkpoint_steps(run_dir)
    for _, path in steps[: max(0, len(steps) - keep)]:
        if current is None or path.resolve() != current.resolve():
            outputs.discard(path)  # ptm's files of it; a file a user saved in there stays


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    trainer_state: dict[str, Any] | None = None,
    extra: Extra = None,
    keep: int = 2,
) -> Path:
    """Write ``RUN_DIR/checkpoints/step-NNNNNNN`` atomically, point ``latest`` at it, prune old ones."""
    run_dir = Path(run_dir)
    ckdir = run_dir / CHECKPOINTS
    ckdir.mkdir(parents=True, exist_ok=True)
    clean_stale(run_dir)
    final = ckdir / step_name(step)
    try:
        with atomic_dir(final) as tmp:
            write_extra(tmp, extra)
            write_model(tmp, model)
            if trainer_state is not None:
                torch.save(trainer_state, tmp / STATE_FILE)
    except PtmError as exc:  # a full disk, say: tell the user what is still safe
        raise _save_failed(run_dir, final, exc) from exc
    atomic_write_text(ckdir / LATEST, final.name + "\n")
    prune(run_dir, keep)
    return final


def _save_failed(run_dir: Path, target: Path, exc: BaseException) -> PtmError:
    """The error for a checkpoint that could not be written, saying what is still safe."""
    previous = latest_checkpoint(run_dir)
    safe = (f"the previous checkpoint {previous} is intact and --resume continues from it" if previous
            else "the run has no checkpoint yet")
    return PtmError(f"saving checkpoint {target.name} failed: {exc}; {safe}")


def save_sharded_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any] | None,
    extra: Extra = None,
    keep: int = 2,
    final: bool = False,
) -> Path | None:
    """Every rank writes its shards into one temporary directory, rank 0 the rest; then the
    directory is renamed to ``step-NNNNNNN`` and ``latest`` moved, as for :func:`save_checkpoint`
    (collective; the path on rank 0, ``None`` elsewhere).  ``final`` also gathers one
    ``model.safetensors`` for the commands that read a finished run."""
    run_dir = Path(run_dir)
    ckdir = run_dir / CHECKPOINTS
    main = dist.current().is_main
    tmp = None
    if main:
        ckdir.mkdir(parents=True, exist_ok=True)
        clean_stale(run_dir)
        tmp = make_tmp_dir(ckdir)
    tmp = Path(dist.broadcast_object(str(tmp) if tmp is not None else None))
    target = ckdir / step_name(step)
    try:
        sharded.save_shards(tmp, model, optimizer)
        if final:
            sharded.write_full(tmp, model)
        if main:
            write_extra(tmp, extra)
            sharded.write_tied(tmp, model)
            if trainer_state is not None:
                torch.save(trainer_state, tmp / STATE_FILE)
            for f in tmp.rglob("*"):
                if f.is_file():
                    fsync_path(f)
            replace_dir(tmp, target)
    except BaseException as exc:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise _save_failed(run_dir, target, exc) from exc
        raise
    if main:
        atomic_write_text(ckdir / LATEST, target.name + "\n")
        prune(run_dir, keep)
    dist.barrier()
    return target if main else None


# -- reading and validation -----------------------------------------------------------------


def resolve_checkpoint(path: Path | str) -> Path:
    """A checkpoint directory from a checkpoint directory or a run directory (its latest)."""
    path = Path(path)
    if not path.exists():
        raise PtmError(f"{path} does not exist: give a run directory or a checkpoint directory")
    if (path / "vectors.bin").is_file() and not (path / MODEL_FILE).exists():
        raise PtmError(
            f"{path} is a static-vectors run (word vectors, not a Transformer): use `ptm vectors`, e.g. "
            f"`ptm vectors neighbors {path / 'vectors.bin'} WORD` or `ptm vectors evaluate {path / 'vectors.bin'}`"
        )
    if (path / MODEL_FILE).exists() or (path / CONFIG_FILE).exists() and not (path / CHECKPOINTS).is_dir():
        return _consolidated(path)
    if (path / CHECKPOINTS).is_dir():
        ck = latest_checkpoint(path)
        if ck is None:
            raise PtmError(f"run directory {path} has no checkpoint yet (nothing under {path / CHECKPOINTS})")
        return _consolidated(ck)
    raise PtmError(
        f"{path} is neither a checkpoint directory (with {MODEL_FILE}) nor a run directory (with {CHECKPOINTS}/)"
    )


def _consolidated(ck: Path) -> Path:
    """A sharded checkpoint gets its one-file weights on first use (see ``sharded_checkpoint``)."""
    if not (ck / MODEL_FILE).exists() and sharded.is_sharded(ck):
        sharded.consolidate(ck)
    return ck


def check_safetensors(path: Path, advice: str = "use an earlier checkpoint of the run") -> dict[str, Any]:
    """Parse a safetensors header and check the file is complete; return the header.
    ``advice`` ends the message for a truncated file (what the user can do about it)."""
    path = Path(path)
    if not path.is_file():
        raise PtmError(f"checkpoint file {path} is missing")
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise ValueError("shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                raise ValueError(f"header length {n} exceeds the file size {size}")
            header = json.loads(f.read(n))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise PtmError(f"{path} is not a valid safetensors file ({exc}); the checkpoint is corrupt or truncated") from exc
    if size != 8 + n + end:
        raise PtmError(
            f"{path} is truncated or corrupt: {size} bytes on disk, {8 + n + end} expected; {advice}"
        )
    return header


def validate_checkpoint(ck: Path, need_state: bool = False) -> None:
    """Raise :class:`PtmError` unless ``ck`` holds a complete checkpoint."""
    ck = Path(ck)
    weights = [] if sharded.is_sharded(ck) else [MODEL_FILE]  # shards, or one file
    required = [CONFIG_FILE, *weights] + ([STATE_FILE] if need_state else [])
    for name in required:
        f = ck / name
        if not f.is_file() or f.stat().st_size == 0:
            raise PtmError(f"checkpoint {ck} is incomplete: {name} is missing or empty")
    if weights:
        check_safetensors(ck / MODEL_FILE)
    read_config(ck)


def read_config(ck: Path) -> dict[str, Any]:
    f = Path(ck) / CONFIG_FILE
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise PtmError(f"checkpoint {ck} has no {CONFIG_FILE}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PtmError(f"{f} is not valid JSON ({exc}); the checkpoint is corrupt") from exc


def load_model_weights(model: nn.Module, ck: Path, strict: bool = True) -> None:
    """Load ``model.safetensors`` of checkpoint ``ck`` into ``model`` (tied weights restored), or
    its shards when it has no single file (any world size; collective when distributed).
    strict=False: tensors of the file that the model lacks are skipped (the model's must all be there)."""
    f = Path(ck) / MODEL_FILE
    if not f.exists() and sharded.is_sharded(ck):
        sharded.load_shards(Path(ck), unwrap(model))
        return
    header = check_safetensors(f)
    # the header's shapes against the model's, before any tensor is read: one line naming the first
    # mismatching tensor rather than PyTorch's multi-line list
    check_state(unwrap(model), {k: v["shape"] for k, v in header.items() if k != "__metadata__"}, f,
                strict=False)
    try:
        missing, _ = load_model(unwrap(model), str(f), strict=strict)
    except (RuntimeError, KeyError, ValueError) as exc:
        first = " ".join(str(exc).split())[:300]
        raise PtmError(f"the weights in {f} do not fit the model built from its config: {first}") from exc
    if missing:
        raise PtmError(f"the weights in {f} do not fit the model built from its config: missing {sorted(missing)[:5]}")


def load_submodule_weights(module: nn.Module, ck: Path, prefix: str) -> None:
    """Load the tensors of checkpoint ``ck`` whose names start with ``prefix`` into ``module``
    (e.g. ``backbone.`` into an encoder, leaving the pre-training heads unread).

    Tensors that a module shares between several names (tied or cross-layer shared weights) are
    stored once; a name missing from the file is accepted when its tensor is one that was loaded.
    """
    f = _consolidated(Path(ck)) / MODEL_FILE
    check_safetensors(f)
    with safe_open(str(f), framework="pt") as handle:
        state = {k[len(prefix):]: handle.get_tensor(k) for k in handle.keys() if k.startswith(prefix)}
    if not state:
        raise PtmError(f"{f} holds no weights under {prefix!r}; it is not a checkpoint of this kind of model")
    result = load_state(module, state, f, strict=False)
    own = module.state_dict(keep_vars=True)
    loaded = {id(own[k]) for k in state if k in own}
    missing = [k for k in result.missing_keys if id(own[k]) not in loaded]
    if missing or result.unexpected_keys:
        raise PtmError(
            f"the weights in {f} do not fit the model built from its config: missing {missing[:4]}, "
            f"unexpected {list(result.unexpected_keys)[:4]}"
        )


def load_fitting_weights(module: nn.Module, ck: Path, prefix: str) -> tuple[list[str], list[str]]:
    """Load the tensors of checkpoint ``ck`` under ``prefix`` that ``module`` has with the same
    shape; the others keep their fresh values.  Returns ``(loaded, fresh)`` names of ``module``'s
    state: a new objective's heads start where the old objective had the same head (SenseBERT's
    MLM head from an MLM run) and fresh where it had none."""
    f = _consolidated(Path(ck)) / MODEL_FILE
    check_safetensors(f)
    own = module.state_dict()
    with safe_open(str(f), framework="pt") as handle:
        state = {k[len(prefix):]: handle.get_tensor(k) for k in handle.keys() if k.startswith(prefix)}
    fits = {k: v for k, v in state.items() if k in own and tuple(own[k].shape) == tuple(v.shape)}
    if fits:
        load_state(module, fits, f, strict=False)
    return sorted(fits), sorted(k for k in own if k not in fits)


def tensors_sha256(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 of named tensors (a ``state_dict``: name -> tensor), in name order, each with its
    dtype, shape and bytes: the identity of a model's weights whatever file they were read from."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(b"T" + name.encode() + b"\0" + str(t.dtype).encode() + str(tuple(t.shape)).encode() + b"\n")
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def load_trainer_state(ck: Path) -> dict[str, Any]:
    f = Path(ck) / STATE_FILE
    if not f.is_file() or f.stat().st_size == 0:
        raise PtmError(f"checkpoint {ck} has no training state ({STATE_FILE}); it cannot be resumed")
    try:
        # Our own file: it holds numpy/python RNG states, which the weights-only loader rejects.
        return torch.load(f, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises many kinds for a damaged pickle/zip
        raise PtmError(f"{f} cannot be read ({type(exc).__name__}: {exc}); the checkpoint is corrupt or truncated") from exc
