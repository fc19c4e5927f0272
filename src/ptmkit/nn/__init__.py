"""ptmkit.nn."""
