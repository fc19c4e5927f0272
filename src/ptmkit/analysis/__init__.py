"""ptmkit.analysis."""
