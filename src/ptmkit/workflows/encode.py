"""Sentence vectors from any model: the workflow behind ``ptm encode`` and ``ptmkit.encode``.

A contextual model (a pre-training run, a checkpoint directory, an HF model imported by ``ptm
import``, or a fine-tuned task model's encoder) reads each line with its family's special tokens
(``[CLS] text [SEP]``; a left-to-right model ``text [SEP]``, as fine-tuning frames it), and its
top layer's states are pooled: ``mean`` over the real tokens (every non-padding position, the
special tokens included, as sentence-transformers' mean pooling), ``cls`` (the first token's
state, not the pooler's output; refused for a left-to-right model, which has no [CLS] in front),
or ``last`` (the last real token's state: what has read the whole line in a causal model).  An
encoder–decoder (BART, T5) is pooled over its encoder's states.  Lines are batched by length
inside chunks of ``chunk_size`` lines.

A static word-vectors file (word2vec binary or text, GloVe; or the run directory holding
``vectors.bin``) gives SIF embeddings (Arora, Liang & Ma 2017, "A simple but tough-to-beat
baseline for sentence embeddings"): the average of the line's in-vocabulary words (split at white
space; a word missing as written is looked up lower-cased) weighted by ``a / (a + p(w))``,
``a = 1e-3``, then minus the projection on the first principal component ``u`` of all the
line vectors (the first right-singular vector of the uncentred matrix, as the paper's code's
TruncatedSVD): ``v - u u^T v``.  ``p(w)`` comes from the counts of ``vocab.txt`` beside the vectors
(a run ptm trained writes it); without counts, from Zipf's law over the file's row order (word2vec
files list words by frequency), and the log says so.  A line without a known word is a zero
vector.  The component is found from the Gram matrix ``X^T X`` summed chunk by chunk, and
removed in a second pass over the written file, so memory stays bounded.

Output: float32 ``.npy`` ``[lines, dim]``, one row per input line, written to a temporary file
(its header is completed once the line count is known) that replaces OUT at the end.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import nn

from ptmkit.devices import resolve_device
from ptmkit.errors import PtmError, require_file
from ptmkit.fileio import atomic_stream
from ptmkit.nn.pooling import POOLINGS, pool
from ptmkit.pretrained import load_pretrained
from ptmkit.static.vectors import WordVectors
from ptmkit.tasks.batches import by_length
from ptmkit.tasks.classification import collate, encode_inputs
from ptmkit.tasks.inputs import encoder_inputs
from ptmkit.tasks.saved import is_task_model
from ptmkit.workflows.predict import check_output, chunks, load_predictor, read_lines

log = logging.getLogger(__name__)

SIF_A = 1e-3
CHUNK = 1024
HEADER_BYTES = 128  # the .npy header, reserved before the line count is known
VECTOR_FILES = ("vectors.bin", "vectors.txt", "vectors.vec")


# ------------------------------------------------------------------------------------ the models


class ContextualEncoder:
    """A loaded encoder with its tokenizer: :meth:`vectors` pools its top layer's states."""

    def __init__(self, backbone: nn.Module, tokenizer: Any, causal: bool, max_len: int | None = None) -> None:
        self.backbone, self.tokenizer, self.causal = backbone.eval(), tokenizer, causal
        limit = getattr(backbone.config, "max_position", None) or 512
        self.max_len = min(max_len or limit, limit)
        self.with_types = getattr(backbone.config, "type_vocab_size", 0) >= 1
        self.dim = int(backbone.output_size)

    def states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The top layer's states ``[B, T, H]`` (an encoder–decoder's encoder)."""
        if hasattr(self.backbone, "encode") and getattr(self.backbone, "name", "") == "encoder_decoder":
            return self.backbone.encode(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        return self.backbone(batch["input_ids"], **encoder_inputs(batch), causal=self.causal).last_hidden_state

    @torch.no_grad()
    def vectors(self, texts: list[str], pooling: str, batch_size: int) -> np.ndarray:
        """``[N, H]`` float32 pooled vectors of ``texts`` (in their order)."""
        ids = [list(x) for x in self.tokenizer.encode_batch(texts)]
        inputs = encode_inputs(ids, None, self.max_len, self.tokenizer.cls_id, self.tokenizer.sep_id, self.causal)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        device = next(self.backbone.parameters()).device
        rows = lambda index: collate(inputs, index, self.tokenizer.pad_id, with_token_types=self.with_types)  # noqa: E731
        for index, batch in by_length(inputs.lengths, batch_size, rows, device):
            out[index] = pool(self.states(batch), batch["attention_mask"], pooling).float().cpu().numpy()
        return out


class SIFEncoder:
    """SIF weighted averages of static word vectors (the principal component is removed afterwards,
    over all lines: :func:`remove_component`)."""

    def __init__(self, wv: WordVectors, counts: np.ndarray | None, a: float = SIF_A) -> None:
        self.wv, self.dim = wv, wv.dim
        if counts is None:  # Zipf's law over the frequency-ordered rows
            counts = 1.0 / np.arange(1, len(wv) + 1, dtype=np.float64)
        p = np.asarray(counts, dtype=np.float64) / float(np.sum(counts))
        self.weights = a / (a + p)  # [V]

    def vectors(self, texts: list[str], pooling: str, batch_size: int) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        index = self.wv.key_to_index
        for i, text in enumerate(texts):
            rows = []
            for w in text.split():
                k = index.get(w)
                if k is None:
                    k = index.get(w.lower())
                if k is not None:
                    rows.append(k)
            if rows:
                r = np.asarray(rows, dtype=np.int64)
                out[i] = (self.weights[r, None] * self.wv.vectors[r].astype(np.float64)).sum(0) / len(r)
        return out.astype(np.float32)


def load_encoder(model: str | Path, device: str | torch.device = "cpu", max_len: int | None = None):
    """A :class:`ContextualEncoder` or a :class:`SIFEncoder` for ``model`` (see the module docstring)."""
    path = Path(model)
    vectors_file = path if path.is_file() else next((path / f for f in VECTOR_FILES if (path / f).is_file()), None)
    neural = path.is_dir() and any((path / f).exists() for f in ("checkpoints", "model.safetensors", "task_model.json"))
    if vectors_file is not None and not neural:
        wv = WordVectors.load(vectors_file)
        counts = _counts(vectors_file.parent / "vocab.txt", wv)
        if counts is None:
            log.warning("%s: no vocab.txt with counts beside the vectors; SIF's word probabilities follow Zipf's law "
                        "over the file's order", vectors_file)
        return SIFEncoder(wv, counts)
    if not path.exists():
        raise PtmError(f"{path} does not exist; give a pre-training run, a checkpoint directory, an imported HF "
                       f"model (ptm import), a fine-tuned model or a word-vectors file")
    if is_task_model(path):
        tm = load_predictor(path, device)
        return ContextualEncoder(tm.backbone, tm.tokenizer, bool(tm.task.causal), max_len)
    pre = load_pretrained(path, device=device, heads=False)
    return ContextualEncoder(pre.backbone, pre.tokenizer, pre.causal, max_len)


def _counts(vocab: Path, wv: WordVectors) -> np.ndarray | None:
    """The counts of ``vocab.txt`` (``word count`` per line) in the vectors' order, or ``None``."""
    if not vocab.is_file():
        return None
    found: dict[str, int] = {}
    for line in vocab.read_text(encoding="utf-8").splitlines():
        parts = line.rsplit(" ", 1)
        if len(parts) == 2 and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    counts = np.array([found.get(w, 0) for w in wv.words], dtype=np.float64)
    if not counts.any():
        return None
    return np.maximum(counts, 1.0)  # a word the counts miss: as rare as can be


