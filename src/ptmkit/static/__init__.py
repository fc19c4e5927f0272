"""First-generation static word embeddings: word2vec, fastText (and GloVe, SVD-PPMI, NNLM), ``WordVectors``."""

from ptmkit.static.fasttext import FastTextConfig, FastTextModel, train_fasttext
from ptmkit.static.run import run_static
from ptmkit.static.vectors import UnknownWordError, WordVectors
from ptmkit.static.word2vec import Word2VecConfig, train_word2vec

__all__ = [
    "FastTextConfig",
    "FastTextModel",
    "UnknownWordError",
    "Word2VecConfig",
    "WordVectors",
    "run_static",
    "train_fasttext",
    "train_word2vec",
]
