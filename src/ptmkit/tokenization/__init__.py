"""Tokenizers over HF ``tokenizers``: ``wordpiece``, ``bpe``, ``unigram``, ``char``, ``word``."""

from ptmkit.tokenization.kinds import KINDS, SPECIAL_TOKENS
from ptmkit.tokenization.tokenizer import Tokenizer

__all__ = ["KINDS", "SPECIAL_TOKENS", "Tokenizer"]
