"""Data recipes: real corpora and tasks fetched through package registries.

Each recipe module registers a :class:`~ptmkit.data.sources.base.Source` subclass with
``@register("source", NAME)``.  ``ptm data get NAME`` calls :func:`base.fetch`.
"""
