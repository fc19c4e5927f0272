"""Checks of what ptm loads: every matrix, vocabulary and weight file is compared with the shape its
record declares (a config, a JSON sidecar, the model built from a config) before it is used.

A mismatch is one line, a :class:`PtmError` that names the file and says what was expected and what
was found: a matrix saved with one row too few would otherwise be read out of bounds (NaN, or
plausible numbers from the wrong rows), and PyTorch's own complaint is a multi-line traceback.

    meta = read_json(d / "classifier.json", "classifier record")
    emb = load_npy(d / "input.npy", (len(words) + bucket, dim), np.float32, "the input matrix")
    check_state(model, {k: v.shape for k, v in state.items()}, path)   # before load_state_dict
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit import fileio
from ptmkit.errors import PtmError

Shape = Sequence["int | None"]  # None: any size along that axis


def fmt_shape(shape: Shape) -> str:
    """``[3, 8]``; an axis of any size prints as ``*``."""
    return "[" + ", ".join("*" if n is None else str(int(n)) for n in shape) + "]"


def check_shape(path: str | os.PathLike[str], name: str, found: Shape, expected: Shape, why: str = "") -> None:
    """Raise :class:`PtmError` unless ``found`` matches ``expected`` axis by axis (``None`` there:
    any size).  ``why`` says where the expectation comes from (``"words + buckets in classifier.json"``)."""
    if len(found) == len(expected) and all(e is None or int(e) == int(f) for f, e in zip(found, expected)):
        return
    source = f" ({why})" if why else ""
    raise PtmError(f"{path}: {name} has shape {fmt_shape(found)}, expected {fmt_shape(expected)}{source}; "
                   f"the file does not match its record: it is damaged or from another model")


def read_json(path: str | os.PathLike[str], what: str = "record") -> dict[str, Any]:
    """The JSON object in ``path`` (:func:`ptmkit.fileio.read_record`): a :class:`PtmError` naming it
    when it is missing, unreadable or not an object."""
    return fileio.read_record(path, f"the {what} is damaged or truncated: write it again (or restore it)")


def need(record: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: str | os.PathLike[str]) -> Any:
    """``record[key]``, which must be of ``kind`` (``bool`` is not an ``int`` here)."""
    value = record.get(key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise PtmError(f"{path}: {key!r} is {'missing' if key not in record else repr(value)[:40]}, expected {names}; "
                       f"the file is damaged or not a ptm file")
    return value


def load_npy(path: str | os.PathLike[str], shape: Shape, dtype: Any = np.float32, name: str = "the matrix",
             why: str = "", mmap_mode: Any = None) -> np.ndarray:
    """``np.load(path)`` (no pickles) checked against ``shape`` and ``dtype``; any failure is a
    one-line :class:`PtmError` naming ``path``."""
    path = Path(path)
    if not path.is_file():
        raise PtmError(f"{path} is missing ({name}); the model directory is incomplete")
    try:
        array = np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise PtmError(f"{path} cannot be read as a .npy array ({exc}); it is damaged or truncated") from None
    check_shape(path, name, array.shape, shape, why)
    if dtype is not None and array.dtype != np.dtype(dtype):
        raise PtmError(f"{path}: {name} is {array.dtype}, expected {np.dtype(dtype)}; the file is damaged or from "
                       f"another program")
    return array


def state_problem(own: Mapping[str, Any], given: Mapping[str, Shape], strict: bool = True) -> str:
    """What keeps the tensors ``given`` (name -> shape) from loading into the state ``own`` (a
    module's ``state_dict(keep_vars=True)``): the first tensor of another shape, then (``strict``)
    tensors the module lacks and tensors it has that ``given`` does not hold (a name whose tensor
    is shared with one that is given, a tied weight stored once, is not missing); ``""`` when they fit."""
    for name, shape in given.items():
        if name in own and tuple(own[name].shape) != tuple(int(n) for n in shape):
            return (f"the first mismatching tensor, {name}, is {fmt_shape(shape)} in the file and "
                    f"{fmt_shape(own[name].shape)} in the model")
    if not strict:
        return ""
    unexpected = [k for k in given if k not in own]
    loaded = {id(own[k]) for k in given if k in own}
    missing = [k for k in own if k not in given and id(own[k]) not in loaded]
    if unexpected or missing:
        parts = ([f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"] if missing else []) + \
                ([f"unexpected {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}"] if unexpected else [])
        return f"tensors {'; '.join(parts)} ({len(missing)} missing, {len(unexpected)} unexpected)"
    return ""


def check_state(module: Any, given: Mapping[str, Shape], path: str | os.PathLike[str], strict: bool = True,
                what: str = "the model built from its config") -> None:
    """Raise a one-line :class:`PtmError` naming ``path`` when the tensors ``given`` (name -> shape)
    do not fit ``module`` (see :func:`state_problem`)."""
    problem = state_problem(module.state_dict(keep_vars=True), given, strict)
    if problem:
        raise PtmError(f"the weights in {path} do not fit {what}: {problem}")


def load_state(module: Any, state: Mapping[str, Any], path: str | os.PathLike[str], strict: bool = True,
               what: str = "the model built from its config") -> Any:
    """``module.load_state_dict(state, strict)`` after :func:`check_state`; whatever PyTorch still
    refuses is restated as a one-line :class:`PtmError` naming ``path``."""
    check_state(module, {k: tuple(v.shape) for k, v in state.items()}, path, strict, what)
    try:
        return module.load_state_dict(state, strict=strict)
    except RuntimeError as exc:
        first = next((line.strip() for line in str(exc).splitlines()[1:] if line.strip()), str(exc).splitlines()[0])
        raise PtmError(f"the weights in {path} do not fit {what}: {first}") from None


__all__ = ["check_shape", "check_state", "check_vocab", "fmt_shape", "load_npy", "load_state", "need", "read_json", "state_problem"]


def check_vocab(tokenizer_path: str | os.PathLike[str], tokens: int, model: Mapping[str, Any],
                config_path: str | os.PathLike[str]) -> None:
    """A tokenizer of ``tokens`` entries must fit the embedding of the ``model`` config section
    (``vocab_size`` rows, which an override may make larger than the tokenizer, never smaller):
    an id past the last row would fail deep inside the model, or read another row."""
    rows = model.get("vocab_size")
    if isinstance(rows, int) and not isinstance(rows, bool) and tokens > rows:
        raise PtmError(f"{tokenizer_path} has {tokens} tokens, but model.vocab_size in {config_path} is {rows}: "
                       f"the tokenizer is not the one this model was trained with")
