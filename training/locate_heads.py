"""Training-only labels that teach the language model where things are (grounding).

Rope rotates queries and keys only: no value carries a position, and the vision tower's
attention is bidirectional over a uniform background with no absolute position embedding,
so no visual token says where in the image it lies. The language model can work it out
(its attention is causal: a token that attends evenly to the tokens of its row before it
gets a weight that falls with its column), but runs 39 and 40 did not find that in 15
minutes, and their boxes' places were guesses (training/NOTES.md, "Refusals and
grounding"). Two heads ask for it directly, as :mod:`training.names` asks for the ranks
a spatial answer compares:

* the position head (:func:`position_labels`): at every ``<|image_pad|>`` token, an early
  layer says the token's row and column in its image's merged grid;
* the coordinate head (:func:`coordinate_labels`): at each position whose logits write
  a digit of a box coordinate of a grounding answer, a middle layer says that
  coordinate's merged token (``coordinate // 28``) and its 7 px step within it.

Both read :class:`training.names.NameHead` (linear, zero start) and are not saved.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from qwen_ui.demo import modelcfg, scenes
from qwen_ui.demo.modelcfg import MERGE

GRID_CLASSES = 24  # rows, columns and coordinate // BLOCK all stay below this
BLOCK = 28  # resized pixels per merged visual token (patch 14 x merge 2)
STEP = 7  # the fine part of a coordinate: which 7 px step of its token
N_AXES = 2  # (row, column) at an image token; (coarse, fine) at a coordinate
_NUMBER = re.compile(r"\d+")


def position_labels(ids: list[int], grids: list[list[int]]) -> torch.Tensor:
    """``[image tokens, 3]``: each ``<|image_pad|>`` token's position in ``ids`` and its row
    and column in its image's merged grid (images in order, tokens in raster order, as
    the processor lays them out). ``grids``: each image's ``[t, h, w]`` patch grid."""
    at = torch.tensor(ids) == modelcfg.IMAGE_PAD_ID
    positions = torch.nonzero(at)[:, 0]
    cells = []
    for _, grid_h, grid_w in grids:
        rows, cols = grid_h // MERGE, grid_w // MERGE
        index = torch.arange(rows * cols)
        cells.append(torch.stack([index // cols, index % cols], dim=1))
    grid = torch.cat(cells) if cells else torch.zeros((0, N_AXES), dtype=torch.long)
    if len(grid) != len(positions) or (len(grid) and int(grid.max()) >= GRID_CLASSES):
        raise ValueError("image tokens do not match the grids")
    return torch.cat([positions[:, None], grid], dim=1)


def coordinates(answer: str) -> list[tuple[int, int, int]]:
    """Each box coordinate of a grounding answer: (start, end) character offsets of its
    digits in ``answer`` and its value; none when the answer holds no JSON box list."""
    found = []
    for box in re.finditer(r'"bbox_2d": \[([^\]]*)\]', answer):
        for number in _NUMBER.finditer(box.group(1)):
            lo = box.start(1) + number.start()
            found.append((lo, lo + len(number.group()), int(number.group())))
    return found


def coordinate_labels(item: scenes.Sample, tokenizer: Any, answer_at: int) -> torch.Tensor:
    """``[digit tokens, 3]`` for a grounding answer: for every token of every box
    coordinate, the position whose logits write it (``answer_at`` gives the answer's
    first token, ``answer_at + j`` its token ``j``), the coordinate's merged token
    (``value // BLOCK``) and its 7 px step within it; ``[0, 3]`` for other types."""
    if item.kind != "grounding":
        return torch.zeros((0, 1 + N_AXES), dtype=torch.long)
    offsets = tokenizer(item.answer, return_offsets_mapping=True)["offset_mapping"]
    rows = []
    for lo, hi, value in coordinates(item.answer):
        coarse, fine = value // BLOCK, (value % BLOCK) // STEP
        for j, (a, b) in enumerate(offsets):
            if a < hi and b > lo:
                rows.append([answer_at + j, min(coarse, GRID_CLASSES - 1), fine])
    return torch.tensor(rows, dtype=torch.long).view(-1, 1 + N_AXES)
