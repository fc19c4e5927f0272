"""Image–text data as the vision–language objectives read it.

:class:`ImageTextSet` holds image rows and the *concepts* they show: row ``r`` is an image
``images[r]`` of concept ``concept[r]`` in style ``style[r]``, in split ``split[r]``.  A concept has
one name in the chosen locale (the text retrieval is scored against) and optionally keywords; a
training caption is drawn per step from templates over both (:meth:`ImageTextSet.caption`), so the
model never sees one fixed string per image.  Splits are by concept in the emoji set (retrieval is
tested on concepts never seen in training) and the same for a user's data that names concepts.

Sources (:func:`load_image_text`):

* ``emoji`` (the recipe ``ptm data get emoji``): ``concepts.jsonl``, ``images-STYLE.npy`` and
  ``captions/LOCALE.json``; ``styles`` picks the drawing styles to read (``google``, ``twitter``).
* a directory with ``captions.jsonl``: rows ``{"image": "file.png", "caption": "..."}`` (or
  ``"captions": [...]``), optional ``"split"`` (train / dev / test; otherwise a seeded 80/10/10 of
  the concepts), optional ``"concept"`` (rows naming one concept share it: several images of one
  thing); images are read by :func:`ptmkit.vision.images.read_image` (square, any size, resized).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from ptmkit.data.sources.base import dataset_dir, is_ready
from ptmkit.errors import PtmError, suggest
from ptmkit.vision.images import pack_images

SPLITS = ("train", "dev", "test")
# Caption templates of the emoji set (English): a name, keywords, or both.  Sampled per step.
EN_TEMPLATES = ("{name}", "an emoji of {name}", "{name}: {keywords}", "{keywords}", "a picture of {name}")
OTHER_TEMPLATES = ("{name}", "{name}: {keywords}", "{keywords}")


@dataclass
class ImageTextSet:
    """images uint8 ``[R, S, S, 3]``; concept / split / style per row ``[R]``; per concept its name
    (``None`` where the locale has none), keywords, category and subcategory (or ``None``)."""

    images: np.ndarray
    concept: np.ndarray
    split: np.ndarray
    style: np.ndarray
    names: list[str | None]
    keywords: list[list[str]]
    locale: str = "en"
    categories: list[str | None] = field(default_factory=list)
    subcategories: list[str | None] = field(default_factory=list)
    templates: bool = True

    def __post_init__(self) -> None:
        n = len(self.images)
        if not (len(self.concept) == len(self.split) == len(self.style) == n):
            raise ValueError("images, concept, split and style must have one entry per row")
        if self.images.ndim != 4 or self.images.shape[3] != 3 or self.images.shape[1] != self.images.shape[2]:
            raise PtmError(f"images must be square RGB [rows, S, S, 3], got {self.images.shape}")

    @property
    def image_size(self) -> int:
        return int(self.images.shape[1])

    def rows(self, split: str, style: str | None = None, named: bool = True) -> np.ndarray:
        """Row indices of ``split`` (and ``style``), in order; ``named``: only concepts with a name."""
        keep = self.split == split
        if style is not None:
            keep &= self.style == style
        if named:
            keep &= np.array([self.names[c] is not None for c in self.concept], dtype=bool)
        return np.flatnonzero(keep)

    def caption(self, concept: int, rng: np.random.Generator) -> str:
        """A training caption of ``concept``: a template over its name and 1–3 of its keywords."""
        name, words = self.names[concept], self.keywords[concept]
        if not self.templates or name is None:
            return name if name is not None else ", ".join(words)
        pool = EN_TEMPLATES if self.locale == "en" else OTHER_TEMPLATES
        options = [t for t in pool if words or "{keywords}" not in t]
        template = options[int(rng.integers(len(options)))]
        picked = [words[i] for i in rng.permutation(len(words))[: int(rng.integers(1, 4))]] if words else []
        return template.format(name=name, keywords=", ".join(picked))

    def text(self, concept: int) -> str:
        """The concept's evaluation text: its name in the locale."""
        name = self.names[concept]
        if name is None:
            raise PtmError(f"concept {concept} has no name in locale {self.locale!r}")
        return name


