"""The emoji recipe on hand-made npm tarballs: concepts kept and dropped, captions per locale,
groups never straddling splits, pictures composited onto white."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ptmkit import registry
from ptmkit.data.sources.emoji import Emoji, code_key, emoji_of, group_concepts, parent_locale, words_key
from ptmkit.errors import PtmError

# (unified, emoji.json name, category, has google, has twitter)
ENTRIES = [
    ("1F600", "GRINNING FACE", "Smileys & Emotion", True, True),
    ("1F601", "GRINNING FACE WITH SMILING EYES", "Smileys & Emotion", True, True),
    ("1F604", "SMILING FACE WITH OPEN MOUTH AND SMILING EYES", "Smileys & Emotion", True, True),
    ("2764-FE0F", "HEAVY BLACK HEART", "Smileys & Emotion", True, True),
    ("1F9D1-200D-1F33E", "FARMER", "People & Body", True, True),
    ("1F468-200D-1F33E", "MAN FARMER", "People & Body", True, True),
    ("1F469-200D-1F33E", "WOMAN FARMER", "People & Body", True, True),
    ("1F481", "INFORMATION DESK PERSON", "People & Body", True, True),
    ("1F481-200D-2642-FE0F", "MAN TIPPING HAND", "People & Body", True, True),
    ("1F468-200D-1F469-200D-1F466", "FAMILY: MAN, WOMAN, BOY", "People & Body", True, True),
    ("1F469-200D-1F467", "FAMILY: WOMAN, GIRL", "People & Body", True, True),
    ("1F476", "BABY", "People & Body", True, True),
    ("1F3FB", "EMOJI MODIFIER FITZPATRICK TYPE-1-2", "Component", True, True),
    ("1F9B0", "EMOJI COMPONENT RED HAIR", "Component", True, True),
    ("1F415", "DOG", "Animals & Nature", True, True),
    ("1F408", "CAT", "Animals & Nature", True, False),  # no Twitter picture: dropped
    ("1F1EB-1F1F7", "France Flag", "Flags", True, True),
    ("1F1E9-1F1EA", "Germany Flag", "Flags", True, True),
    ("1FAE9", "FACE WITH BAGS UNDER EYES", "Smileys & Emotion", True, True),  # in no CLDR file
]
CLDR = {
    "en": {"😀": ("grinning face", ["face", "grin"]), "😁": ("beaming face with smiling eyes", ["grin"]),
           "😄": ("grinning face with smiling eyes", ["eye"]), "❤": ("red heart", ["heart"]),
           "🧑‍🌾": ("farmer", ["rancher"]), "👨‍🌾": ("man farmer", ["man"]), "👩‍🌾": ("woman farmer", ["woman"]),
           "💁": ("person tipping hand", ["help"]), "👶": ("baby", ["young"]), "🐕": ("dog", ["pet"]),
           "🐈": ("cat", ["pet"])},
    "fr": {"😀": ("visage rieur", ["rire"]), "🐕": ("chien", ["animal"]), "❤": ("cœur rouge", ["cœur"])},
    "fr-CA": {"🐕": ("toutou", [])},
    "und": {},
}
DERIVED = {
    "en": {"💁‍♂️": ("man tipping hand", ["help", "man"]), "🇫🇷": ("flag: France", ["flag"]),
           "🇩🇪": ("flag: Germany", ["flag"]), "👨‍👩‍👦": ("family: man, woman, boy", ["family"]),
           "👩‍👧": ("family: woman, girl", ["family"])},
    "fr": {"🇫🇷": ("drapeau : France", ["drapeau"]), "😀": ("ignored: the base file names it", ["x"])},
}


def _png(color: tuple[int, int, int]) -> bytes:
    """A 64 x 64 picture: transparent, with an opaque square of ``color`` in the middle."""
    px = np.zeros((64, 64, 4), dtype=np.uint8)
    px[16:48, 16:48] = (*color, 255)
    buf = io.BytesIO()
    Image.fromarray(px, "RGBA").save(buf, format="PNG")
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def color_of(i: int, style: str) -> tuple[int, int, int]:
    return (10 * i, 200 if style == "google" else 100, 7)


def _datasource(path: Path, style: str) -> Path:
    emoji = []
    with tarfile.open(path, "w:gz") as tar:
        for i, (unified, name, cat, google, twitter) in enumerate(ENTRIES):
            has = {"google": google, "twitter": twitter}
            emoji.append({"name": name, "unified": unified, "image": unified.lower() + ".png", "short_name": name.lower(),
                          "short_names": [name.lower().replace(" ", "_")], "category": cat, "subcategory": "sub-" + cat[:3],
                          "sort_order": 100 - i if i < 3 else i, f"has_img_{style}": has[style]})
            if has[style]:
                _add(tar, f"package/img/{style}/64/{unified.lower()}.png", _png(color_of(i, style)))
        _add(tar, f"package/img/{style}/32/1f600.png", b"not read")
        _add(tar, "package/emoji.json", json.dumps(emoji).encode())
    return path


def _annotations(path: Path, kind: str, locales: dict) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for loc, ann in locales.items():
            body = {"identity": {"language": loc}}
            if ann:
                body["annotations"] = {e: {"default": kw, "tts": [tts]} if kw else {"tts": [tts]} for e, (tts, kw) in ann.items()}
            _add(tar, f"package/{kind}/{loc}/annotations.json", json.dumps({kind: body}, ensure_ascii=False).encode())
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("emoji")
    files = [_datasource(tmp / "g.tgz", "google"), _datasource(tmp / "t.tgz", "twitter"),
             _annotations(tmp / "c.tgz", "annotations", CLDR), _annotations(tmp / "d.tgz", "annotationsDerived", DERIVED)]
    out, work = tmp / "out", tmp / "work"
    out.mkdir()
    work.mkdir()
    Emoji().build(files, work, out)
    return out


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "concepts.jsonl").read_text(encoding="utf-8").splitlines()]


def test_registered_with_checksums() -> None:
    assert registry.get("source", "emoji") is Emoji
    assert len(Emoji.packages) == 4 and all(p.registry == "npm" and len(p.sha256 or "") == 64 for p in Emoji.packages)
    assert "Apache-2.0" in Emoji.license and "CC-BY-4.0" in Emoji.license and "Unicode-3.0" in Emoji.license


def test_concepts_in_sort_order_without_component_or_half_pictured(built) -> None:
    rows = _rows(built)
    names = [r["name"] for r in rows]
    assert names[:3] == ["heavy black heart", "farmer", "man farmer"]  # sort_order, not file order
    assert "cat" not in names and not any(r["category"] == "Component" for r in rows)
    assert [r["id"] for r in rows] == list(range(len(rows))) == list(range(len(ENTRIES) - 3))
    heart = rows[0]
    assert heart["code"] == "2764-fe0f" and heart["emoji"] == "\u2764\ufe0f" and heart["short_names"] == ["heavy_black_heart"]
    stats = json.loads((built / "stats.json").read_text(encoding="utf-8"))
    assert stats["read"] == len(ENTRIES) and stats["concepts"] == len(rows)
    assert list(stats["dropped"].values()) == [2, 1]


def test_split_keeps_groups_whole(built) -> None:
    rows = _rows(built)
    by_name = {r["name"]: r for r in rows}
    same = [("farmer", "man farmer", "woman farmer"), ("information desk person", "man tipping hand"),
            ("family: man, woman, boy", "family: woman, girl")]
    for names in same:
        assert len({by_name[n]["group"] for n in names}) == 1, names
    # emoji.json calls 1F601 what CLDR calls 1F604 (grinning face with smiling eyes); that joins nothing
    assert len({by_name[n]["group"] for n in ("grinning face with smiling eyes", "smiling face with open mouth and smiling eyes",
                                               "grinning face")}) == 3
    assert by_name["france flag"]["group"] != by_name["germany flag"]["group"]
    split_of_group: dict[int, set[str]] = {}
    for r in rows:
        split_of_group.setdefault(r["group"], set()).add(r["split"])
        assert r["group"] <= r["id"] and rows[r["group"]]["group"] == r["group"]  # the id of the group's first concept
    assert all(len(s) == 1 for s in split_of_group.values())
    assert {r["split"] for r in rows} <= {"train", "dev", "test"}
    stats = json.loads((built / "stats.json").read_text(encoding="utf-8"))
    assert sum(p["concepts"] for p in stats["splits"].values()) == len(rows)
    assert sum(p["groups"] for p in stats["splits"].values()) == stats["groups"] == len(split_of_group)


def test_split_stratified_by_category_and_seeded() -> None:
    from ptmkit.data.sources.emoji import split_by_group

    cats = ["a"] * 30 + ["b"] * 20
    groups = list(range(50))
    parts = split_by_group(cats, groups)
    assert parts == split_by_group(cats, groups)
    for cat, n in (("a", 30), ("b", 20)):
        got = [p for c, p in zip(cats, parts) if c == cat]
        assert (got.count("train"), got.count("dev")) == (int(0.8 * n), int(0.1 * n))


def test_captions_en_complete_other_locales_only_annotated(built) -> None:
    rows = _rows(built)
    en = json.loads((built / "captions" / "en.json").read_text(encoding="utf-8"))
    assert list(en) == [r["code"] for r in rows]  # every concept, in concept order
    assert en["2764-fe0f"] == {"tts": "red heart", "keywords": ["heart"]}  # matched without U+FE0F
    assert en["1f481-200d-2642-fe0f"]["tts"] == "man tipping hand"  # from the derived annotations
    assert en["1fae9"] == {"tts": "face with bags under eyes", "keywords": ["face", "with", "bags", "under", "eyes"]}
    fr = json.loads((built / "captions" / "fr.json").read_text(encoding="utf-8"))
    assert fr == {"1f600": {"tts": "visage rieur", "keywords": ["rire"]}, "2764-fe0f": {"tts": "cœur rouge", "keywords": ["cœur"]},
                  "1f415": {"tts": "chien", "keywords": ["animal"]},
                  "1f1eb-1f1f7": {"tts": "drapeau : France", "keywords": ["drapeau"]}}
    fr_ca = json.loads((built / "captions" / "fr-CA.json").read_text(encoding="utf-8"))
    assert fr_ca["1f415"] == {"tts": "toutou", "keywords": ["animal"]}  # keywords inherited from fr
    assert set(fr_ca) == set(fr)
    assert not (built / "captions" / "und.json").exists()
    stats = json.loads((built / "stats.json").read_text(encoding="utf-8"))
    assert stats["en_captions_from_emoji_json"] == 1 and stats["locales_without_captions"] == ["und"]
    assert stats["locales"]["fr"]["coverage"] == round(4 / len(rows), 4)
    assert stats["locales"]["fr-CA"]["own_coverage"] == round(1 / len(rows), 4)
    assert stats["locales"]["en"]["coverage"] == 1.0


def test_images_white_composited_in_concept_order(built) -> None:
    rows = _rows(built)
    index = {u: i for i, (u, *_rest) in enumerate(ENTRIES)}
    for style in ("google", "twitter"):
        images = np.load(built / f"images-{style}.npy")
        assert images.dtype == np.uint8 and images.shape == (len(rows), 64, 64, 3)
        assert (images[:, :16] == 255).all() and (images[:, :, 48:] == 255).all()  # the transparent margin is white
        for r, img in zip(rows, images):
            assert img[32, 32].tolist() == list(color_of(index[r["code"].upper()], style))


def test_keys_and_parent_locales() -> None:
    assert words_key("Woman and Man Holding Hands") == words_key("people holding hands") == "holding hands"
    assert words_key("man walking: facing right") == words_key("PERSON WALKING") == "walking"
    assert words_key("Isle of Man Flag") == "isle of flag"
    assert code_key("1f469-200d-1f33e") == code_key("1f9d1-200d-1f33e") == "person-200d-1f33e"
    assert code_key("1f3c3-200d-2640-fe0f-200d-27a1-fe0f") == code_key("1f3c3") == "1f3c3"
    assert emoji_of("1F468-200D-1F33E") == "👨‍🌾"
    assert group_concepts([["a man"], ["a woman"], ["b"]], ["1", "2", "3"]) == [0, 0, 2]
    assert group_concepts([["x", "y"], ["y", "x"]], ["1", "2"]) == [0, 1]  # names compared per kind
    assert [parent_locale(x) for x in ("en-GB", "en-001", "en", "de-CH", "zh-Hant", "zh-Hant-HK", "sr-Cyrl", "sr-Latn")] == [
        "en-001", "en", None, "de", None, "zh-Hant", "sr", None]


def test_archive_without_emoji_json_is_refused(tmp_path) -> None:
    bad = tmp_path / "bad.tgz"
    with tarfile.open(bad, "w:gz") as tar:
        _add(tar, "package/img/google/64/1f600.png", _png((1, 2, 3)))
    with pytest.raises(PtmError, match="emoji.json"):
        Emoji().build([bad, bad, bad, bad], tmp_path, tmp_path)
