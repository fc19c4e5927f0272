"""ptmkit.tokenization."""
