"""vision.images: square images read as uint8 RGB, transparency on white, errors naming the file."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from ptmkit.errors import PtmError
from ptmkit.vision.images import pack_images, read_image


def test_rgba_transparency_is_composited_onto_white(tmp_path) -> None:
    px = np.zeros((4, 4, 4), dtype=np.uint8)
    px[0, 0] = (255, 0, 0, 255)  # opaque red
    px[0, 1] = (0, 0, 255, 0)  # fully transparent blue: white
    px[0, 2] = (0, 0, 0, 128)  # half-transparent black: mid grey
    px[1:] = (10, 20, 30, 255)
    Image.fromarray(px, "RGBA").save(tmp_path / "a.png")
    img = read_image(tmp_path / "a.png")
    assert img.dtype == np.uint8 and img.shape == (4, 4, 3)
    assert img[0, 0].tolist() == [255, 0, 0]
    assert img[0, 1].tolist() == [255, 255, 255]
    assert img[0, 3].tolist() == [255, 255, 255]  # transparent black (zeros) is white too
    assert abs(int(img[0, 2, 0]) - 127) <= 1 and len(set(img[0, 2].tolist())) == 1
    assert (img[1:] == np.array([10, 20, 30], dtype=np.uint8)).all()


def test_grey_alpha_and_palette_transparency(tmp_path) -> None:
    la = np.zeros((2, 2, 2), dtype=np.uint8)
    la[0, 0] = (0, 255)
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    assert read_image(tmp_path / "la.png").tolist() == [[[0, 0, 0], [255] * 3], [[255] * 3, [255] * 3]]
    p = Image.new("P", (2, 2), 0)
    p.putpalette([0, 0, 0, 0, 128, 0] + [0] * 762)
    p.putpixel((1, 1), 1)
    p.save(tmp_path / "p.png", transparency=0)
    assert read_image(tmp_path / "p.png").tolist() == [[[255] * 3, [255] * 3], [[255] * 3, [0, 128, 0]]]
    Image.new("L", (3, 3), 7).save(tmp_path / "l.jpg")  # plain grey JPEG: no transparency, just RGB
    assert read_image(tmp_path / "l.jpg").shape == (3, 3, 3)


def test_corrupt_file_and_missing_file_errors_name_the_file(tmp_path) -> None:
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    with pytest.raises(PtmError, match=r"broken\.png is not a readable image \(PIL says"):
        read_image(bad)
    good = tmp_path / "good.png"
    Image.new("RGB", (32, 32), (1, 2, 3)).save(good)
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(good.read_bytes()[:60])
    with pytest.raises(PtmError, match="truncated.png is not a readable image"):
        read_image(truncated)
    with pytest.raises(PtmError, match="nothere.png does not exist"):
        read_image(tmp_path / "nothere.png")


def test_non_square_image_is_refused(tmp_path) -> None:
    Image.new("RGB", (6, 4)).save(tmp_path / "wide.png")
    with pytest.raises(PtmError, match=r"wide\.png is 6 x 4 pixels; images must be square \(crop them first\)"):
        read_image(tmp_path / "wide.png", 4)


def test_resize_and_pack(tmp_path) -> None:
    Image.new("RGBA", (8, 8), (0, 0, 0, 0)).save(tmp_path / "a.png")
    Image.new("RGB", (4, 4), (9, 9, 9)).save(tmp_path / "b.png")
    Image.new("RGB", (5, 5), (200, 100, 50)).save(tmp_path / "c.png")
    assert read_image(tmp_path / "a.png", 4).shape == (4, 4, 3)
    packed = pack_images([tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"], 4)
    assert packed.shape == (3, 4, 4, 3) and packed.dtype == np.uint8
    assert (packed[0] == 255).all() and (packed[1] == 9).all()  # same size: unchanged
    assert np.abs(packed[2].astype(int) - [200, 100, 50]).max() <= 1  # a flat colour stays flat when resized
    with pytest.raises(PtmError, match="positive"):
        read_image(tmp_path / "b.png", 0)
