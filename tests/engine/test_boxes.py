from __future__ import annotations

import json

import pytest

from qwen_ui.engine.boxes import Family, ParsedAnswer, RawBox, labels_text, parse_boxes

JSON_FAMILIES: list[Family] = ["qwen2_5_vl", "qwen3_vl"]


def fenced(value: object) -> str:
    return f"```json\n{json.dumps(value, ensure_ascii=False, indent=2)}\n```"


@pytest.mark.parametrize("family", JSON_FAMILIES)
def test_json_list_in_a_fence_becomes_its_label(family: Family) -> None:
    answer = "Here:\n" + fenced([{"bbox_2d": [10, 20, 110, 220], "label": "red circle"}])
    parsed = parse_boxes(answer, family)
    assert parsed == ParsedAnswer("Here:\nred circle", (RawBox("red circle", (10, 20, 110, 220)),))


@pytest.mark.parametrize("family", JSON_FAMILIES)
def test_one_bare_object_is_a_box(family: Family) -> None:
    answer = 'It is at {"bbox_2d": [1.5, 2, 3, 4.25], "label": "红色的圆形"}.'
    parsed = parse_boxes(answer, family)
    assert parsed.text == "It is at 红色的圆形."
    assert parsed.boxes == (RawBox("红色的圆形", (1.5, 2.0, 3.0, 4.25)),)


def test_several_boxes_keep_their_order_and_repeated_labels_are_counted() -> None:
    items = [
        {"bbox_2d": [0, 0, 5, 5], "label": "star"},
        {"bbox_2d": [10, 10, 15, 15], "label": "circle"},
        {"bbox_2d": [20, 20, 25, 25], "label": "star"},
    ]
    parsed = parse_boxes(fenced(items), "qwen2_5_vl")
    assert [b.box[0] for b in parsed.boxes] == [0, 10, 20]
    assert [b.label for b in parsed.boxes] == ["star", "circle", "star"]
    assert parsed.text == "star ×2, circle"


def test_two_fences_in_one_answer() -> None:
    one = fenced({"bbox_2d": [0, 0, 5, 5], "label": "a"})
    two = fenced([{"bbox_2d": [1, 1, 6, 6], "label": "b"}])
    parsed = parse_boxes(f"First {one} then {two}!", "qwen3_vl")
    assert parsed.text == "First a then b!"
    assert [b.label for b in parsed.boxes] == ["a", "b"]


def test_image_number_is_taken_only_when_the_object_says_it() -> None:
    items = [
        {"bbox_2d": [0, 0, 5, 5], "label": "cat", "image": 2},
        {"bbox_2d": [0, 0, 5, 5], "label": "dog"},
    ]
    assert [b.image for b in parse_boxes(fenced(items), "qwen2_5_vl").boxes] == [None]
    parsed = parse_boxes(fenced(items), "qwen2_5_vl", images=2)
    assert parsed.boxes == (RawBox("cat", (0, 0, 5, 5), 2),)
    assert parsed.text.startswith("```json\ncat [") and '"dog"' in parsed.text


@pytest.mark.parametrize("image", [0, -1, 3, "2", 1.0, True])
def test_an_image_number_out_of_range_leaves_the_box_as_text(image: object) -> None:
    answer = fenced({"bbox_2d": [0, 0, 5, 5], "label": "cat", "image": image})
    assert parse_boxes(answer, "qwen3_vl", images=2) == ParsedAnswer(answer, ())


def test_qwen2_tags_with_several_images_are_left_as_text() -> None:
    answer = "<|object_ref_start|>a<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|>"
    assert parse_boxes(answer, "qwen2_vl", images=2) == ParsedAnswer(answer, ())


@pytest.mark.parametrize(
    "item",
    [
        {"bbox_2d": [1, 2, 3], "label": "three numbers"},
        {"bbox_2d": [1, 2, 3, 4, 5], "label": "five numbers"},
        {"bbox_2d": ["1", 2, 3, 4], "label": "a string"},
        {"bbox_2d": [True, 2, 3, 4], "label": "a boolean"},
        {"bbox_2d": [None, 2, 3, 4], "label": "null"},
        {"bbox_2d": "1,2,3,4", "label": "not a list"},
        {"bbox_2d": [1, 2, 3, 4], "label": 7},
        {"bbox_2d": [1, 2, 3, 4], "label": "bad image", "image": 0},
        {"bbox_2d": [1, 2, 3, 4], "label": "bad image", "image": 2},
        {"bbox_2d": [1, 2, 3, 4], "label": "bad image", "image": "1"},
        {"bbox": [1, 2, 3, 4], "label": "other key"},
        {"point_2d": [1, 2], "label": "a point"},
    ],
)
def test_malformed_objects_stay_as_text(item: dict[str, object]) -> None:
    answer = fenced([item])
    assert parse_boxes(answer, "qwen2_5_vl") == ParsedAnswer(answer, ())


