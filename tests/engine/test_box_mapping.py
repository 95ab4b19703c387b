from __future__ import annotations

import io

import pytest
from PIL import Image

from qwen_ui.admission.tokens import Geometry, image_grid
from qwen_ui.engine import images
from qwen_ui.engine.box_mapping import (
    Box,
    ImageGeometry,
    PromptImages,
    SeenImage,
    find_boxes,
    images_of,
    locate,
    locate_seen,
    to_original,
)
from qwen_ui.engine.boxes import Family, ParsedAnswer, RawBox, parse_boxes

LIMITS = images.ImageLimits(max_bytes=5_000_000, max_images=4, max_pixels=10_000_000)
STORED = (300, 200)  # the file's own pixel grid
TARGET = (40, 30, 130, 90)  # a red rectangle on that grid: x1, y1, x2, y2
QWEN25 = Geometry(14, 2, 2, 3136, 40_000)  # small max_pixels: a real downscale
QWEN3 = Geometry(16, 2, 2, 4096, 40_000)
FAMILIES: list[Family] = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


def oriented_file(orientation: int, fmt: str = "PNG") -> bytes:
    """An image with the red rectangle at TARGET on its stored grid, EXIF ``orientation``."""
    image = Image.new("RGB", STORED, (255, 255, 255))
    image.paste((255, 0, 0), TARGET)
    exif = Image.Exif()
    exif[images.ORIENTATION] = orientation
    buf = io.BytesIO()
    image.save(buf, fmt, exif=exif.tobytes())
    return buf.getvalue()


def red_bbox(image: Image.Image) -> tuple[int, int, int, int]:
    """Where the red pixels are (x1, y1, x2, y2, exclusive ends)."""
    mask = image.convert("RGB").point(lambda v: 255 if v > 128 else 0)
    red = Image.eval(mask.split()[0], lambda v: v)
    not_green = Image.eval(mask.split()[1], lambda v: 255 - v)
    box = Image.composite(red, Image.new("L", image.size, 0), not_green).getbbox()
    assert box is not None
    return box


def model_box(
    upright_box: tuple[int, int, int, int], geometry: ImageGeometry, family: Family
) -> tuple[float, float, float, float]:
    """What a model that located the shape perfectly would write, in its family's units."""
    width, height = geometry.upright
    if family == "qwen2_5_vl":
        sx, sy = geometry.resized[0] / width, geometry.resized[1] / height
    else:
        sx, sy = 1000 / width, 1000 / height
    x1, y1, x2, y2 = upright_box
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


def geometry_of(checked: images.CheckedImage, family: Family) -> ImageGeometry:
    geometry = QWEN3 if family == "qwen3_vl" else QWEN25
    grid = image_grid(*checked.size, geometry)
    return ImageGeometry.of_grid(
        checked.size, checked.orientation, (grid.t, grid.h, grid.w), geometry.patch_size
    )


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("orientation", range(1, 9))
def test_each_exif_orientation_maps_back_to_the_stored_grid(
    orientation: int, family: Family
) -> None:
    checked = images.decode(oriented_file(orientation), 1, LIMITS)
    assert checked.orientation == orientation
    geometry = geometry_of(checked, family)
    assert geometry.size == STORED
    assert geometry.resized != geometry.upright  # the processor did resize
    seen = model_box(red_bbox(checked.image), geometry, family)
    box = to_original(RawBox("red", seen), geometry, family)
    assert box == Box(1, "red", TARGET)


def test_jpeg_orientation_is_read_from_the_header() -> None:
    checked = images.check(oriented_file(6, "JPEG"), 1, LIMITS)
    assert (checked.orientation, checked.size) == (6, (200, 300))


def test_qwen25_pixels_are_those_of_the_resized_image() -> None:
    geometry = ImageGeometry((1000, 500), 1, (700, 350))
    box = to_original(RawBox("a", (70, 35, 140, 70)), geometry, "qwen2_5_vl")
    assert box.box == (100, 50, 200, 100)


def test_relative_families_use_thousandths_of_the_sides() -> None:
    geometry = ImageGeometry((1000, 500), 1, (700, 350))
    relative: list[Family] = ["qwen2_vl", "qwen3_vl"]
    for family in relative:
        box = to_original(RawBox("a", (100, 100, 500, 1000)), geometry, family)
        assert box.box == (100, 50, 500, 500)


def test_of_grid_uses_the_processor_grid() -> None:
    geometry = ImageGeometry.of_grid((201, 100), 1, (1, 10, 20), 14)
    assert geometry.resized == (280, 140)
    turned = ImageGeometry.of_grid((100, 201), 6, (1, 20, 10), 14)
    assert (turned.size, turned.upright, turned.resized) == ((201, 100), (100, 201), (140, 280))


