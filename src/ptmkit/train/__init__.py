"""ptmkit.train."""
