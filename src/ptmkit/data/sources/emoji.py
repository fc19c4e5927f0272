"""Emoji as image-text pairs: Google and Twitter (Twemoji) pictures of each emoji, captioned in
every CLDR locale, from npm.

Read from four npm tarballs (each checked against its SHA-256):

* ``emoji-datasource-google@16.0.0`` and ``emoji-datasource-twitter@16.0.0``: ``package/emoji.json``
  (one entry per emoji: ``name``, ``unified`` code points, ``image`` file, ``short_names``,
  ``category``, ``subcategory``, ``sort_order``, ``has_img_STYLE``) and the 64 x 64 RGBA pictures
  ``package/img/STYLE/64/IMAGE``.  Skin-tone variants (``skin_variations``) are not read.
* ``cldr-annotations-full@48.2.0`` (``annotations/LOCALE/annotations.json``) and
  ``cldr-annotations-derived-full@48.2.0`` (``annotationsDerived/LOCALE/annotations.json``: the
  sequences CLDR names by rule, such as flags, gendered and hair-style variants): per locale and
  emoji, ``tts`` (the short spoken name) and ``default`` (keywords).

**Concepts.**  One concept per emoji.json entry, in ``sort_order``; the ``Component`` category
(skin-tone swatches and hair pieces, not pictures of anything by themselves) is dropped, as is an
entry without a picture in both styles (``has_img_STYLE`` false or the file absent).  The emoji of
an entry is ``''.join(chr(int(h, 16)) for h in unified.split('-'))``; ``code`` is ``unified`` in
lower case (``1f600``, ``1f468-200d-1f33e``).

**Captions.**  A locale's caption of a concept is ``{"tts": str, "keywords": [str]}``: each field
is looked up in the locale's annotations, then its derived annotations, then those of its CLDR
parent locales in turn (``en-GB`` -> ``en-001`` -> ``en``, ``es-MX`` -> ``es-419`` -> ``es``,
``de-CH`` -> ``de``; a locale with an explicit script, such as ``zh-Hant`` or ``sr-Latn``, has
no parent, as in CLDR); an emoji is looked up with and without its U+FE0F variation selectors.
A concept without a ``tts`` in the locale has no caption there (``keywords`` may be empty).  Only
``captions/en.json`` is completed: a concept CLDR does not name in English gets the emoji.json
name as ``tts`` and its words as ``keywords``; no other locale gets English text.  A locale
without a single caption (``und``, the root) is not written.

**Split.**  By concept, keeping *groups* whole: a group is a family of concepts whose pictures are
near-identical variants, so that none of them is seen in training when another is tested.  Two
concepts are in one group when they share either key (and groups are closed under that):

* the *words* key of their emoji.json name, or of their CLDR English ``tts`` (each compared
  with names of its own kind only: the two give some names to different emoji, such as
  ``grinning face with smiling eyes``), both lower case: the name's words without the person
  words ``man woman person men women people boy girl adult`` (``adult``: emoji.json's name of
  ``person``), the connective ``and`` and the words ``facing right`` (the mirrored variants of
  Unicode 15.1), punctuation removed.  ``man farmer``, ``woman farmer`` and ``farmer`` are one
  group; so are all ``family: ...`` and all ``kiss: ...`` sequences.
* the *code* key: the code points without U+FE0F, without a zero-width joiner followed by the
  gender signs U+2640 / U+2642 or by U+27A1 (facing right), with the person bases U+1F468,
  U+1F469, U+1F9D1 read as one.  This joins pairs whose emoji.json names differ:
  ``information desk person`` / ``man tipping hand``, ``merperson`` / ``mermaid``.

Each country and subdivision flag is its own concept and its own group.  Groups are split per
category (a group counts under the category of its first concept), shuffled with
``np.random.default_rng(SEED)`` and cut 80/10/10 by :func:`ptmkit.data.sources.parts.cut`, so
every category appears in every split.

Outputs (``$PTMKIT_HOME/data/emoji/``):

* ``concepts.jsonl``: row i is concept i (= image row i): ``{"id", "code", "emoji", "name"
  (emoji.json name, lower case), "short_names", "category", "subcategory", "group" (the id of the
  group's first concept), "split"}``.
* ``images-google.npy``, ``images-twitter.npy``: uint8 ``[N, 64, 64, 3]``, RGB on white
  (:func:`ptmkit.vision.images.read_image`).
* ``captions/LOCALE.json``: ``{code: {"tts", "keywords"}}`` for the concepts the locale names.
* ``stats.json``: concepts and groups per split and category, what was dropped and why, the
  locales with their coverage (fraction of concepts with a caption; ``own_coverage``: from the
  locale's own files, without parents), the English captions filled from emoji.json, licenses.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.data.sources.base import Package, Source
from ptmkit.data.sources.parts import PARTS, cut, jsonl
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_stream, atomic_write_bytes, atomic_write_text
from ptmkit.registry import register
from ptmkit.vision.images import pack_images

GOOGLE = Package("npm", "emoji-datasource-google@16.0.0",
                 "fb5fd131b362aab7a55542d2a147a79708cce0a8b1c1bbacd470172708b5c438")
TWITTER = Package("npm", "emoji-datasource-twitter@16.0.0",
                  "f64a530c63bca463bd8317fdc4615ce63a53a0c65018e4ce2d848aaba7a28877")
CLDR = Package("npm", "cldr-annotations-full@48.2.0",
               "28576e51225deb51e3ddd734b0f824a0079682cb5d8c27faa9f68149317a14d1")
CLDR_DERIVED = Package("npm", "cldr-annotations-derived-full@48.2.0",
                       "4be946ff5815f806ec78b50363d577a769f2fbfb90c6380a44e161a92436996e")
STYLES = ("google", "twitter")
IMAGE_SIZE = 64
SEED = 1996
FRACTIONS = (0.8, 0.1, 0.1)
DROPPED_CATEGORY = "Component"
LICENSES = {
    "images-google.npy": "Apache-2.0 (Noto Emoji, Google; via emoji-datasource-google, MIT)",
    "images-twitter.npy": "CC-BY-4.0 (Twemoji, Twitter, Inc. and other contributors; via emoji-datasource-twitter, MIT)",
    "captions": "Unicode-3.0 (Unicode CLDR annotations, cldr-annotations-full and cldr-annotations-derived-full)",
    "concepts.jsonl": "MIT (emoji-datasource names and categories) and Unicode-3.0",
}

# CLDR parent locales (supplemental parentLocales) for the locales of the annotations that do not
# inherit by truncation; a locale with a script subtag inherits from the root unless listed here
# (sr-Cyrl: Cyrillic is Serbian's default script, so it inherits from sr).
PARENTS = {
    "en-001": "en", "en-AU": "en-001", "en-CA": "en-001", "en-GB": "en-001", "en-IN": "en-001",
    "es-419": "es", "es-MX": "es-419", "es-US": "es-419", "hi-Latn": "en-IN", "pt-PT": "pt", "sr-Cyrl": "sr",
}
PERSON_WORDS = frozenset("man woman person men women people boy girl adult and".split())
_FE0F, _ZWJ = "fe0f", "200d"
_DROP_AFTER_ZWJ = ("2640", "2642", "27a1")  # female sign, male sign, rightwards arrow (facing right)
_PERSON_BASES = ("1f468", "1f469", "1f9d1")
_MEMBER_JSON = "package/emoji.json"
_ANNOTATIONS = re.compile(r"^package/(annotations|annotationsDerived)/([A-Za-z0-9-]+)/annotations\.json$")


def emoji_of(unified: str) -> str:
    """``'1F468-200D-1F33E'`` -> the emoji (a string of those code points)."""
    return "".join(chr(int(h, 16)) for h in unified.split("-"))


def parent_locale(locale: str) -> str | None:
    """The CLDR parent of ``locale`` (``None`` for a language or a script variant: the root)."""
    if locale in PARENTS:
        return PARENTS[locale]
    parts = locale.split("-")
    if len(parts) == 1 or (len(parts) == 2 and len(parts[1]) == 4 and parts[1].isalpha()):
        return None
    return "-".join(parts[:-1])


def words_key(name: str) -> str:
    """The words key of an English name (see the module docstring): ``'Man Farmer'`` -> ``'farmer'``."""
    text = re.sub(r"\bfacing right\b", " ", name.lower())
    words = re.findall(r"[^\s:,;.()\"“”]+", text)
    return " ".join(w for w in words if w not in PERSON_WORDS)


def code_key(code: str) -> str:
    """The code key of a lower-case ``code`` (see the module docstring)."""
    points = [p for p in code.split("-") if p != _FE0F]
    kept: list[str] = []
    i = 0
    while i < len(points):
        if points[i] == _ZWJ and i + 1 < len(points) and points[i + 1] in _DROP_AFTER_ZWJ:
            i += 2
            continue
        kept.append("person" if points[i] in _PERSON_BASES else points[i])
        i += 1
    return "-".join(kept)


def group_concepts(names: list[list[str]], codes: list[str]) -> list[int]:
    """``group[i]``: the smallest index of the concepts joined with concept ``i`` by a shared key:
    the words key of ``names[i][k]`` (names of one kind ``k``: the words of an emoji.json name are
    compared with those of other emoji.json names only, as the two sources give some names to
    different emoji) or the code key of ``codes[i]``."""
    parent = list(range(len(codes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, (ns, code) in enumerate(zip(names, codes)):
        keys = {f"w{k}:" + words_key(n) for k, n in enumerate(ns) if n} | {"c:" + code_key(code)}
        for key in sorted(keys):
            j = first.setdefault(key, i)
            a, b = find(i), find(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return [find(i) for i in range(len(codes))]


def split_by_group(categories: list[str], groups: list[int], seed: int = SEED,
                   fractions: Iterable[float] = FRACTIONS) -> list[str]:
    """The part of each concept: groups (by category of their first concept, categories in order
    of first appearance) shuffled and cut by :func:`parts.cut`."""
    rng = np.random.default_rng(seed)
    firsts = sorted(set(groups))
    by_cat: dict[str, list[int]] = {}
    for g in firsts:
        by_cat.setdefault(categories[g], []).append(g)
    part_of_group: dict[int, str] = {}
    for cat_groups in by_cat.values():
        for part, idx in cut(len(cat_groups), rng, tuple(fractions)).items():
            for k in idx:
                part_of_group[cat_groups[k]] = part
    return [part_of_group[g] for g in groups]


def _read_tar_json(tf: tarfile.TarFile, member: tarfile.TarInfo, what: str) -> Any:
    try:
        return json.loads(tf.extractfile(member).read().decode("utf-8"))  # type: ignore[union-attr]
    except (ValueError, AttributeError) as exc:
        raise PtmError(f"{what}: {member.name} is not readable JSON ({exc})") from exc


def read_datasource(tgz: Path, style: str, dest: Path) -> tuple[list[dict], set[str]]:
    """emoji.json of an emoji-datasource tarball and the names of the 64 px pictures it holds,
    extracted into ``dest``."""
    prefix = f"package/img/{style}/{IMAGE_SIZE}/"
    entries: list[dict] | None = None
    images: set[str] = set()
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as tf:
        for m in tf:
            if not m.isfile():
                continue
            if m.name == _MEMBER_JSON:
                entries = _read_tar_json(tf, m, tgz.name)
            elif m.name.startswith(prefix) and m.name.endswith(".png") and "/" not in m.name[len(prefix):]:
                name = m.name[len(prefix):]
                if name.startswith("."):
                    continue
                atomic_write_bytes(dest / name, tf.extractfile(m).read(), durable=False)  # type: ignore[union-attr]
                images.add(name)
    if not isinstance(entries, list) or not entries:
        raise PtmError(f"{tgz.name} has no {_MEMBER_JSON} with a list of emoji (is it emoji-datasource-{style}?)")
    if not images:
        raise PtmError(f"{tgz.name} has no {prefix}*.png pictures (is it emoji-datasource-{style}?)")
    return entries, images


def read_annotations(tgz: Path) -> dict[str, dict[str, dict]]:
    """``{locale: {emoji: {"tts": [...], "default": [...]}}}`` of a CLDR annotations tarball
    (``cldr-annotations-full`` or ``cldr-annotations-derived-full``)."""
    out: dict[str, dict[str, dict]] = {}
    with tarfile.open(tgz) as tf:
        for m in tf:
            match = _ANNOTATIONS.match(m.name) if m.isfile() else None
            if not match:
                continue
            data = _read_tar_json(tf, m, tgz.name)
            body = data.get(match.group(1), {}) if isinstance(data, dict) else {}
            ann = body.get("annotations", {}) if isinstance(body, dict) else {}
            out[match.group(2)] = {k: v for k, v in ann.items() if isinstance(v, dict)} if isinstance(ann, dict) else {}
    if not out:
        raise PtmError(f"{tgz.name} has no annotations/LOCALE/annotations.json (is it a cldr-annotations package?)")
    return out


def _lookup(table: dict[str, dict], emoji: str, field: str) -> Any:
    for key in (emoji, emoji.replace("\ufe0f", "")):
        value = table.get(key, {}).get(field)
        if value:
            return value
    return None


def locale_captions(locale: str, emojis: list[str], codes: list[str], base: dict[str, dict[str, dict]],
                    derived: dict[str, dict[str, dict]]) -> tuple[dict[str, dict], int]:
    """``({code: {"tts", "keywords"}}, own)``: the captions of ``locale`` (fields looked up in the
    locale's annotations, its derived annotations, then its parents'); ``own``: how many of them
    the locale's own files give a ``tts``."""
    chain: list[dict[str, dict]] = []
    loc: str | None = locale
    while loc is not None:
        chain += [base.get(loc, {}), derived.get(loc, {})]
        loc = parent_locale(loc)
    captions, own = {}, 0
    for emoji, code in zip(emojis, codes):
        tts = next((v for t in chain if (v := _lookup(t, emoji, "tts"))), None)
        if not tts:
            continue
        keywords = next((v for t in chain if (v := _lookup(t, emoji, "default"))), [])
        captions[code] = {"tts": str(tts[0] if isinstance(tts, list) else tts), "keywords": [str(k) for k in keywords]}
        own += any(_lookup(t, emoji, "tts") for t in chain[:2])
    return captions, own


