"""Vision–language objectives, registered by name as ``vl_objective`` (see :mod:`.base`)."""
