"""Image encoders, registered by name as ``image_encoder`` (see :mod:`.base` for the contract)."""
