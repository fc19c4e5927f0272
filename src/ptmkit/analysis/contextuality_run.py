"""Ethayarajh's analysis of one model over a corpus: a counting pass over the text, then one pass
through the encoder feeding :class:`~ptmkit.analysis.contextuality_stream.ContextualityStream`;
first-PC static vectors of chosen layers written as word2vec text files."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

from ptmkit import fileio
from ptmkit.analysis.contextuality_stream import MIN_COUNT, ContextualityStream, select_words
from ptmkit.analysis.corpus_text import count_words, sentences
from ptmkit.analysis.extract import word_states
from ptmkit.analysis.models import Subject
from ptmkit.errors import PtmError
from ptmkit.interop.word2vec_format import write_word2vec
from ptmkit.train.progress import progress as progress_bar


def num_hidden_states(subject: Subject) -> int:
    """``L + 1``: the embedding output and every layer (an encoder–decoder: its encoder's)."""
    cfg = subject.backbone.config
    layers = getattr(cfg, "encoder_layers", None) or getattr(cfg, "num_layers", 0)
    return int(layers) + 1


def check_layers(subject: Subject, layers: Sequence[int]) -> None:
    """:class:`PtmError` for a layer index outside ``0..L``."""
    n = num_hidden_states(subject)
    bad = [k for k in layers if not 0 <= k < n]
    if bad:
        raise PtmError(f"layer {bad[0]} is beyond {subject.label}: its hidden states are 0 (embeddings) .. {n - 1}")


def contextuality(subject: Subject, corpus: str | Path, out_dir: Path, static_layers: Sequence[int] = (),
                  max_sentences: int | None = None, max_words: int | None = 2000, max_occurrences: int = 50,
                  pooling: str = "first", batch_size: int = 16, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """The per-layer statistics (see ``ContextualityStream.result``), plus ``static_vectors``: the
    file written for each of ``static_layers`` (``out_dir/static-L{k}.txt``, word2vec text)."""
    check_layers(subject, static_layers)
    counts, n_sentences = count_words(corpus, max_sentences)
    words = select_words(counts, MIN_COUNT, max_words)
    L = num_hidden_states(subject)
    dim = int(getattr(subject.backbone, "output_size", 0) or subject.backbone.config.hidden_size)
    bar = progress_bar(n_sentences, desc=f"contextuality {subject.label}", unit="sentence", disable=not progress)
    with tempfile.TemporaryDirectory(prefix="ptm-analyse-") as tmp:
        stream = ContextualityStream(words, L, dim, n_sentences, Path(tmp), max_occurrences=max_occurrences, seed=seed)
        for s in word_states(subject.backbone, subject.tokenizer, sentences(corpus, max_sentences), subject.causal,
                             pooling, batch_size=batch_size):
            stream.add(s.index, s.words, s.layers)
            bar.update(1)
        bar.close()
        result = stream.result()
        files = {}
        for k in static_layers:
            names, vecs = stream.static_vectors(k)
            path = out_dir / f"static-{slug(subject.label)}-L{k}.txt"
            write_word2vec(path, names, vecs, binary=False)
            files[str(k)] = path.name
    result["static_vectors"] = files
    result["distinct_words"] = len(counts)
    return result


def slug(label: str) -> str:
    """A file-name form of a model label (letters, digits, ``-_.``; at most 100 characters),
    checked as a path part (:func:`ptmkit.fileio.path_part`)."""
    text = "".join(c if c.isalnum() or c in "-_." else "-" for c in label).strip("-.")[:100] or "model"
    return fileio.path_part(text, "model label")


__all__ = ["check_layers", "contextuality", "num_hidden_states", "slug"]
