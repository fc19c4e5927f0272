"""ptmkit.presets."""
