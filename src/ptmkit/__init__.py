"""ptmkit: pre-train, transfer, compress and analyse the whole family of pre-trained language models."""

__version__ = "0.1.0"
