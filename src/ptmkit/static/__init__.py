"""First-generation static word embeddings: word2vec, fastText (and GloVe, SVD-PPMI, NNLM), ``WordVectors``.

The names below load their module on first use (PEP 562): importing ``ptmkit.static.presets``
for a help text must not compile numba kernels.
"""

import importlib

_LAZY = {
    "FastTextConfig": "ptmkit.static.fasttext",
    "FastTextModel": "ptmkit.static.fasttext",
    "train_fasttext": "ptmkit.static.fasttext",
    "run_static": "ptmkit.static.run",
    "UnknownWordError": "ptmkit.static.vectors",
    "WordVectors": "ptmkit.static.vectors",
    "Word2VecConfig": "ptmkit.static.word2vec",
    "train_word2vec": "ptmkit.static.word2vec",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ptmkit.static' has no attribute {name!r}")


__all__ = sorted(_LAZY)
