"""ptmkit.data."""
