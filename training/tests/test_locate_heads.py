"""The position and coordinate heads' labels (training/locate_heads.py)."""

from __future__ import annotations

import json

import pytest
import torch

from qwen_ui.demo import modelcfg, scenes
from training import locate_heads, train


def boxes(answer: str) -> list[list[int]]:
    body = answer.removeprefix("```json\n").removesuffix("\n```")
    return [row["bbox_2d"] for row in json.loads(body)]


def test_every_image_token_is_labelled_with_its_row_and_column() -> None:
    """Three images of their own sizes: each ``<|image_pad|>`` token, in order, gets its
    image's raster row and column; no other token is labelled."""
    encode = train.Encoder(train.WEIGHTS)
    item = scenes.sample(11, "multi_count", "en")
    row = encode(item)
    labels = row["position_labels"]
    ids = row["input_ids"]
    assert labels[:, 0].tolist() == torch.nonzero(ids == modelcfg.IMAGE_PAD_ID)[:, 0].tolist()
    at = 0
    for _, grid_h, grid_w in row["image_grid_thw"].tolist():
        rows, cols = grid_h // 2, grid_w // 2
        cells = labels[at : at + rows * cols, 1:].tolist()
        assert cells == [[r, c] for r in range(rows) for c in range(cols)]
        at += rows * cols
    assert at == len(labels) and len(row["image_grid_thw"]) >= 2


def test_image_tokens_that_do_not_match_the_grids_are_an_error() -> None:
    ids = [1, modelcfg.IMAGE_PAD_ID, modelcfg.IMAGE_PAD_ID, 2]
    with pytest.raises(ValueError, match="grids"):
        locate_heads.position_labels(ids, [[1, 4, 4]])  # four merged tokens, two pads


@pytest.mark.parametrize("lang", scenes.LANGS)
def test_each_coordinate_digit_is_labelled_where_it_is_written(lang: scenes.Lang) -> None:
    """At every labelled position the next input token is a digit of the coordinate whose
    28 px token and 7 px step the label gives; every coordinate of every box is labelled,
    in order."""
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    tokens = encode.processor.tokenizer
    several = 0
    for seed in range(12):
        item = scenes.sample(seed, "grounding", lang)
        row = encode(item)
        ids = row["input_ids"].tolist()
        written = ""
        values = []
        for position, coarse, fine in row["coordinate_labels"].tolist():
            assert row["labels"][position + 1] == ids[position + 1]  # an answer token
            digit = tokens.decode([ids[position + 1]])
            assert digit.isdigit()
            written += digit
            values.append((coarse, fine))
        want = [v for box in boxes(item.answer) for v in box]
        assert written == "".join(str(v) for v in want)
        steps = sorted({(v // 28, v % 28 // 7) for v in want})
        assert sorted(set(values)) == steps
        several += len(want) > 4
    assert several > 0  # "Where are the stars?" answers hold several boxes


def test_other_answers_have_no_coordinate_labels() -> None:
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    for kind in ("count", "off_grammar", "spatial"):
        assert encode(scenes.sample(4, kind, "en"))["coordinate_labels"].shape == (0, 3)


def test_the_position_and_coordinate_heads_are_built_under_their_keys() -> None:
    args = train.parse_args(
        ["--out", "/tmp/x", "--position-weight", "0.5", "--coordinate-weight", "2"]
    )
    (pos_key, pos), (coord_key, coord) = train.language_heads(args, 16, torch.device("cpu"))
    assert (pos_key, pos.layer, pos.weight) == ("position_labels", 2, 0.5)
    assert (coord_key, coord.layer, coord.weight) == ("coordinate_labels", 3, 2.0)
    assert pos.proj.out_features == coord.proj.out_features == 2 * locate_heads.GRID_CLASSES
    batch = train.collate(
        [
            train.Encoder(train.WEIGHTS, max_pixels=28224)(scenes.sample(s, "grounding", "en"))
            for s in range(2)
        ]
    )
    assert set(batch[coord_key][:, 0].tolist()) == {0, 1}
    assert set(batch[pos_key][:, 0].tolist()) == {0, 1}
