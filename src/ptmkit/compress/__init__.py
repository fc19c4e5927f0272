"""ptmkit.compress."""