def test_boxes_outside_the_image_are_clamped() -> None:
    geometry = ImageGeometry((100, 50), 1, (112, 56))
    box = to_original(RawBox("a", (-20, -5, 500, 30)), geometry, "qwen2_5_vl")
    assert box.box == (0, 0, 100, 27)
    relative = to_original(RawBox("a", (900, 500, 1400, 1200)), geometry, "qwen3_vl")
    assert relative.box == (90, 25, 100, 50)


def test_swapped_corners_are_put_in_order() -> None:
    geometry = ImageGeometry((100, 100), 1, (100, 100))
    box = to_original(RawBox("a", (60, 70, 10, 20)), geometry, "qwen2_5_vl")
    assert box.box == (10, 20, 60, 70)


def test_locate_drops_boxes_wholly_outside_and_unknown_images() -> None:
    geometry = ImageGeometry((100, 100), 1, (112, 112))
    parsed = ParsedAnswer(
        "",
        (
            RawBox("in", (0, 0, 56, 56)),
            RawBox("outside", (200, 200, 300, 300)),
            RawBox("no such image", (0, 0, 10, 10), 3),
        ),
    )
    assert locate(parsed, {1: geometry, 2: geometry}, "qwen2_5_vl") == [
        Box(1, "in", (0, 0, 50, 50))
    ]


def test_several_images_each_box_maps_on_its_own_image() -> None:
    small = ImageGeometry((100, 100), 1, (112, 112))
    large = ImageGeometry((400, 200), 8, (112, 224))  # turned: upright 200 x 400
    answer = (
        '[{"bbox_2d": [0, 0, 56, 56], "label": "a", "image": 1},'
        ' {"bbox_2d": [0, 0, 56, 112], "label": "b", "image": 2},'
        ' {"bbox_2d": [1, 1, 2, 2], "label": "which?"}]'
    )
    parsed = parse_boxes(answer, "qwen2_5_vl", images=2)
    boxes = locate(parsed, {1: small, 2: large}, "qwen2_5_vl")
    # upright (0, 0)-(100, 200) of a 200 x 400 image turned 90° counter-clockwise to display
    assert boxes == [Box(1, "a", (0, 0, 50, 50)), Box(2, "b", (200, 0, 400, 100))]
    assert '"which?"' in parsed.text


def prompt(*numbers: int, turn: int) -> PromptImages:
    """The prompt's images by number in the conversation (each 112 x 112 as seen)."""
    return PromptImages(tuple(SeenImage(n, f"sha{n}", (1, 8, 8)) for n in numbers), turn)


@pytest.mark.parametrize(
    ("numbers", "turn", "about"),
    [
        ((1,), 1, 1),  # the question's one image
        ((1, 2, 3), 1, 3),  # a follow-up's new image, after earlier ones
        ((4,), 0, 4),  # a follow-up without images over the one image the prompt keeps
        ((1, 2), 0, None),  # ... over two: a box must say which
        ((1, 2), 2, None),  # the question's two images: the same
        ((), 0, None),
    ],
)
def test_the_image_a_box_without_number_is_on(
    numbers: tuple[int, ...], turn: int, about: int | None
) -> None:
    found = prompt(*numbers, turn=turn).about
    assert (found.number if found else None) == about


def test_boxes_name_images_by_their_number_in_the_conversation() -> None:
    seen = prompt(3, 4, 5, turn=0)  # the prompt keeps the conversation's latest three
    answer = (
        '[{"bbox_2d": [0, 0, 56, 56], "label": "a", "image": 4},'
        ' {"bbox_2d": [0, 0, 56, 56], "label": "gone", "image": 1},'
        ' {"bbox_2d": [0, 0, 56, 56], "label": "which?"}]'
    )
    parsed = find_boxes(answer, "qwen2_5_vl", seen)
    assert parsed is not None and [b.label for b in parsed.boxes] == ["a", "gone"]
    assert [image.number for image in images_of(parsed, seen)] == [4]
    files = {"sha4": png_bytes((224, 224))}
    boxes = locate_seen(parsed, seen, files, "qwen2_5_vl", 14)
    assert boxes == [Box(4, "a", (0, 0, 112, 112))]  # image 1 is not in the prompt: dropped
    assert locate_seen(parsed, seen, {}, "qwen2_5_vl", 14) == []  # its file is gone


def test_no_boxes_without_a_family_or_an_image() -> None:
    answer = '{"bbox_2d": [0, 0, 5, 5], "label": "a"}'
    assert find_boxes(answer, None, prompt(1, turn=1)) is None
    assert find_boxes(answer, "qwen3_vl", prompt(turn=0)) is None
    assert find_boxes("No box.", "qwen3_vl", prompt(1, turn=1)) is None


def png_bytes(size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size).save(out, "PNG")
    return out.getvalue()


def test_box_serialises_for_the_done_event() -> None:
    assert Box(2, "star", (1, 2, 3, 4)).to_dict() == {
        "image": 2,
        "label": "star",
        "box": [1, 2, 3, 4],
    }
