"""The chinese-poetry recipe on a hand-made npm tarball: members read, pieces deduplicated and split."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from ptmkit import registry
from ptmkit.data.sources.chinese_poetry import ChinesePoetry, piece_lines, unique_pieces
from ptmkit.errors import PtmError


def _tgz(path: Path, members: dict[str, object]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in members.items():
            data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
            info = tarfile.TarInfo("package/dist/" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_piece_lines_and_dedup() -> None:
    assert piece_lines({"paragraphs": ["气和玉烛， 睿化著鸿明。", " ", "缇管一阳生。"]}) == ["气和玉烛，睿化著鸿明。", "缇管一阳生。"]
    assert piece_lines({"paragraphs": None}) == []
    assert unique_pieces([["a"], [], ["b"], ["a"]]) == [["a"], ["b"]]


def test_build_splits_pieces_as_documents(tmp_path) -> None:
    ci = [{"author": "x", "rhythmic": "r", "paragraphs": [f"第{i}首词一句。", "第二句。"]} for i in range(30)]
    qu = [{"author": "y", "title": "t", "paragraphs": [f"曲{i}。"]} for i in range(10)]
    anthology = [{"paragraphs": ["第0首词一句。", "第二句。"]}]
    tgz = _tgz(tmp_path / "p.tgz", {"songci/ci.song.0.json": ci + ci[:5], "songci/宋词三百首.json": anthology,
                                    "yuanqu/yuanqu.json": qu, "quantangshi/poet.tang.0.json": [{"paragraphs": ["唐"]}]})
    out = tmp_path / "out"
    out.mkdir()
    ChinesePoetry().build([tgz], tmp_path, out)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["pieces"] == {"songci": 35, "yuanqu": 10} and stats["distinct"] == 40
    assert [stats["parts"][p]["pieces"] for p in ("train", "dev", "test")] == [36, 2, 2]
    docs = []
    for p in ("train", "dev", "test"):
        text = (out / "text" / f"{p}.txt").read_text(encoding="utf-8")
        assert text.endswith("\n\n")  # a blank line ends every piece (a document)
        docs += [d for d in text.split("\n\n") if d]
    assert len(docs) == len(set(docs)) == 40 and not any("唐" in d for d in docs)
    # the split is seeded: building again gives the same files
    again = tmp_path / "again"
    again.mkdir()
    ChinesePoetry().build([tgz], tmp_path, again)
    assert (again / "text" / "train.txt").read_bytes() == (out / "text" / "train.txt").read_bytes()


def test_build_refuses_an_archive_without_the_texts(tmp_path) -> None:
    tgz = _tgz(tmp_path / "p.tgz", {"yuanqu/yuanqu.json": [{"paragraphs": ["曲。"]}]})
    with pytest.raises(PtmError, match="songci"):
        ChinesePoetry().build([tgz], tmp_path, tmp_path)


def test_registered_with_a_pinned_package() -> None:
    src = registry.get("source", "chinese-poetry")
    assert src.packages[0].registry == "npm" and src.packages[0].sha256 and "MIT" in src.license
