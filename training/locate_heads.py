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
import sys
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


def digit_positions(item: scenes.Sample, tokenizer: Any, answer_at: int) -> list[list[int]]:
    """For each box coordinate of the answer (:func:`coordinates`, in order), the
    positions whose logits write its digits (``answer_at`` gives the answer's first
    token, ``answer_at + j`` its token ``j``)."""
    offsets = tokenizer(item.answer, return_offsets_mapping=True)["offset_mapping"]
    return [
        [answer_at + j for j, (a, b) in enumerate(offsets) if a < hi and b > lo]
        for lo, hi, _ in coordinates(item.answer)
    ]


def coordinate_labels(item: scenes.Sample, tokenizer: Any, answer_at: int) -> torch.Tensor:
    """``[digit tokens, 3]`` for a grounding answer: for every token of every box
    coordinate, the position whose logits write it (:func:`digit_positions`), the
    coordinate's merged token (``value // BLOCK``) and its 7 px step within it; ``[0, 3]``
    for other types."""
    if item.kind != "grounding":
        return torch.zeros((0, 1 + N_AXES), dtype=torch.long)
    rows = []
    values = [value for _, _, value in coordinates(item.answer)]
    written = digit_positions(item, tokenizer, answer_at)
    for value, positions in zip(values, written, strict=True):
        coarse, fine = min(value // BLOCK, GRID_CLASSES - 1), (value % BLOCK) // STEP
        rows += [[position, coarse, fine] for position in positions]
    return torch.tensor(rows, dtype=torch.long).view(-1, 1 + N_AXES)


def _edges(box: list[int]) -> list[list[tuple[int, int]]]:
    """The merged-grid cells (row, column) on each edge of a box ``[x1, y1, x2, y2]`` (in
    resized pixels): the first column, the first row, the last column, the last row."""
    x1, y1, x2, y2 = box
    last_col, last_row = max(x1, x2 - 1) // BLOCK, max(y1, y2 - 1) // BLOCK
    rows, cols = range(y1 // BLOCK, last_row + 1), range(x1 // BLOCK, last_col + 1)
    return [
        [(r, x1 // BLOCK) for r in rows],
        [(y1 // BLOCK, c) for c in cols],
        [(r, last_col) for r in rows],
        [(last_row, c) for c in cols],
    ]


def pointer_labels(
    item: scenes.Sample, tokenizer: Any, answer_at: int, cells: torch.Tensor
) -> torch.Tensor:
    """``[pairs, 2]`` (query, key) for a grounding answer: at each position whose logits
    write a digit of a box coordinate (as :func:`coordinate_labels` places them), the
    image tokens on the edge of the box that coordinate gives (``x1``: the box's first
    column of tokens, ``y1`` its first row, ``x2`` and ``y2`` its last), by their
    positions in the ids: where that position's attention should look to read the
    coordinate (:class:`PointerHead`). ``cells``: the image's tokens as
    :func:`position_labels` gives them. ``[0, 2]`` for other types."""
    if item.kind != "grounding":
        return torch.zeros((0, 2), dtype=torch.long)
    at = {(int(r), int(c)): int(p) for p, r, c in cells.tolist()}
    values = [value for _, _, value in coordinates(item.answer)]
    written = digit_positions(item, tokenizer, answer_at)
    pairs = []
    for first in range(0, len(values) - 3, 4):
        edges = _edges(values[first : first + 4])
        for positions, edge in zip(written[first : first + 4], edges, strict=True):
            keys = [at[cell] for cell in edge if cell in at]
            pairs += [[position, key] for position in positions for key in keys]
    return torch.tensor(pairs, dtype=torch.long).view(-1, 2)


class PointerHead(torch.nn.Module):
    """Supervision of the language model's own attention (no parameters of its own): at
    the positions :func:`pointer_labels` labels, head ``head`` of decoder layer ``layer``
    (0-based; its input is the hidden state after ``layer`` layers) should put its
    attention on the labelled image tokens. The loss is ``weight`` times the mean, over
    those positions, of ``-log`` of the attention they give their labelled tokens
    together; a position is a hit when the token it attends most is one of them.

    The attention is recomputed from the layer's own norm, projections and rotary
    embedding (the rope positions the batch gives), as the layer computes it
    (``training/tests/test_locate_heads.py`` compares it with the eager attention's
    weights). The image tokens carry their own row and column by then when the
    position head trains them; the coordinate head then reads the attended place."""

    def __init__(self, model: Any, weight: float, layer: int, head: int) -> None:
        super().__init__()
        self.weight = weight
        self.layer = layer
        self.head = head
        self._language = [model.model.language_model]  # not a submodule: the model's own

    def batch_loss(
        self, hidden: tuple[torch.Tensor, ...], batch: dict[str, Any], key: str
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.loss(hidden[self.layer], batch[key], batch["position_ids"])

    def attention(
        self, states: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor, at: torch.Tensor
    ) -> torch.Tensor:
        """``[queries, tokens]``: the head's attention (log-probabilities) at positions
        ``at`` of batch rows ``rows``, over each row's tokens up to the query."""
        language = self._language[0]
        layer = language.layers[self.layer]
        attn = layer.self_attn
        x = layer.input_layernorm(states)
        if positions.shape[0] == 4:  # text positions first (packed sequences)
            positions = positions[1:]
        cos, sin = language.rotary_emb(x, positions)
        batch, tokens, _ = x.shape
        dim = attn.head_dim
        group = attn.num_key_value_groups
        q = attn.q_proj(x).view(batch, tokens, -1, dim)[:, :, self.head : self.head + 1]
        k = attn.k_proj(x).view(batch, tokens, -1, dim)[:, :, self.head // group][:, :, None]
        rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        q, k = rotate(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # [batch, 1, tokens, dim]
        # one product per query: [queries, 1, dim] @ [queries, dim, tokens]
        scores = torch.bmm(q[rows, 0, at][:, None], k[rows, 0].transpose(1, 2))[:, 0] * attn.scaling
        later = torch.arange(tokens, device=x.device)[None, :] > at[:, None]
        return torch.log_softmax(scores.float().masked_fill(later, float("-inf")), dim=-1)

    def loss(
        self, states: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``labels``: ``[pairs, 3]`` (batch row, query position, labelled key position)."""
        if len(labels) == 0:
            zero = states.sum() * 0.0  # still part of the graph
            return zero, {"name_hit": labels.new_tensor(0), "names": labels.new_tensor(0)}
        tokens = states.shape[1]
        query, index = torch.unique(labels[:, 0] * tokens + labels[:, 1], return_inverse=True)
        logp = self.attention(states, positions, query // tokens, query % tokens)
        wanted = torch.zeros_like(logp, dtype=torch.bool)
        wanted[index, labels[:, 2]] = True
        on_target = torch.logsumexp(logp.masked_fill(~wanted, float("-inf")), dim=-1)
        hit = wanted.gather(1, logp.argmax(1, keepdim=True))[:, 0]
        return -self.weight * on_target.mean(), {
            "name_hit": hit.sum(),
            "names": labels.new_tensor(len(query)),
        }
