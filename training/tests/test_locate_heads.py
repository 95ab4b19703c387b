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


def test_each_coordinate_digit_points_at_its_edge_of_the_box() -> None:
    """Every digit position of a grounding answer (the coordinate head's) is a pointer
    query; its keys are image tokens in one column (x1, x2) or one row (y1, y2) of the
    merged grid, that of the coordinate's 28 px token (or the one before, for a last edge
    that ends on a token's border)."""
    encode = train.Encoder(train.WEIGHTS)  # the size the answers' pixels are of
    for seed in range(6):
        item = scenes.sample(seed, "grounding", "en")
        row = encode(item)
        pointer, coords = row["pointer_labels"], row["coordinate_labels"]
        assert set(pointer[:, 0].tolist()) == set(coords[:, 0].tolist())
        cell = {int(p): (int(r), int(c)) for p, r, c in row["position_labels"].tolist()}
        coarse = {int(p): int(c) for p, c, _ in coords.tolist()}
        order = sorted(coarse)  # digit positions in writing order
        values = [v for box in boxes(item.answer) for v in box]
        digits = [len(str(v)) for v in values]
        axis_of = [i % 4 for i, n in enumerate(digits) for _ in range(n)]  # x1 y1 x2 y2
        for query, axis in zip(order, axis_of, strict=True):
            keys = pointer[pointer[:, 0] == query, 1].tolist()
            assert keys and all(k in cell for k in keys)  # image tokens only
            lines = {cell[k][1] if axis in (0, 2) else cell[k][0] for k in keys}
            assert len(lines) == 1  # one column, or one row
            (line,) = lines
            assert line in (coarse[query], coarse[query] - 1)
            assert axis in (2, 3) or line == coarse[query]  # first edges: that very token


def test_other_answers_have_no_pointer_labels() -> None:
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    for kind in ("count", "off_grammar", "spatial"):
        assert encode(scenes.sample(4, kind, "en"))["pointer_labels"].shape == (0, 2)


def test_the_pointer_head_recomputes_the_layers_own_attention() -> None:
    """The head's attention (log-probabilities) at a few positions equals the eager
    attention weights of that layer and head, with 3D rope positions that differ per
    axis."""
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), None)
    language = model.model.language_model
    language.config._attn_implementation = "eager"
    batch, tokens = 2, 12
    embeds = torch.randn(batch, tokens, language.config.hidden_size)
    base = torch.arange(tokens).expand(batch, tokens)
    positions = torch.stack([base, base + torch.arange(tokens) % 3, base * 2 % 7])
    with torch.no_grad():
        out = language(
            inputs_embeds=embeds,
            position_ids=positions,
            output_attentions=True,
            output_hidden_states=True,
        )
    layer, head = 2, 4  # query head 4 reads key head 4 // 3 = 1
    pointer = locate_heads.PointerHead(model, 1.0, layer, head)
    rows, at = torch.tensor([0, 1, 1]), torch.tensor([11, 5, 0])
    with torch.no_grad():
        got = pointer.attention(out.hidden_states[layer], positions, rows, at).exp()
    want = out.attentions[layer][rows, head, at]
    assert torch.allclose(got, want, atol=1e-5)
    assert float(got[2, 1:].sum()) == 0.0  # causal: the first position sees itself alone


def test_the_pointer_loss_trains_its_layers_attention_alone() -> None:
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), None)
    rows = [train.Encoder(train.WEIGHTS)(scenes.sample(s, "grounding", "en")) for s in range(2)]
    batch = train.to_device(train.collate(rows), torch.device("cpu"))
    hidden = train.forward_parts(model, batch, hidden=True).hidden
    assert hidden is not None
    pointer = locate_heads.PointerHead(model, 2.0, 2, 0)
    loss, stats = pointer.batch_loss(hidden, batch, "pointer_labels")
    queries = {(r, q) for r, q, _ in batch["pointer_labels"].tolist()}
    assert int(stats["names"]) == len(queries) > 0 and 0 <= int(stats["name_hit"]) <= len(queries)
    assert float(loss.detach()) > 0
    loss.backward()
    layers = model.model.language_model.layers
    assert layers[2].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert layers[2].self_attn.k_proj.weight.grad.abs().sum() > 0
    assert layers[3].self_attn.q_proj.weight.grad is None  # later layers play no part
    empty = batch["pointer_labels"][:0]
    zero, none = pointer.loss(hidden[2], empty, batch["position_ids"])
    assert float(zero.detach()) == 0.0 and int(none["names"]) == 0


def test_the_pointer_head_is_built_on_the_model() -> None:
    args = train.parse_args(["--out", "/tmp/x", "--pointer-weight", "0.5", "--pointer-head", "3"])
    with pytest.raises(ValueError, match="model"):
        train.language_heads(args, 16, torch.device("cpu"))
    model = train.build_model(torch.device("cpu"), None)
    ((key, head),) = train.language_heads(args, 16, torch.device("cpu"), model)
    assert key == "pointer_labels" and isinstance(head, locate_heads.PointerHead)
    assert (head.weight, head.layer, head.head) == (0.5, 2, 3)
    assert list(head.parameters()) == []  # the model's own attention, nothing of its own
