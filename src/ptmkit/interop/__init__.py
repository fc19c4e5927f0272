"""ptmkit.interop."""
