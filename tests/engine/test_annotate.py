from __future__ import annotations

import io

import pytest
from PIL import Image

from qwen_ui.engine import images
from qwen_ui.engine.annotate import PALETTE, annotate, label_colours
from qwen_ui.engine.box_mapping import Box, ImageGeometry, to_original, upright_box
from qwen_ui.engine.boxes import RawBox

WHITE = (255, 255, 255)


def stored(orientation: int, size: tuple[int, int] = (300, 200)) -> Image.Image:
    exif = Image.Exif()
    exif[images.ORIENTATION] = orientation
    buf = io.BytesIO()
    Image.new("RGB", size, WHITE).save(buf, "PNG", exif=exif.tobytes())
    return Image.open(io.BytesIO(buf.getvalue()))


def test_rectangle_is_drawn_on_the_box_edges_in_the_label_colour() -> None:
    out = annotate(stored(1), [Box(1, "", (50, 60, 150, 160))])
    colour = PALETTE[0]
    assert out.getpixel((50, 100)) == colour  # left edge
    assert out.getpixel((149, 100)) == colour  # right edge
    assert out.getpixel((100, 60)) == colour  # top edge
    assert out.getpixel((100, 100)) == WHITE  # inside stays
    assert out.getpixel((20, 20)) == WHITE


def test_each_label_gets_its_own_colour_and_repeats_share_it() -> None:
    boxes = [
        Box(1, "star", (10, 10, 40, 40)),
        Box(1, "circle", (100, 100, 140, 140)),
        Box(1, "star", (200, 50, 240, 90)),
    ]
    assert label_colours(boxes) == {"star": PALETTE[0], "circle": PALETTE[1]}
    out = annotate(stored(1), boxes)
    assert out.getpixel((10, 30)) == PALETTE[0]
    assert out.getpixel((100, 130)) == PALETTE[1]
    assert out.getpixel((200, 80)) == PALETTE[0]


def test_label_tab_is_drawn_above_the_box() -> None:
    out = annotate(stored(1), [Box(1, "红色的圆形", (60, 100, 200, 180))])
    tab = [out.getpixel((x, 95)) for x in range(60, 90)]
    assert PALETTE[0] in tab  # the filled tab just above the top edge
    assert any(pixel not in (PALETTE[0], WHITE) for pixel in tab)  # and text on it


@pytest.mark.parametrize("orientation", range(1, 9))
def test_the_result_is_upright_and_the_box_lands_where_the_model_saw_it(
    orientation: int,
) -> None:
    image = stored(orientation)
    upright = (200, 300) if orientation in (5, 6, 7, 8) else (300, 200)
    geometry = ImageGeometry(image.size, orientation, upright)
    seen = (30.0, 40.0, 120.0, 150.0)  # on the upright image (resized = upright here)
    box = to_original(RawBox("a", seen), geometry, "qwen2_5_vl")
    assert upright_box(box.box, image.size, orientation) == (30, 40, 120, 150)
    out = annotate(image, [box])
    assert out.size == upright
    assert out.getpixel((30, 100)) == PALETTE[0]
    assert out.getpixel((119, 100)) == PALETTE[0]
    assert out.getpixel((75, 100)) == WHITE


def test_colours_can_be_given_for_the_whole_answer() -> None:
    out = annotate(stored(1), [Box(1, "b", (10, 10, 50, 50))], {"b": (1, 2, 3)})
    assert out.getpixel((10, 30)) == (1, 2, 3)


def test_a_label_near_the_right_edge_stays_on_the_image() -> None:
    """A long label on a box at the right edge: its tab ends at the image's edge, whole."""
    out = annotate(stored(1), [Box(1, "a rather long label", (270, 100, 300, 150))])
    row = [out.getpixel((x, 95)) for x in range(300)]  # across the tab, above the box
    filled = [x for x, pixel in enumerate(row) if pixel != WHITE]
    assert filled and filled[-1] == 299  # reaches the edge ...
    assert filled[0] < 270 - 40  # ... from well left of the box: the tab was moved, not cut