def test_infinite_and_nan_coordinates_stay_as_text() -> None:
    for value in ("NaN", "Infinity", "-Infinity"):
        answer = '{"bbox_2d": [' + value + ', 1, 2, 3], "label": "x"}'
        assert parse_boxes(answer, "qwen3_vl").boxes == ()


def test_a_list_with_good_and_bad_items_keeps_the_bad_ones_as_json() -> None:
    items = [{"bbox_2d": [0, 0, 5, 5], "label": "star"}, {"bbox_2d": [1, 2], "label": "half"}]
    parsed = parse_boxes(fenced(items), "qwen2_5_vl")
    assert parsed.boxes == (RawBox("star", (0, 0, 5, 5)),)
    assert "half" in parsed.text and "[1, 2]" in parsed.text


def test_truncated_answer_keeps_complete_objects_and_the_rest_as_text() -> None:
    answer = '```json\n[{"bbox_2d": [0, 0, 5, 5], "label": "star"}, {"bbox_2d": [1, 2,'
    parsed = parse_boxes(answer, "qwen2_5_vl")
    assert parsed.boxes == (RawBox("star", (0, 0, 5, 5)),)
    assert parsed.text.endswith('{"bbox_2d": [1, 2,')


def test_json_without_boxes_and_plain_text_are_untouched() -> None:
    for answer in ('{"answer": "yes"}', "[1, 2, 3, 4]", "yes", "", "{{{[[[", "```json\n```"):
        assert parse_boxes(answer, "qwen2_5_vl") == ParsedAnswer(answer, ())


def test_deeply_nested_brackets_do_not_break_the_parser() -> None:
    answer = "[" * 5000
    assert parse_boxes(answer, "qwen3_vl") == ParsedAnswer(answer, ())


def test_json_families_ignore_qwen2_tags() -> None:
    answer = "<|box_start|>(1,2),(3,4)<|box_end|>"
    assert parse_boxes(answer, "qwen2_5_vl").boxes == ()


def test_qwen2_tags_with_a_label() -> None:
    answer = (
        "The <|object_ref_start|>dog<|object_ref_end|><|box_start|>(120,340),(560,980)"
        "<|box_end|> sleeps."
    )
    parsed = parse_boxes(answer, "qwen2_vl")
    assert parsed == ParsedAnswer("The dog sleeps.", (RawBox("dog", (120, 340, 560, 980)),))


def test_qwen2_several_boxes_after_one_label_share_it() -> None:
    answer = (
        "<|object_ref_start|>stars<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|>"
        "<|box_start|>( 5 , 6 ),( 7 , 8 )<|box_end|> and <|box_start|>(9,9),(10,10)<|box_end|>"
    )
    parsed = parse_boxes(answer, "qwen2_vl")
    assert parsed.boxes == (
        RawBox("stars", (1, 2, 3, 4)),
        RawBox("stars", (5, 6, 7, 8)),
        RawBox("", (9, 9, 10, 10)),
    )
    assert parsed.text == "stars and "


def test_qwen2_reference_without_box_keeps_its_words() -> None:
    answer = "A <|object_ref_start|>cat<|object_ref_end|> is there."
    assert parse_boxes(answer, "qwen2_vl") == ParsedAnswer("A cat is there.", ())


@pytest.mark.parametrize(
    "tag",
    [
        "<|box_start|>(1,2),(3)<|box_end|>",
        "<|box_start|>(1,2),(3,4)",
        "<|box_start|>(a,2),(3,4)<|box_end|>",
        "<|box_start|>1,2,3,4<|box_end|>",
    ],
)
def test_qwen2_malformed_tags_stay_as_text(tag: str) -> None:
    assert parse_boxes(f"x {tag} y", "qwen2_vl") == ParsedAnswer(f"x {tag} y", ())


def test_qwen2_family_ignores_json() -> None:
    answer = fenced([{"bbox_2d": [0, 0, 5, 5], "label": "star"}])
    assert parse_boxes(answer, "qwen2_vl") == ParsedAnswer(answer, ())


def test_labels_text_skips_empty_labels() -> None:
    boxes = [RawBox("", (0, 0, 1, 1)), RawBox("a", (0, 0, 1, 1)), RawBox("a", (0, 0, 1, 1))]
    assert labels_text(boxes) == "a ×2"


def test_a_box_without_image_number_counts_where_one_image_is_meant() -> None:
    """With several images, unnamed boxes count when the caller knows which image the
    answer is about (the question's only one)."""
    items = [{"bbox_2d": [0, 0, 5, 5], "label": "dog"}]
    parsed = parse_boxes(fenced(items), "qwen2_5_vl", images=3, unnamed=True)
    assert parsed.boxes == (RawBox("dog", (0, 0, 5, 5)),)
    tags = "<|object_ref_start|>a<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|>"
    assert parse_boxes(tags, "qwen2_vl", images=3, unnamed=True).boxes == (
        RawBox("a", (1, 2, 3, 4)),
    )
    assert parse_boxes(fenced(items), "qwen3_vl", unnamed=False).boxes == ()
