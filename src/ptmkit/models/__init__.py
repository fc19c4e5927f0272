"""ptmkit.models."""
