"""What ``ptm distil`` does by default when its transfer set is small.

The transfer set is what the student is trained on before any augmentation: the task's training
examples plus the ``--unlabelled`` text.  Below :data:`SMALL_TRANSFER_SET` examples a student sees
too little for the teacher's soft labels to show much: at the common 3 epochs of batch 32, 2,000
examples give 188 optimizer steps, under the 200 that fine-tuning warns of
(:data:`ptmkit.train.budget.MIN_FINETUNE_STEPS`).  There, by default (``auto``):

* Tang et al. (2019)'s augmentation (:mod:`ptmkit.compress.augment`) adds :data:`AUTO_AUGMENT`
  synthetic sentences per training sentence, labelled by the teacher, whatever the student's kind
  (the paper made them for a BiLSTM; they are text, and any student reads them);
* a labels-only twin of each student is trained (:mod:`ptmkit.compress.labels_only`): on so few
  examples it costs little, and it says whether the teacher helped at all.

Tasks the augmentation cannot serve (sentence pairs, tagging), module replacing (which trains on
the task's own data) and tokenizers without a mask token are left unaugmented under ``auto``, with
the reason logged (:func:`ptmkit.compress.augment.augment_count`); ``--augment N`` / ``on``
refuses them instead.  This module imports nothing heavy: the command reads its settings.
"""

from __future__ import annotations

import argparse

from ptmkit.errors import PtmError

SMALL_TRANSFER_SET = 2000  # fewer examples than this, and the transfer set is small (see the module's docstring)
# Synthetic sentences per training sentence when augmentation is on without a number: between the
# 4 measured on MR (docs/compression.md) and the 20 Tang et al. used on SST-2; 2,000 sentences
# then give about 20,000, which a small student reads in minutes on a CPU.
AUTO_AUGMENT = 10
MODES = ("auto", "on", "off")


def parse_mode(text: str, option: str) -> str:
    """``auto`` | ``on`` | ``off`` (any case), or an ``argparse`` error naming ``option``."""
    mode = str(text).strip().lower()
    if mode not in MODES:
        raise argparse.ArgumentTypeError(f"{option} takes auto, on or off, got {text!r}")
    return mode


def parse_augment(text: str) -> int | str:
    """``--augment``'s value: ``auto``, ``on``, ``off`` (0) or a number of synthetic sentences per
    training sentence (0: none)."""
    mode = str(text).strip().lower()
    if mode in MODES:
        return 0 if mode == "off" else mode
    try:
        n = int(mode)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--augment takes auto, on, off or a number of synthetic sentences per "
                                         f"training sentence, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"--augment N takes N >= 0 (0: off), got {n}")
    return n


def requested(mode: int | str) -> int:
    """Synthetic sentences per training sentence that ``--augment MODE`` asks for whatever the
    transfer set's size: ``on`` :data:`AUTO_AUGMENT`, ``off`` and ``auto`` 0, a number itself."""
    if mode == "on":
        return AUTO_AUGMENT
    if mode in ("off", "auto"):
        return 0
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise PtmError(f"augment takes auto, on, off or a number of synthetic sentences per sentence, got {mode!r}")
    return mode


def is_small(size: int) -> bool:
    """Whether a transfer set of ``size`` examples is small (fewer than :data:`SMALL_TRANSFER_SET`)."""
    return size < SMALL_TRANSFER_SET


def twin_wanted(mode: str, size: int) -> bool:
    """Whether ``--labels-only MODE`` trains the labels-only twins for a transfer set of ``size``
    examples (``auto``: when it is small)."""
    if mode not in MODES:
        raise PtmError(f"labels_only takes auto, on or off, got {mode!r}")
    return mode == "on" or (mode == "auto" and is_small(size))


__all__ = ["AUTO_AUGMENT", "MODES", "SMALL_TRANSFER_SET", "is_small", "parse_augment", "parse_mode", "requested",
           "twin_wanted"]