def resize_images(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 ``[R, S, S, 3]`` -> ``[R, size, size, 3]``: the mean of each block when ``size`` divides
    ``S`` (64 px emoji to 32 or 16 without a filter's ringing), else Pillow's bicubic filter."""
    s = images.shape[1]
    if s == size:
        return images
    if s % size == 0:
        k = s // size
        blocks = images.reshape(len(images), size, k, size, k, 3).astype(np.float32)
        return np.round(blocks.mean(axis=(2, 4))).astype(np.uint8)
    return np.stack([np.asarray(Image.fromarray(im).resize((size, size), Image.Resampling.BICUBIC)) for im in images])


def emoji_set(root: Path, styles: Sequence[str] = ("google",), locale: str = "en") -> ImageTextSet:
    """The emoji recipe's directory read as rows (one per concept and style)."""
    concepts = [json.loads(line) for line in (root / "concepts.jsonl").read_text(encoding="utf-8").splitlines() if line]
    available = sorted(p.stem.removeprefix("images-") for p in root.glob("images-*.npy"))
    locales = sorted(p.stem for p in (root / "captions").glob("*.json"))
    for style in styles:
        if style not in available:
            raise PtmError(f"the emoji data have no style {style!r}{suggest(style, available)}; styles: {', '.join(available)}")
    if locale not in locales:
        raise PtmError(f"the emoji data have no captions in locale {locale!r}{suggest(locale, locales)}; "
                       f"{len(locales)} locales, e.g. {', '.join(locales[:12])}")
    captions = json.loads((root / "captions" / f"{locale}.json").read_text(encoding="utf-8"))
    n = len(concepts)
    images = [np.load(root / f"images-{s}.npy", mmap_mode="r") for s in styles]
    for s, arr in zip(styles, images):
        if len(arr) != n:
            raise PtmError(f"{root}/images-{s}.npy has {len(arr)} images for {n} concepts: fetch the data again "
                           f"(ptm data get emoji --force)")
    names = [(captions.get(c["code"]) or {}).get("tts") for c in concepts]
    keywords = [list((captions.get(c["code"]) or {}).get("keywords") or []) for c in concepts]
    split = np.array([c["split"] for c in concepts])
    return ImageTextSet(
        images=np.concatenate([np.asarray(a) for a in images]),
        concept=np.tile(np.arange(n), len(styles)),
        split=np.tile(split, len(styles)),
        style=np.repeat(np.array(list(styles)), n),
        names=names, keywords=keywords, locale=locale,
        categories=[c.get("category") for c in concepts], subcategories=[c.get("subcategory") for c in concepts],
    )


def folder_set(root: Path, image_size: int | None = None, seed: int = 0) -> ImageTextSet:
    """A user's directory with ``captions.jsonl`` (see the module docstring)."""
    path = root / "captions.jsonl"
    rows: list[dict[str, Any]] = []
    for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise PtmError(f"{path}:{k}: not a JSON object ({exc})") from exc
        if not isinstance(row, dict) or "image" not in row or not (row.get("caption") or row.get("captions")):
            raise PtmError(f'{path}:{k}: each row needs "image" and "caption" (or "captions")')
        if row.get("split", "train") not in SPLITS:
            raise PtmError(f"{path}:{k}: split {row['split']!r} is not one of {', '.join(SPLITS)}")
        rows.append(row)
    if not rows:
        raise PtmError(f"{path} has no rows")
    keys = [str(r.get("concept", r["image"])) for r in rows]
    ids = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    concept = np.array([ids[key] for key in keys], dtype=np.int64)
    captions: dict[int, list[str]] = {}
    for c, r in zip(concept, rows):
        captions.setdefault(int(c), []).extend([r["caption"]] if r.get("caption") else list(r["captions"]))
    if any("split" in r for r in rows):
        split = np.array([r.get("split", "train") for r in rows])
    else:  # a seeded 80/10/10 of the concepts
        order = np.random.default_rng(seed).permutation(len(ids))
        part = np.empty(len(ids), dtype=object)
        cut = [int(len(ids) * 0.8), int(len(ids) * 0.9)]
        part[order[: cut[0]]], part[order[cut[0]: cut[1]]], part[order[cut[1]:]] = "train", "dev", "test"
        split = part[concept].astype(str)
    images = pack_images([root / r["image"] for r in rows], image_size)
    names = [captions[c][0] for c in range(len(ids))]
    return ImageTextSet(images=images, concept=concept, split=split, style=np.full(len(rows), "user"),
                        names=names, keywords=[captions[c][1:] for c in range(len(ids))], templates=False)


def available_styles(data: str | Path) -> list[str]:
    """The drawing styles of the emoji data (``google``, ``twitter``); ``["user"]`` for a folder."""
    root = dataset_dir("emoji") if str(data) == "emoji" else Path(data)
    styles = sorted(p.stem.removeprefix("images-") for p in root.glob("images-*.npy"))
    return styles or ["user"]


def load_image_text(data: str | Path, styles: Sequence[str] = ("google",), locale: str = "en",
                    image_size: int | None = None, seed: int = 0) -> ImageTextSet:
    """``emoji`` (the fetched recipe), the recipe's directory, or a directory with ``captions.jsonl``."""
    if str(data) == "emoji":
        if not is_ready("emoji"):
            raise PtmError("the emoji data are not fetched: run `ptm data get emoji` first")
        data = dataset_dir("emoji")
    root = Path(data)
    if (root / "concepts.jsonl").is_file():
        return emoji_set(root, styles, locale)
    if (root / "captions.jsonl").is_file():
        return folder_set(root, image_size, seed)
    raise PtmError(f"{data} is not image–text data: give `emoji` (after `ptm data get emoji`) or a directory "
                   f"with captions.jsonl rows {{\"image\": \"file.png\", \"caption\": \"...\"}}")
