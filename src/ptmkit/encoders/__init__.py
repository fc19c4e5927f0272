"""Encoders registered by name (``transformer``, ...); see :mod:`ptmkit.encoders.base` for the contract."""

from ptmkit.encoders.base import Encoder, EncoderOutput
from ptmkit.encoders.transformer import TransformerConfig, TransformerEncoder

__all__ = ["Encoder", "EncoderOutput", "TransformerConfig", "TransformerEncoder"]