def name_words(name: str) -> list[str]:
    """The words of a name as keywords, each once: ``'family: man, boy'`` -> ``['family', 'man', 'boy']``."""
    return list(dict.fromkeys(re.findall(r"[^\s:,;.()\"“”]+", name)))


@register("source", "emoji")
class Emoji(Source):
    name = "emoji"
    description = ("Emoji image-text pairs: ~1,900 emoji drawn by Google (Noto) and Twitter (Twemoji) at 64 x 64, "
                   "captioned (name + keywords) in ~160 CLDR locales; split 80/10/10 by family of variants")
    packages = (GOOGLE, TWITTER, CLDR, CLDR_DERIVED)
    origin = ("npm emoji-datasource-google@16.0.0, emoji-datasource-twitter@16.0.0 (emoji.json, img/STYLE/64), "
              "cldr-annotations-full@48.2.0, cldr-annotations-derived-full@48.2.0")
    license = ("images: Apache-2.0 (Google Noto Emoji) and CC-BY-4.0 (Twemoji, attribution to Twitter, Inc. and "
               "other contributors); captions: Unicode-3.0 (Unicode CLDR); emoji-datasource packaging and metadata: MIT")

    def build(self, files: list[Path], work: Path, out: Path) -> None:
        google_tgz, twitter_tgz, cldr_tgz, derived_tgz = files
        catalogues, pictures = {}, {}
        for style, tgz in zip(STYLES, (google_tgz, twitter_tgz)):
            catalogues[style], pictures[style] = read_datasource(tgz, style, work / "img" / style)
        has = {style: {e.get("unified"): bool(e.get(f"has_img_{style}")) and e.get("image") in pictures[style]
                       for e in catalogues[style] if isinstance(e, dict)} for style in STYLES}

        entries = sorted((e for e in catalogues[STYLES[0]] if isinstance(e, dict) and e.get("unified")),
                         key=lambda e: (e.get("sort_order", 1 << 30), e["unified"]))
        dropped = {"category Component (skin-tone swatches, hair pieces)": 0,
                   "no picture in both styles (google and twitter)": 0}
        kept = []
        for e in entries:
            if e.get("category") == DROPPED_CATEGORY:
                dropped["category Component (skin-tone swatches, hair pieces)"] += 1
            elif not all(has[s].get(e["unified"]) for s in STYLES):
                dropped["no picture in both styles (google and twitter)"] += 1
            else:
                kept.append(e)
        if not kept:
            raise PtmError(f"no emoji with pictures in both styles in {google_tgz.name} and {twitter_tgz.name}")

        codes = [e["unified"].lower() for e in kept]
        emojis = [emoji_of(e["unified"]) for e in kept]
        names = [str(e.get("name") or e.get("short_name") or e["unified"]).lower() for e in kept]
        categories = [str(e.get("category")) for e in kept]

        base, derived = read_annotations(cldr_tgz), read_annotations(derived_tgz)
        (out / "captions").mkdir()
        locales, empty = {}, []
        en_filled = 0
        for locale in sorted(set(base) | set(derived)):
            captions, own = locale_captions(locale, emojis, codes, base, derived)
            if locale == "en":
                for code, name in zip(codes, names):
                    if code not in captions:
                        captions[code] = {"tts": name, "keywords": name_words(name)}
                        en_filled += 1
                captions = {c: captions[c] for c in codes}
            if not captions:
                empty.append(locale)
                continue
            atomic_write_text(out / "captions" / f"{locale}.json",
                              json.dumps(captions, ensure_ascii=False, indent=0) + "\n", durable=False)
            locales[locale] = {"captions": len(captions), "coverage": round(len(captions) / len(codes), 4),
                               "own_coverage": round(own / len(codes), 4)}
        if "en" not in locales:
            raise PtmError(f"{cldr_tgz.name} has no English annotations (annotations/en/annotations.json)")

        en = json.loads((out / "captions" / "en.json").read_text(encoding="utf-8"))
        groups = group_concepts([[n, en[c]["tts"]] for n, c in zip(names, codes)], codes)
        splits = split_by_group(categories, groups)

        rows = [{"id": i, "code": code, "emoji": emoji, "name": name,
                 "short_names": list(e.get("short_names") or []), "category": cat,
                 "subcategory": e.get("subcategory"), "group": g, "split": part}
                for i, (e, code, emoji, name, cat, g, part)
                in enumerate(zip(kept, codes, emojis, names, categories, groups, splits))]
        atomic_write_text(out / "concepts.jsonl", jsonl(rows), durable=False)

        for style in STYLES:
            by_code = {e.get("unified"): e.get("image") for e in catalogues[style] if isinstance(e, dict)}
            paths = [work / "img" / style / by_code[e["unified"]] for e in kept]
            with atomic_stream(out / f"images-{style}.npy", durable=False) as f:
                np.save(f, pack_images(paths, IMAGE_SIZE))

        per_split: dict[str, Any] = {}
        for part in PARTS:
            members = [r for r in rows if r["split"] == part]
            cats: dict[str, int] = {}
            for r in members:
                cats[r["category"]] = cats.get(r["category"], 0) + 1
            per_split[part] = {"concepts": len(members), "groups": len({r["group"] for r in members}),
                               "categories": dict(sorted(cats.items()))}
        stats = {
            "concepts": len(rows), "groups": len(set(groups)), "image_shape": [len(rows), IMAGE_SIZE, IMAGE_SIZE, 3],
            "styles": list(STYLES), "seed": SEED, "fractions": list(FRACTIONS), "splits": per_split,
            "read": len(entries), "dropped": dropped,
            "en_captions_from_emoji_json": en_filled,
            "locales": locales, "locales_without_captions": empty,
            "licenses": LICENSES, "origin": self.origin,
        }
        atomic_write_text(out / "stats.json", json.dumps(stats, indent=2, ensure_ascii=False) + "\n", durable=False)
