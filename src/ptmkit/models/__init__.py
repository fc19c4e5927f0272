"""Transformer backbones: ``TransformerConfig``, ``Backbone``, ``BackboneOutput``."""

from ptmkit.models.config import TransformerConfig
from ptmkit.models.transformer import Backbone, BackboneOutput

__all__ = ["Backbone", "BackboneOutput", "TransformerConfig"]
