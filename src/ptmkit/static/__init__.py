"""ptmkit.static."""
