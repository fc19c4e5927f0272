"""Reading image files (PNG, JPEG, anything Pillow opens) into square uint8 RGB arrays.

* :func:`read_image`: one file -> ``[S, S, 3]`` uint8.  Transparency (RGBA, LA, a palette or
  grey image with a transparent colour) is composited onto a *white* background, so a drawing
  on a transparent canvas (an emoji) looks as it does on a page; everything else is converted
  to RGB.  Images must be square: a W x H image with W != H is refused (crop it first: ptmkit
  does not guess which part matters).  With ``size`` the image is resized to ``size x size``
  with Pillow's bicubic filter when its side differs.
* :func:`pack_images`: several files of one size -> ``[N, S, S, 3]`` uint8.

Every problem with a file raises :class:`~ptmkit.errors.PtmError` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from ptmkit.errors import PtmError

WHITE = (255, 255, 255)


def _open(path: str | os.PathLike[str]) -> Image.Image:
    """The image at ``path``, decoded (a truncated file fails here, not later)."""
    try:
        with Image.open(path) as src:  # closes the file
            src.load()
            img = src.copy()
    except FileNotFoundError as exc:
        raise PtmError(f"image {os.fspath(path)} does not exist") from exc
    except IsADirectoryError as exc:
        raise PtmError(f"image {os.fspath(path)} is a directory, not an image file") from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise PtmError(f"{os.fspath(path)} is not a readable image (PIL says {exc})") from exc
    return img


def _to_rgb(img: Image.Image) -> Image.Image:
    """``img`` in RGB, its transparency composited onto white."""
    if img.mode == "P" or (img.mode in ("L", "RGB", "I", "I;16") and "transparency" in img.info):
        img = img.convert("RGBA")  # a palette (or a transparent colour) becomes an alpha channel
    if img.mode in ("LA", "La", "PA"):
        img = img.convert("RGBA")
    if img.mode == "RGBa":
        img = img.convert("RGBA")
    if img.mode == "RGBA":
        background = Image.new("RGBA", img.size, WHITE + (255,))
        return Image.alpha_composite(background, img).convert("RGB")
    return img.convert("RGB")


def read_image(path: str | os.PathLike[str], size: int | None = None) -> np.ndarray:
    """The image at ``path`` as uint8 ``[S, S, 3]`` (RGB, transparency composited onto white).

    ``S`` is the image's own side, or ``size`` when given (resized with the bicubic filter
    if the side differs).  Raises :class:`PtmError` naming the file when it cannot be read as an
    image or is not square (W != H: crop it first)."""
    if size is not None and (not isinstance(size, int) or size <= 0):
        raise PtmError(f"the image size must be a positive number of pixels, not {size!r}")
    img = _open(path)
    w, h = img.size
    if w != h:
        raise PtmError(f"image {os.fspath(path)} is {w} x {h} pixels; images must be square (crop them first)")
    try:
        rgb = _to_rgb(img)
        if size is not None and size != w:
            rgb = rgb.resize((size, size), Image.Resampling.BICUBIC)
        arr = np.asarray(rgb, dtype=np.uint8)
    except (OSError, ValueError) as exc:
        raise PtmError(f"{os.fspath(path)} is not a readable image (PIL says {exc})") from exc
    return np.ascontiguousarray(arr.reshape(arr.shape[0], arr.shape[1], 3))


def pack_images(paths: Sequence[str | os.PathLike[str]], size: int) -> np.ndarray:
    """The images at ``paths`` as one uint8 array ``[N, size, size, 3]`` (row i = ``paths[i]``,
    each read by :func:`read_image` with ``size``)."""
    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    for i, p in enumerate(paths):
        out[i] = read_image(p, size)
    return out
