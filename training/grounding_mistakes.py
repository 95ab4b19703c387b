"""Where a demo checkpoint goes wrong on "Where are the stars?": the every-shape form of
the grounding questions, box by box.

The evaluation (``qwen-ui demo eval``) says how many answers are right; this says, for
the held-out every-shape questions of a set, how many are right by their number of boxes,
which box is the first wrong one (the answer lists boxes left to right, as trained), and
what that box is: a repeat of an earlier box, another asked shape written out of order,
a shape of another kind, near an asked shape (IoU above 0.2) or on no shape at all.

    python -m training.grounding_mistakes WEIGHTS [--seed 0] [--n 800] [--device cpu]

``--n``: how many questions of the evaluation's grounding and off-grammar sequence to
draw from (the every-shape ones among them are asked, about 19 %). Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from qwen_ui.demo import locate, scenes
from qwen_ui.demo.answer import load_bf16, load_processor, make_answer_fn
from qwen_ui.demo.evaluate import IOU_BAR, coords_of, grounding_key, iou

log = logging.getLogger(__name__)

Box = tuple[float, ...]
NEAR = 0.2  # a wrong box overlapping an asked shape more than this is "near" it


def first_wrong(want: list[Box], got: list[Box]) -> int | None:
    """The index of the first box of ``got`` that misses the asked shape at its place in
    ``want`` (left to right); ``len(got)`` when ``got`` stops early; None when right."""
    for index, (w, g) in enumerate(zip(want, got, strict=False)):
        if iou(w, g) < IOU_BAR:
            return index
    return None if len(got) == len(want) else min(len(got), len(want))


def what(index: int, want: list[Box], got: list[Box], shapes: list[Box]) -> str:
    """What the first wrong box ``got[index]`` is (``shapes``: every shape in the scene)."""
    if index >= len(got):
        return "too few boxes"
    if index >= len(want):
        return "too many boxes"
    box = got[index]
    if any(iou(box, earlier) > IOU_BAR for earlier in got[:index]):
        return "repeats an earlier box"
    if any(iou(box, w) >= IOU_BAR for w in want):
        return "another asked shape, out of order"
    if any(iou(box, s) >= IOU_BAR for s in shapes):
        return "a shape of another kind"
    if any(iou(box, w) > NEAR for w in want):
        return "near an asked shape"
    return "on no shape"


def every_shape_items(n: int, seed: int) -> list[scenes.Sample]:
    """The every-shape grounding questions among the first ``n`` of the evaluation's
    grounding and off-grammar sequence in held-out set ``seed``."""
    drawn = scenes.held_out(n, seed, ("off_grammar", "grounding"))
    return [s for s in drawn if grounding_key(s) == "every"]


def tally(items: list[scenes.Sample], answers: list[str]) -> dict[str, Any]:
    by_boxes: dict[int, list[int]] = {}
    first: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for item, answer in zip(items, answers, strict=True):
        want, got = coords_of(item.answer), coords_of(answer)
        right = by_boxes.setdefault(len(want), [0, 0])
        right[1] += 1
        index = first_wrong(want, got)
        if index is None:
            right[0] += 1
            continue
        scene = item.scenes[0]
        shapes = [tuple(map(float, locate.resized_box(scene, s))) for s in scene.shapes]
        first[f"box {index + 1} of {len(want)}"] += 1
        kinds[what(index, want, got, shapes)] += 1
    right_by_boxes = {str(k): {"right": v[0], "of": v[1]} for k, v in sorted(by_boxes.items())}
    return {
        "questions": len(items),
        "right_by_boxes": right_by_boxes,
        "first_wrong_box": dict(sorted(first.items())),
        "first_wrong_box_is": dict(kinds.most_common()),
    }


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("weights", type=Path, help="a bf16 checkpoint folder")
    p.add_argument("--seed", type=int, default=0, help="held-out set")
    p.add_argument("--n", type=int, default=800)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    items = every_shape_items(args.n, args.seed)
    model = load_bf16(args.weights, torch.float32).to(args.device)
    answer = make_answer_fn(model, load_processor(args.weights))
    answers: list[str] = []
    for start in range(0, len(items), args.batch_size):
        chunk = items[start : start + args.batch_size]
        answers += answer([(item.images(), item.question) for item in chunk])
        log.info("%d of %d answered", len(answers), len(items))
    result = {"weights": str(args.weights), "seed": args.seed, **tally(items, answers)}
    sys.stdout.write(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