# ------------------------------------------------------------------------------------ the output


def _npy_header(rows: int, dim: int) -> bytes:
    """A version 1.0 ``.npy`` header for float32 ``[rows, dim]``, padded to :data:`HEADER_BYTES`."""
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
    body = text.encode("latin1")
    pad = HEADER_BYTES - 10 - len(body) - 1
    if pad < 0:
        raise PtmError(f"{rows} x {dim} vectors do not fit the .npy header")
    body = body + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


def remove_component(f: IO[bytes], rows: int, dim: int, gram: np.ndarray, chunk: int = CHUNK) -> np.ndarray:
    """Subtract each row's projection on the top eigenvector ``u`` of ``gram`` (``X^T X``) from the
    rows of the float32 file ``f`` (after the header), ``chunk`` rows at a time; returns ``u``."""
    _, vecs = np.linalg.eigh(gram)
    u = vecs[:, -1]
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        f.seek(HEADER_BYTES + 4 * dim * start)
        x = np.frombuffer(f.read(4 * dim * n), dtype="<f4").reshape(n, dim).astype(np.float64)
        x -= np.outer(x @ u, u)
        f.seek(HEADER_BYTES + 4 * dim * start)
        f.write(x.astype("<f4").tobytes())
    return u


def _normalize_file(f: IO[bytes], rows: int, dim: int, chunk: int = CHUNK) -> None:
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        f.seek(HEADER_BYTES + 4 * dim * start)
        x = np.frombuffer(f.read(4 * dim * n), dtype="<f4").reshape(n, dim).astype(np.float64)
        f.seek(HEADER_BYTES + 4 * dim * start)
        f.write(unit_rows(x).astype("<f4").tobytes())


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def _check(pooling: str, encoder: Any) -> None:
    if pooling not in POOLINGS:
        raise PtmError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if pooling == "cls" and isinstance(encoder, ContextualEncoder) and encoder.causal:
        raise PtmError("pooling=cls reads a [CLS] token in front, which a left-to-right model does not have; use "
                       "last (the state that has read the whole line) or mean")


