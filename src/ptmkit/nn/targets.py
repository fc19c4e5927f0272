"""The target of a position that is not predicted (padding, unmasked tokens, unused slots):
``IGNORE_INDEX``, PyTorch's ``cross_entropy`` default and HF's label convention, so labels built
here read the same in both."""

IGNORE_INDEX = -100
