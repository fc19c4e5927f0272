"""ptmkit.objectives."""
