"""ptmkit.tasks."""