def _stream(encoder: Any, texts: Iterable[str], f: IO[bytes], pooling: str, batch_size: int,
            chunk_size: int) -> tuple[int, np.ndarray]:
    """Write the (un-normalised) vectors after the reserved header; returns the row count and X^T X."""
    n = 0
    gram = np.zeros((encoder.dim, encoder.dim), dtype=np.float64)
    f.write(b"\0" * HEADER_BYTES)
    for chunk in chunks(texts, chunk_size):
        x = encoder.vectors(chunk, pooling, batch_size)
        gram += x.T.astype(np.float64) @ x.astype(np.float64)
        f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
        n += len(chunk)
    return n, gram


def encode_file(model: str | Path, input_path: str, out: str | Path, pooling: str = "mean", normalize: bool = False,
                batch_size: int = 32, chunk_size: int = CHUNK, max_len: int | None = None, force: bool = False,
                device: str | torch.device = "cpu") -> tuple[int, int]:
    """``ptm encode``: one float32 row per line of ``input_path`` (``-``: stdin) in ``out`` (.npy).
    Returns ``(rows, dim)``."""
    out = str(out)
    if out == "-":
        raise PtmError("-o names the .npy file to write (stdout is not offered for binary vectors)")
    check_output(out, [input_path, str(model)], force)
    if batch_size < 1 or chunk_size < 1:
        raise PtmError(f"--batch-size and --chunk-size must be at least 1, got {batch_size} and {chunk_size}")
    encoder = load_encoder(model, device, max_len)
    _check(pooling, encoder)
    source = "stdin" if input_path == "-" else str(require_file(input_path, "input file"))
    stream = sys.stdin.buffer if input_path == "-" else open(input_path, "rb")
    try:
        texts = (line for _, line in read_lines(stream, source))
        with atomic_stream(out) as f:
            n, gram = _stream(encoder, texts, f, pooling, batch_size, chunk_size)
            if n == 0:
                raise PtmError(f"{source} holds no lines to encode; give one text per line")
            if isinstance(encoder, SIFEncoder):
                remove_component(f, n, encoder.dim, gram, chunk_size)
            if normalize:
                _normalize_file(f, n, encoder.dim, chunk_size)
            f.seek(0)
            f.write(_npy_header(n, encoder.dim))
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    log.info("%d x %d vectors -> %s", n, encoder.dim, out)
    return n, encoder.dim


def encode(model: str | Path, texts: Iterable[str], pooling: str = "mean", normalize: bool = False,
           batch_size: int = 32, max_len: int | None = None, device: str | torch.device = "cpu") -> np.ndarray:
    """``ptmkit.encode``: float32 sentence vectors ``[len(texts), dim]`` of ``texts`` from ``model``
    (a pre-training run or checkpoint, an imported HF model, a fine-tuned model, or a word-vectors
    file: SIF); ``pooling``: ``mean``, ``cls`` or ``last``; ``normalize``: unit L2 rows."""
    encoder = load_encoder(model, resolve_device(str(device)) if isinstance(device, str) else device, max_len)
    _check(pooling, encoder)
    texts = list(texts)
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    if any(not isinstance(t, str) for t in texts):
        raise PtmError("encode takes strings, one text each")
    x = np.concatenate([encoder.vectors(c, pooling, batch_size) for c in chunks(texts, CHUNK)]).astype(np.float64)
    if isinstance(encoder, SIFEncoder):
        u = np.linalg.eigh(x.T @ x)[1][:, -1]
        x = x - np.outer(x @ u, u)
    if normalize:
        x = unit_rows(x)
    return x.astype(np.float32)


__all__ = ["POOLINGS", "SIF_A", "ContextualEncoder", "SIFEncoder", "encode", "encode_file", "load_encoder", "pool",
           "remove_component", "resolve_device", "unit_rows"]
