"""Train the shapes demo model from scratch on generated scenes (runs on one GPU).

    PYTHONUNBUFFERED=1 python -m training.train --out OUT --steps 6000

Scenes are generated and run through the real ``Qwen2_5_VLProcessor`` (loaded from the
shipped processor files) in DataLoader workers, which also compute the mrope position ids;
each worker yields whole padded batches. The loss covers only the answer tokens and the
closing ``<|im_end|>``. AdamW, linear warm-up then cosine decay, bf16 autocast, everything
seeded. Every ``--eval-every`` steps the held-out batch (seeds never drawn in training) is
scored by teacher-forced exact match, which equals greedy-decoding exact match: all answer
tokens and the end token must be the argmax. Checkpoints go to ``OUT/model`` in shards of
at most 12 MB, so a run cut short still leaves weights.

Training-only speed-up: the vision tower's per-window attention loop is replaced by the
engine's batched attention (:class:`BatchedAttention`); :func:`check_equivalence`
verifies it against the stock implementation at start-up. The saved model uses the stock
code path.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from qwen_ui.demo import WEIGHTS as SHIPPED
from qwen_ui.demo import evaluate as scoring
from qwen_ui.demo import locate, modelcfg, scenes
from qwen_ui.demo.modelcfg import MERGE, PATCH, TEMPORAL
from qwen_ui.engine import vision as engine_vision
from training import locate_heads, names

log = logging.getLogger(__name__)

# the device has torch and transformers only: nothing here may import the app's settings
WEIGHTS = SHIPPED / "bf16"
IGNORE = -100
# the image processor's normalisation (OpenAI CLIP mean/std, as in Qwen2-VL)
IMAGE_MEAN = torch.tensor([0.48145466, 0.4578275, 0.40821073])[None, :, None]
IMAGE_STD = torch.tensor([0.26862954, 0.26130258, 0.27577711])[None, :, None]
Batch = dict[str, Any]


# --- data ---------------------------------------------------------------------------


class Encoder:
    """Turns a :class:`scenes.Sample` into model inputs: what the real processor (loaded
    from the shipped files) gives, without its per-call overhead.

    The images go through the image processor's own ``resize`` and ``patchify`` on uint8
    tensors; rescaling and normalising (affine) happen on the training device
    (:func:`restore_pixels`), so the patches travel as bytes. The prompt is the chat
    template's fixed text around each image's ``<|image_pad|>`` run and the questions and
    answers, whose tokens do not depend on their neighbours (special tokens split the text
    first). A sample's follow-up turns continue the conversation; the labels cover every
    answer and its ``<|im_end|>``, the heads' labels (:mod:`names`) every turn.
    ``training/tests/test_train.py`` pins all of it against the processor called on the chat
    template as the engine calls it.
    """

    def __init__(
        self,
        processor_dir: Path,
        max_pixels: int | None = None,
        labelling: names.Labelling = names.DEFAULT_LABELLING,
    ) -> None:
        from transformers import AutoProcessor, Qwen2_5_VLModel

        self.labelling = labelling
        self.processor = AutoProcessor.from_pretrained(str(processor_dir))
        image = self.processor.image_processor
        if max_pixels is not None:  # smaller images for CPU probes (not for real runs)
            image.size = replace(image.size, longest_edge=max_pixels)
        self.image = image
        self.mean = torch.tensor(image.image_mean)[None, :, None]
        self.std = torch.tensor(image.image_std)[None, :, None]
        self.template = self._template_pieces()
        with torch.device("meta"):
            self.rope = Qwen2_5_VLModel(modelcfg.build_config())

    def _template_pieces(self) -> tuple[list[int], list[int], list[int]]:
        """Token ids of the chat template's fixed text: before the first image, after a
        question (up to the answer), and between an answer's ``<|im_end|>`` and the next
        question."""
        marker = "\x00MARK\x00"
        conversation = [
            {"role": "user", "content": [{"type": "text", "text": marker}]},
            {"role": "assistant", "content": [{"type": "text", "text": marker}]},
            {"role": "user", "content": [{"type": "text", "text": marker}]},
        ]
        text = self.processor.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=False
        )
        before, after, gap, last = str(text).split(marker)
        tokens = self.processor.tokenizer
        gap_ids: list[int] = tokens(gap)["input_ids"]
        if after != last or gap_ids[0] != modelcfg.IM_END_ID:
            raise ValueError("unexpected chat template")
        return tokens(before)["input_ids"], tokens(after)["input_ids"], gap_ids[1:]

    def _patches(self, image: Image.Image) -> tuple[torch.Tensor, list[int]]:
        """uint8 ``[h/14 * w/14, 3, 196]`` patches, one temporal frame of ``pixel_values``
        before normalising (a still image's frames are copies of each other, so the batch
        ships half the bytes and :func:`restore_pixels` repeats them), and the image's
        ``[t, h, w]`` grid."""
        ip = self.image
        raw = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        pixels = raw.view(image.height, image.width, 3).permute(2, 0, 1)[None]
        resized = ip.resize(pixels, ip.size, ip.resample, factor=PATCH * MERGE)
        patches, grid_h, grid_w = ip.patchify(resized, PATCH, MERGE, ip.temporal_patch_size)
        frames = patches[0].view(patches.shape[1], 3, ip.temporal_patch_size, PATCH * PATCH)
        return frames[:, :, 0].contiguous(), [1, grid_h, grid_w]

    def _conversation(
        self, turns: list[scenes.Sample], image_tokens: list[int]
    ) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """Input ids and labels (the images in the first question, answers labelled), and
        per turn where its question starts and the position whose logits give its
        answer's first token."""
        before, after, gap = self.template
        ids = list(before)
        for n in image_tokens:
            ids += [modelcfg.VISION_START_ID, *[modelcfg.IMAGE_PAD_ID] * n, modelcfg.VISION_END_ID]
        labels = [IGNORE] * len(ids)
        places = []
        tokens = self.processor.tokenizer
        for i, turn in enumerate(turns):
            start = len(ids) + (len(gap) if i else 0)
            asked = (gap if i else []) + tokens(turn.question)["input_ids"] + after
            reply = tokens(turn.answer + "<|im_end|>")["input_ids"]
            ids += asked + reply
            labels += [IGNORE] * len(asked) + reply
            places.append((start, len(ids) - len(reply) - 1))
        return ids, labels, places

    def _head_labels(
        self, turns: list[scenes.Sample], places: list[tuple[int, int]], ids: list[int]
    ) -> dict[str, torch.Tensor]:
        """The language-model heads' labels (:mod:`names`) of every turn, by batch key."""
        tokenizer = self.processor.tokenizer
        per_turn = [
            self.labelling.turn_labels(turn, tokenizer, start, at, ids[at + 1])
            for turn, (start, at) in zip(turns, places, strict=True)
        ]
        return {key: torch.cat([labels[key] for labels in per_turn]) for key in per_turn[0]}

    def __call__(self, item: scenes.Sample) -> dict[str, Any]:
        encoded = [self._patches(image) for image in item.images()]
        grid_thw = torch.tensor([grid for _, grid in encoded])
        per_image = (grid_thw.prod(dim=1) // (MERGE * MERGE)).tolist()
        turns = scenes.turns_of(item)
        id_list, label_list, places = self._conversation(turns, per_image)
        ids, labels = torch.tensor(id_list), torch.tensor(label_list)
        mm = (ids == modelcfg.IMAGE_PAD_ID).long()
        positions, _ = self.rope.get_rope_index(
            input_ids=ids[None], mm_token_type_ids=mm[None], image_grid_thw=grid_thw
        )
        grids = grid_thw.tolist()
        cells = locate_heads.position_labels(id_list, grids)
        vision_labels = torch.cat(
            [token_labels(sc, h, w) for sc, (_, h, w) in zip(item.scenes, grids, strict=True)]
        )
        return {
            "input_ids": ids,
            "labels": labels,
            "mm_token_type_ids": mm,
            "position_ids": positions[:, 0],
            "pixel_u8": torch.cat([patches for patches, _ in encoded]),
            "image_grid_thw": grid_thw,
            "vision_labels": vision_labels,
            "kind": item.kind,
            "lang": item.lang,
            "yes_no": scoring.yes_no_key(item) or "",
            "position_labels": cells,
            "pointer_labels": self._pointer_labels(turns, places, cells, len(grids)),
            **self._head_labels(turns, places, id_list),
        }

    def _pointer_labels(
        self,
        turns: list[scenes.Sample],
        places: list[tuple[int, int]],
        cells: torch.Tensor,
        images: int,
    ) -> torch.Tensor:
        """:func:`locate_heads.pointer_labels` of every turn, about the sample's one image
        (none with several: a box's image would be ambiguous)."""
        if images != 1:
            return torch.zeros((0, 2), dtype=torch.long)
        tokenizer = self.processor.tokenizer
        return torch.cat(
            [
                locate_heads.pointer_labels(turn, tokenizer, at, cells)
                for turn, (_, at) in zip(turns, places, strict=True)
            ]
        )


def restore_pixels(u8: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """The processor's ``pixel_values`` (to ~1e-7) from :class:`Encoder`'s uint8 patches
    (``[n, 3, 196]``, one temporal frame): rescale to [0, 1], normalise, as the processor
    does, and repeat the frame ``TEMPORAL`` times per channel."""
    patches = u8.float() / 255
    normalised = (patches - mean.to(u8.device)) / std.to(u8.device)
    frames = normalised.unsqueeze(2).expand(-1, -1, TEMPORAL, -1)
    return frames.reshape(u8.shape[0], -1)


N_SHAPE = 1 + len(scenes.SHAPES)  # auxiliary classes: 0 = background, then SHAPES
N_COLOUR = 1 + len(scenes.COLOURS)  # 0 = background, then COLOURS
N_JOINT = 1 + scenes.JOINT_CLASSES  # 0 = none, then (shape, colour)
N_RELATION = len(scenes.RELATIONS)  # relation bags per centre token (relation_labels)
N_RANK = 2  # ranks per covered token, across and down (rank_labels)
RANKS = scenes.MAX_SHAPES  # a rank is 0 .. MAX_SHAPES - 1
BLOCK = PATCH * MERGE  # one merged visual token covers BLOCK x BLOCK resized pixels


def joint_code(shape: scenes.Shape) -> int:
    """The (shape, colour) class of ``shape`` with 0 kept for none: 1 +
    :func:`scenes.joint_class`."""
    return 1 + scenes.joint_class(shape)


def token_labels(scene: scenes.Scene, grid_h: int, grid_w: int) -> torch.Tensor:
    """Auxiliary vision labels of one image, per merged visual token (raster order, as the
    ``<|image_pad|>`` tokens): the (shape, colour) class of the shape covering most of its
    block, or (0, 0) when shapes cover less than a quarter of it; the joint class
    (:func:`joint_code`) of the shape whose centre lies in the block, else 0, so that each
    shape has exactly one token that names it (what counting needs); the
    :data:`N_RELATION` columns of :func:`relation_labels`; and the :data:`N_RANK` columns
    of :func:`rank_labels`. ``grid_h``/``grid_w`` are the image's patch grid
    (``image_grid_thw``)."""
    n_colours = len(scenes.COLOURS)
    counts = _index_counts(scene, grid_h, grid_w)
    joint = torch.zeros(counts.shape[0], N_JOINT, dtype=torch.long)
    joint.index_add_(1, _joint_of_index(scene), counts)
    best = joint[:, 1:].argmax(1)
    covered = joint[:, 1:].gather(1, best[:, None])[:, 0] * 4 >= BLOCK * BLOCK
    shape = torch.where(covered, best // n_colours + 1, 0)
    colour = torch.where(covered, best % n_colours + 1, 0)
    centres = centre_labels(scene, grid_h, grid_w)
    return torch.cat(
        [
            torch.stack([shape, colour, centres], dim=1),
            relation_labels(scene, grid_h, grid_w),
            rank_labels(scene, counts),
        ],
        dim=1,
    )


INDEX_CODES = scenes.MAX_SHAPES + 1  # per pixel: 0 = background, else 1 + the shape's index


def _index_counts(scene: scenes.Scene, grid_h: int, grid_w: int) -> torch.Tensor:
    """Per merged token, how many of its ``BLOCK`` x ``BLOCK`` pixels (after the processor's
    resize) each shape covers: ``[tokens, INDEX_CODES]``, column 0 the background, column
    ``i + 1`` ``scene.shapes[i]`` (drawn in order, so a later shape hides an earlier one)."""
    mask = Image.new("L", (scene.width, scene.height), 0)
    draw = ImageDraw.Draw(mask)
    for i, s in enumerate(scene.shapes):
        scenes.draw_shape(draw, s, fill=i + 1)
    resized = mask.resize((grid_w * PATCH, grid_h * PATCH), Image.Resampling.NEAREST)
    codes = torch.frombuffer(bytearray(resized.tobytes()), dtype=torch.uint8)
    tokens = (grid_h // MERGE) * (grid_w // MERGE)
    keys = _pixel_tokens(grid_h, grid_w) + codes
    return torch.bincount(keys, minlength=tokens * INDEX_CODES).view(tokens, INDEX_CODES)


@functools.lru_cache(maxsize=512)
def _pixel_tokens(grid_h: int, grid_w: int) -> torch.Tensor:
    """Per resized pixel (raster order), ``INDEX_CODES`` x the merged token holding it."""
    rows = torch.arange(grid_h * PATCH) // BLOCK
    cols = torch.arange(grid_w * PATCH) // BLOCK
    return ((rows[:, None] * (grid_w // MERGE) + cols[None, :]) * INDEX_CODES).view(-1)


def _joint_of_index(scene: scenes.Scene) -> torch.Tensor:
    """The joint class (:func:`joint_code`) of each column of :func:`_index_counts`."""
    codes = [0, *(joint_code(s) for s in scene.shapes)]
    return torch.tensor(codes + [0] * (INDEX_CODES - len(codes)))


def rank_labels(scene: scenes.Scene, counts: torch.Tensor) -> torch.Tensor:
    """Per merged token, the two ranks (:func:`scenes.shape_ranks`: across, down) of the shape
    covering most of its block when it covers at least a quarter, else -1 (no label), so
    that every token of a shape carries where it stands among the others, a number the
    language model can compare between two named shapes. ``counts``: per token, the pixels
    of each shape (:func:`_index_counts`)."""
    n = len(scene.shapes)
    best = counts[:, 1 : n + 1].argmax(1)
    covered = counts[:, 1 : n + 1].gather(1, best[:, None])[:, 0] * 4 >= BLOCK * BLOCK
    ranks = torch.tensor(scenes.shape_ranks(scene), dtype=torch.long).view(-1, N_RANK)
    return torch.where(covered[:, None], ranks[best], -1)


def centre_labels(scene: scenes.Scene, grid_h: int, grid_w: int) -> torch.Tensor:
    """Per merged token: the joint class of the shape whose centre (after the processor's
    resize) falls in its block, else 0."""
    labels = torch.zeros((grid_h // MERGE) * (grid_w // MERGE), dtype=torch.long)
    for s in scene.shapes:
        labels[centre_token(scene, s, grid_h, grid_w)] = joint_code(s)
    return labels


def relation_labels(scene: scenes.Scene, grid_h: int, grid_w: int) -> torch.Tensor:
    """Per merged token, one column per relation of ``scenes.RELATIONS``: at the token
    holding a shape's centre, the bitmask (bit ``class - 1``) of the joint classes of the
    other shapes that are clearly in that relation to it (``scenes.holds``, what the spatial
    questions ask: the square is left of the star, so the star's "left" column has the
    square's bit); 0 elsewhere. A token naming a shape can then say what lies around it:
    "is A left of B" becomes a look-up at B's token, as existence is at A's."""
    labels = torch.zeros((grid_h // MERGE) * (grid_w // MERGE), N_RELATION, dtype=torch.long)
    for s in scene.shapes:
        bags = [0] * N_RELATION
        for i, rel in enumerate(scenes.RELATIONS):
            for other in scene.shapes:
                if other is not s and scenes.holds(rel, other, s):
                    bags[i] |= 1 << (joint_code(other) - 1)
        labels[centre_token(scene, s, grid_h, grid_w)] = torch.tensor(bags)
    return labels


def centre_token(scene: scenes.Scene, shape: scenes.Shape, grid_h: int, grid_w: int) -> int:
    """The merged token (raster order) whose block holds ``shape``'s centre."""
    cols, rows = grid_w // MERGE, grid_h // MERGE
    col = min(cols - 1, int(shape.cx * cols / scene.width))
    row = min(rows - 1, int(shape.cy * rows / scene.height))
    return row * cols + col


def collate(rows: list[dict[str, Any]], pad_id: int = modelcfg.ENDOFTEXT_ID) -> Batch:
    """Right-pad the rows into one batch."""
    length = max(len(r["input_ids"]) for r in rows)
    n = len(rows)
    ids = torch.full((n, length), pad_id, dtype=torch.long)
    labels = torch.full((n, length), IGNORE, dtype=torch.long)
    mask = torch.zeros((n, length), dtype=torch.long)
    mm = torch.zeros((n, length), dtype=torch.long)
    pos_rows = rows[0]["position_ids"].shape[0]
    pos = torch.zeros((pos_rows, n, length), dtype=torch.long)
    for i, r in enumerate(rows):
        k = len(r["input_ids"])
        ids[i, :k] = r["input_ids"]
        labels[i, :k] = r["labels"]
        mask[i, :k] = 1
        mm[i, :k] = r["mm_token_type_ids"]
        pos[:, i, :k] = r["position_ids"]
    return {
        "input_ids": ids,
        "labels": labels,
        "attention_mask": mask,
        "mm_token_type_ids": mm,
        "position_ids": pos,
        "pixel_u8": torch.cat([r["pixel_u8"] for r in rows]),
        "image_grid_thw": torch.cat([r["image_grid_thw"] for r in rows]),
        "vision_labels": torch.cat([r["vision_labels"] for r in rows]),
        "vision": vision_inputs(torch.cat([r["image_grid_thw"] for r in rows])),
        "kind": [r["kind"] for r in rows],
        "lang": [r["lang"] for r in rows],
        "yes_no": [r["yes_no"] for r in rows],
        "name_labels": with_rows(rows, "name_labels"),
        "pair_labels": with_rows(rows, "pair_labels"),
        "referent_labels": with_rows(rows, "referent_labels"),
        "answer_labels": with_rows(rows, "answer_labels"),
        "asked_labels": with_rows(rows, "asked_labels"),
        "position_labels": with_rows(rows, "position_labels"),
        "coordinate_labels": with_rows(rows, "coordinate_labels"),
        "pointer_labels": with_rows(rows, "pointer_labels"),
    }


def with_rows(rows: list[dict[str, Any]], key: str) -> torch.Tensor:
    """The rows' ``key`` labels in one tensor, each prefixed with its row's index."""
    return torch.cat(
        [torch.cat([torch.full((len(r[key]), 1), i), r[key]], 1) for i, r in enumerate(rows)]
    )


class SceneBatches(IterableDataset[Batch]):
    """Endless batches of training samples; worker ``w`` of ``W`` owns seeds ``≡ w mod W``.

    A ``follow_up_share`` of the single-image samples carry ``follow_ups`` more turns about
    the same image (:func:`scenes.with_follow_up`), so the model learns multi-turn
    conversations (and each image, the costly part of a sample, teaches several answers).
    Each worker encodes ``GROUP`` batches' worth of samples, sorts them by length and cuts
    them into batches (in shuffled order), so batches carry little padding.
    """

    GROUP = 4

    def __init__(
        self,
        processor_dir: Path,
        batch_size: int,
        seed: int,
        kinds: tuple[str, ...] = scenes.KINDS,
        max_pixels: int | None = None,
        follow_up_share: float = 0.0,
        kind_weights: dict[str, float] | None = None,
        yes_no_share: float = 0.5,
        labelling: names.Labelling = names.DEFAULT_LABELLING,
        follow_ups: int = 1,
        every_share: float = locate.EVERY_SHARE,
    ) -> None:
        self.processor_dir = processor_dir
        self.yes_no_share = yes_no_share
        self.every_share = every_share
        self.labelling = labelling
        self.follow_ups = follow_ups
        self.pairs, self.weights = weighted_pairs(kinds, kind_weights or {})
        self.batch_size = batch_size
        self.seed = seed
        self.max_pixels = max_pixels
        self.follow_up_share = follow_up_share

    def item(self, seed: int) -> scenes.Sample:
        rng = random.Random(seed)  # noqa: S311
        kind, lang = rng.choices(self.pairs, self.weights)[0]
        item = scenes.sample(
            seed, kind, lang, yes_no_share=self.yes_no_share, every_share=self.every_share
        )
        if rng.random() < self.follow_up_share:
            return scenes.with_follow_up(item, self.follow_ups)
        return item

    def nth(self, index: int) -> scenes.Sample:
        """The run's ``index``-th training sample (the workers share one numbering)."""
        return self.item(self.seed * 10**10 + index)

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        torch.set_num_threads(1)
        encode = Encoder(self.processor_dir, self.max_pixels, self.labelling)
        order = random.Random(self.seed * 10**10 + worker)  # noqa: S311
        index = worker
        while True:
            rows = []
            for _ in range(self.batch_size * self.GROUP):
                rows.append(encode(self.nth(index)))
                index += workers
            rows.sort(key=lambda r: len(r["input_ids"]))
            starts = list(range(0, len(rows), self.batch_size))
            order.shuffle(starts)
            for i in starts:
                yield collate(rows[i : i + self.batch_size])


HELD_OUT_SET = 7  # the held-out set scored during training (``qwen-ui demo eval``: set 0)


def held_out_samples(n: int, kinds: tuple[str, ...] = scenes.KINDS) -> list[scenes.Sample]:
    """The first ``n`` samples of the given types in the held-out set 7."""
    return scenes.held_out(n, HELD_OUT_SET, kinds)


def held_out_batches(
    processor_dir: Path,
    n: int,
    batch_size: int,
    kinds: tuple[str, ...] = scenes.KINDS,
    max_pixels: int | None = None,
    labelling: names.Labelling = names.DEFAULT_LABELLING,
) -> list[Batch]:
    encode = Encoder(processor_dir, max_pixels, labelling)
    items = held_out_samples(n, kinds)
    return [
        collate([encode(s) for s in items[i : i + batch_size]]) for i in range(0, n, batch_size)
    ]


# --- the training-only attention ------------------------------------------------------


def vision_inputs(grid_thw: torch.Tensor) -> dict[str, Any]:
    """The vision tower's index tensors, precomputed on the CPU (in the data workers)."""
    from transformers.vision_utils import (
        get_vision_cu_seqlens,
        get_vision_position_ids,
        get_vision_window_index,
    )

    v = modelcfg.VISION
    window_index, cu_window = get_vision_window_index(
        grid_thw, spatial_merge_size=MERGE, window_size=v["window_size"], patch_size=PATCH
    )
    cu_seqlens = get_vision_cu_seqlens(grid_thw)
    return {
        "position_ids": get_vision_position_ids(grid_thw, MERGE),
        "cu_seqlens": cu_seqlens,
        "window_index": window_index,
        "cu_window_seqlens": cu_window,
        # built here, on the host, so that the device never waits for a layout
        "layouts": (engine_vision.Layout.of(cu_seqlens), engine_vision.Layout.of(cu_window)),
    }


class BatchedAttention:
    """The engine's batched vision attention (:mod:`qwen_ui.engine.vision`: one SDPA call
    per group of equal-length windows or images, no padding, no mask) in place of the
    stock per-window loop while enabled, with each batch's layouts built in the data
    workers (:func:`vision_inputs`) and handed over by :meth:`set`."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.layouts = engine_vision.Layouts()

    def set(
        self, cu_tensors: tuple[torch.Tensor, ...], layouts: tuple[engine_vision.Layout, ...]
    ) -> None:
        for cu, layout in zip(cu_tensors, layouts, strict=True):
            self.layouts.put(cu, layout)

    def enable(self, on: bool) -> None:
        if on:
            engine_vision.install(self.model, self.layouts)
        else:
            engine_vision.uninstall(self.model)


@functools.cache
def normalisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The processor's mean and std on ``device``, copied there once (a copy from host
    memory per step waited for the device each time)."""
    return IMAGE_MEAN.to(device), IMAGE_STD.to(device)


def to_device(batch: Batch, device: torch.device) -> Batch:
    out = {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }
    out["pixel_values"] = restore_pixels(out.pop("pixel_u8"), *normalisation(device))
    vision = dict(batch["vision"])
    layouts = vision.pop("layouts")
    out["vision"] = {k: t.to(device, non_blocking=True) for k, t in vision.items()}
    out["layouts"] = tuple(layout.to(device) for layout in layouts)
    return out


def forward_logits(
    model: Any,
    batch: Batch,
    *,
    fast: bool = True,
    amp: bool = True,
    attention: BatchedAttention | None = None,
) -> torch.Tensor:
    """Logits for ``batch``: the stock forward, or the training path (precomputed vision
    indices and mrope positions, batched vision attention via ``attention``)."""
    return forward_parts(model, batch, fast=fast, amp=amp, attention=attention).logits


# (batch key, head) pairs
LanguageHeads = tuple[tuple[str, names.NameHead | locate_heads.PointerHead], ...]


class Parts(NamedTuple):
    """What :func:`forward_parts` returns."""

    logits: torch.Tensor
    feats: torch.Tensor | None  # the merged visual tokens (None on the stock path)
    hidden: tuple[torch.Tensor, ...] | None  # the embeddings and each layer's output


def forward_parts(
    model: Any,
    batch: Batch,
    *,
    fast: bool = True,
    amp: bool = True,
    attention: BatchedAttention | None = None,
    vision_grad: float = 1.0,
    hidden: bool = False,
) -> Parts:
    """:func:`forward_logits` plus the merged visual tokens (the vision tower's output;
    None on the stock path) and, on the fast path with ``hidden``, the language
    model's hidden states (0: the embeddings, then after each layer). ``vision_grad`` scales the
    LM loss's gradient into the vision tower (the forward values are unchanged)."""
    device_type = batch["input_ids"].device.type
    # bf16 autocast on the GPU; on the CPU (probes, tests) plain fp32 is faster
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=amp and device_type == "cuda"):
        if not fast:
            keys = (
                "input_ids",
                "attention_mask",
                "mm_token_type_ids",
                "pixel_values",
                "image_grid_thw",
            )
            logits = model(**{k: batch[k] for k in keys}, use_cache=False).logits
            return Parts(logits, None, None)
        vision = dict(batch["vision"])
        if attention is not None:
            attention.set((vision["cu_seqlens"], vision["cu_window_seqlens"]), batch["layouts"])
        feats = model.model.visual(
            batch["pixel_values"], grid_thw=batch["image_grid_thw"], **vision
        ).pooler_output
        embeds = model.model.get_input_embeddings()(batch["input_ids"])
        slots = (batch["input_ids"] == modelcfg.IMAGE_PAD_ID)[..., None].expand_as(embeds)
        embeds = embeds.masked_scatter(slots, scale_grad(feats, vision_grad).to(embeds.dtype))
        # right padding only: with causal attention no real token sees a pad, so no mask is
        # needed and SDPA runs its mask-free kernels (as the engine's vision attention does)
        out = model(
            inputs_embeds=embeds,
            attention_mask=None,
            position_ids=batch["position_ids"],
            use_cache=False,
            output_hidden_states=hidden,
        )
        return Parts(out.logits, feats, out.hidden_states if hidden else None)


def scale_grad(x: torch.Tensor, factor: float) -> torch.Tensor:
    """``x`` in the forward pass; its gradient multiplied by ``factor`` in the backward."""
    if factor == 1.0:
        return x
    return x * factor + x.detach() * (1.0 - factor)


class AuxHead(torch.nn.Module):
    """Training-only linear heads on the merged visual tokens (:func:`token_labels`): each
    token's shape and colour class, the joint class of the shape centred in it and, at
    those centre tokens, the classes of the shapes around it (:func:`relation_labels`,
    counted only with ``relation_weight`` > 0); on every token a shape covers, that
    shape's ranks across and down (:func:`rank_labels`, counted only with
    ``rank_weight`` > 0). Not part of the saved model. Trained always
    (a linear probe of what the vision tower encodes); its gradient reaches the vision tower
    scaled by ``weight`` (0: a pure probe, the vision tower learns from the answers
    alone)."""

    def __init__(
        self, width: int, weight: float, relation_weight: float = 0.0, rank_weight: float = 0.0
    ) -> None:
        super().__init__()
        widths = [N_SHAPE, N_COLOUR, N_JOINT, N_RELATION * (N_JOINT - 1), N_RANK * RANKS]
        self.proj = torch.nn.Linear(width, sum(widths))
        self.widths = widths
        # zero start: a random head on a trained tower's large features gave a loss near 70
        # and sent its noise into the tower; from zero the tower's gradient grows as the head
        # learns
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)
        self.weight = weight
        self.relation_weight = relation_weight
        self.rank_weight = rank_weight

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.proj(scale_grad(feats, self.weight).float())  # type: ignore[no-any-return]

    def loss(
        self, feats: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Cross-entropy (shape + colour + centre) and correct counts: shape and colour on
        tokens a shape covers, centre on the tokens holding a centre, and the tokens wrongly
        called a centre; with ``relation_weight``, that times the relation bags' binary
        cross-entropy on centre tokens, and the centre tokens whose bags are all right; with
        ``rank_weight``, that times the ranks' cross-entropy on covered tokens, and those
        whose two ranks are right."""
        *parts, relations, ranks = self(feats).split(self.widths, dim=1)
        loss = sum(F.cross_entropy(logits, labels[:, i]) for i, logits in enumerate(parts))
        guess = [logits.argmax(1) for logits in parts]
        on, centre = labels[:, 0] > 0, labels[:, 2] > 0
        stats = {
            # masked sums, not boolean indexing: indexing waits for the device every step
            "shape_hit": ((guess[0] == labels[:, 0]) & on).sum(),
            "colour_hit": ((guess[1] == labels[:, 1]) & on).sum(),
            "on": on.sum(),
            "centre_hit": ((guess[2] == labels[:, 2]) & centre).sum(),
            "centre": centre.sum(),
            "centre_false": ((guess[2] > 0) & ~centre).sum(),
        }
        if self.relation_weight > 0:
            bags = labels[:, 3 : 3 + N_RELATION]
            relation_loss, relation_stats = relation_terms(relations, bags, centre)
            loss = loss + self.relation_weight * relation_loss
            stats |= relation_stats
        if self.rank_weight > 0:
            rank_loss, rank_stats = rank_terms(ranks, labels[:, 3 + N_RELATION :])
            loss = loss + self.rank_weight * rank_loss
            stats |= rank_stats
        return torch.as_tensor(loss), stats


def relation_terms(
    logits: torch.Tensor, bags: torch.Tensor, centre: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The relation bags' binary cross-entropy summed per centre token and averaged over
    them; and on centre tokens, those whose every bit is right, the bits set in the labels,
    the bits predicted set and the bits both (recall and precision: the all-right count
    hides a head that is learning the bags bit by bit). ``logits``: tokens x (relations x
    classes); ``bags``: tokens x relations bitmasks."""
    truth = (bags[:, :, None] >> torch.arange(N_JOINT - 1, device=bags.device)) & 1
    logits = logits.view(-1, N_RELATION, N_JOINT - 1)
    per_token = F.binary_cross_entropy_with_logits(logits, truth.float(), reduction="none").sum(
        (1, 2)
    )
    loss = (per_token * centre).sum() / centre.sum().clamp(min=1)
    said, truth, on = logits > 0, truth.bool(), centre[:, None, None]
    return loss, {
        "relation_hit": ((said == truth).all(2).all(1) & centre).sum(),
        "relation_true": (truth & on).sum(),
        "relation_said": (said & on).sum(),
        "relation_both": (truth & said & on).sum(),
    }


def rank_terms(
    logits: torch.Tensor, ranks: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The ranks' cross-entropy (both axes, averaged over the tokens that have them) and,
    on those tokens, how many have both ranks right. ``logits``: tokens x (``N_RANK`` x
    ``RANKS``); ``ranks``: tokens x ``N_RANK``, -1 where a token has none."""
    per_axis = logits.view(-1, N_RANK, RANKS)
    loss = F.cross_entropy(per_axis.reshape(-1, RANKS), ranks.reshape(-1), ignore_index=-1)
    ranked = ranks[:, 0] >= 0
    right = (per_axis.argmax(2) == ranks).all(1) & ranked
    return loss, {"rank_hit": right.sum(), "ranked": ranked.sum()}


def answer_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    shifted = labels[:, 1:]
    return F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        shifted.reshape(-1),
        ignore_index=IGNORE,
    )


def exact(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per row: every answer token is the argmax (= greedy decoding gives the answer)."""
    shifted = labels[:, 1:]
    wrong = (logits[:, :-1].argmax(-1) != shifted) & (shifted != IGNORE)
    return ~wrong.any(dim=1)


def check_equivalence(model: Any, batch: Batch, attention: BatchedAttention) -> dict[str, float]:
    """Max logit difference (fp32) of the training path against the stock forward."""
    model.eval()
    with torch.no_grad():
        attention.enable(False)
        stock = forward_logits(model, batch, fast=False, amp=False)
        attention.enable(True)
        fast = forward_logits(model, batch, amp=False, attention=attention)
    model.train()
    mask = batch["attention_mask"].bool()
    return {
        "max_abs_diff": float((stock - fast)[mask].abs().max()),
        "logit_scale": float(stock[mask].abs().max()),
    }


def evaluate(
    model: Any,
    batches: list[Batch],
    device: torch.device,
    attention: BatchedAttention,
    aux: AuxHead | None = None,
    heads: LanguageHeads = (),
) -> dict[str, Any]:
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    loss_sum = 0.0
    probe = dict.fromkeys(
        ("shape_hit", "colour_hit", "on", "centre_hit", "centre", "centre_false"), 0
    )
    relations = aux is not None and aux.relation_weight > 0
    ranks = aux is not None and aux.rank_weight > 0
    model.eval()
    with torch.no_grad():
        for batch in batches:
            logits, feats, hidden = forward_parts(
                model, batch, attention=attention, hidden=bool(heads)
            )
            loss_sum += float(answer_loss(logits, batch["labels"]))
            for key, head in heads:
                _, stats = head.batch_loss(hidden, batch, key)  # type: ignore[arg-type]
                for k, v in stats.items():
                    probe[f"{key}:{k}"] = probe.get(f"{key}:{k}", 0) + int(v)
            if aux is not None and feats is not None:
                _, stats = aux.loss(feats, batch["vision_labels"])
                for k, v in stats.items():
                    probe[k] = probe.get(k, 0) + int(v)
            ok = exact(logits, batch["labels"]).tolist()
            # the yes/no keys ("spatial: yes") split a type whose answer is yes or no by
            # the right answer: a model answering from the prior scores 0 on one of them
            keys = zip(batch["kind"], batch["lang"], batch["yes_no"], strict=True)
            for good, row_keys in zip(ok, keys, strict=True):
                for key in scoring.score_keys(*row_keys):
                    hits[key][0] += int(good)
                    hits[key][1] += 1
    model.train()
    acc = {k: round(v[0] / v[1], 4) for k, v in sorted(hits.items())}
    result: dict[str, Any] = {"loss": round(loss_sum / len(batches), 4), "acc": acc}
    if probe["on"]:
        # per visual token covered by a shape: the auxiliary head's shape / colour accuracy;
        # per token holding a shape's centre: its joint class; and false centres (a count)
        result["token_acc"] = {
            "shape": round(probe["shape_hit"] / probe["on"], 4),
            "colour": round(probe["colour_hit"] / probe["on"], 4),
            "centre": round(probe["centre_hit"] / max(1, probe["centre"]), 4),
            "centre_false": probe["centre_false"],
        }
        if relations:  # centre tokens whose four relation bags are all right; bit recall
            # and precision
            result["token_acc"] |= {
                "relation": round(probe["relation_hit"] / max(1, probe["centre"]), 4),
                "relation_recall": round(
                    probe["relation_both"] / max(1, probe["relation_true"]), 4
                ),
                "relation_precision": round(
                    probe["relation_both"] / max(1, probe["relation_said"]), 4
                ),
            }
        if ranks:  # covered tokens whose two ranks are right
            result["token_acc"]["rank"] = round(probe["rank_hit"] / max(1, probe["ranked"]), 4)
    for key, _ in heads:  # labelled positions whose every rank the head reads right
        if probe[f"{key}:names"]:
            result[key] = round(probe[f"{key}:name_hit"] / probe[f"{key}:names"], 4)
    return result | {"n": hits["all"][1]}


# --- the run --------------------------------------------------------------------------


def lr_at(
    step: int,
    progress: float,
    peak: float,
    warmup: int,
    floor: float = 0.05,
    span: tuple[float, float] = (0.0, 1.0),
) -> float:
    """One cosine schedule from ``peak`` down to ``floor`` x ``peak``, of which this run
    covers the share ``span`` (``progress`` in [0, 1] is this run's own), with a linear
    warm-up over its first ``warmup`` steps towards the schedule's value. A schedule spread
    over several device calls (``--schedule-span 0,0.5`` then ``0.5,1``) thus continues
    where the last call ended instead of climbing back to its peak."""
    overall = schedule_progress(progress, span)
    value = peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * overall)))
    return value * min(1.0, (step + 1) / warmup) if warmup > 0 else value


def run_progress(
    step: int, elapsed: float, steps: int, budget_s: float, warm_s: float | None
) -> float:
    """This run's own progress in [0, 1]: the larger of the steps done and the wall time
    used, the time counted from the end of the warm-up (``warm_s``: the seconds elapsed
    when it ended, None while it runs), so that compiling during the first steps does not
    decay the schedule before its peak; the run still ends at ``budget_s``."""
    if elapsed >= budget_s:
        return 1.0
    by_steps = step / steps
    if warm_s is None:
        return by_steps
    return max(by_steps, (elapsed - warm_s) / (budget_s - warm_s))


def schedule_progress(progress: float, span: tuple[float, float]) -> float:
    """The whole schedule's progress when this run (one of several calls, ``span``) is at
    ``progress`` of its own."""
    start, end = span
    return start + (end - start) * min(1.0, progress)


def group_scale(group: dict[str, Any], overall: float, freeze_vision_at: float | None) -> float:
    """A parameter group's share of the learning rate at ``overall`` (the whole schedule's
    progress, across ``--schedule-span`` calls): its ``lr_scale``, and 0 for the vision
    tower and its head from ``freeze_vision_at`` on (the tower frozen for the run's last
    phase, when the language model learned the spatial yes/no form in runs 21 and 29)."""
    frozen = freeze_vision_at is not None and overall >= freeze_vision_at
    return 0.0 if frozen and group["vision"] else float(group["lr_scale"])


def freeze_tower_from_start(model: Any, freeze_vision_at: float | None) -> None:
    """A tower frozen for the whole schedule (``--freeze-vision-at 0``) takes no gradient
    at all, rather than a zero learning rate: a CPU step of 32 took 5.8 s instead of
    10.2 s (run 86, training/NOTES.md). A tower frozen later keeps its gradients."""
    if freeze_vision_at == 0:
        model.model.visual.requires_grad_(False)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def save(
    model: Any, out: Path, step: int, aux: AuxHead | None = None, heads: LanguageHeads = ()
) -> None:
    """Save a bf16 copy (the stock forward; training keeps fp32 master weights) and, beside
    it, the training-only heads (``heads.pt``, bf16) that a run continued in another call
    takes back with ``--init-heads``."""
    target = out / "model"
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(str(target), max_shard_size="12MB")
    if aux is not None:
        torch.save(head_states(aux, heads), out / HEADS_FILE)
    log.info("saved step %d to %s", step, target)


HEADS_FILE = "heads.pt"


def head_states(aux: AuxHead, heads: LanguageHeads) -> dict[str, dict[str, torch.Tensor]]:
    """The training-only heads' weights, by name (``aux`` and each head's batch key), in
    bf16: half the bytes a device call carries to the next (the answer head alone is
    1,024 x 384 weights), and a next call trains on from them in fp32 again."""
    states = {"aux": aux.state_dict(), **{key: head.state_dict() for key, head in heads}}
    return {k: {n: t.to(torch.bfloat16) for n, t in s.items()} for k, s in states.items()}


def load_heads(path: Path, aux: AuxHead, heads: LanguageHeads) -> None:
    """The weights :func:`head_states` saved, into the heads this run has (a head the file
    lacks keeps its zero start; one the run lacks is ignored)."""
    states = torch.load(path, map_location="cpu", weights_only=True)
    for key, head in (("aux", aux), *heads):
        if key in states:
            head.load_state_dict(states[key])


def parse_kind_weights(text: str) -> dict[str, float]:
    """``count=3,exists=2,spatial:en=4`` as {key: weight}: a kind's weight, or one of its
    languages' (``kind:lang``, overriding the kind's for that language); unknown kinds or
    languages and negative weights are errors."""
    weights = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        kind, _, lang = key.partition(":")
        known = kind in scenes.ALL_KINDS and (not lang or lang in scenes.LANGS)
        if not known or float(value) < 0:
            raise argparse.ArgumentTypeError(f"bad kind weight {part!r}")
        weights[key] = float(value)
    return weights


def weighted_pairs(
    kinds: tuple[str, ...],
    weights: dict[str, float],
    langs: tuple[scenes.Lang, ...] = scenes.LANGS,
) -> tuple[list[tuple[str, scenes.Lang]], list[float]]:
    """The (type, language) pairs to draw from and their sampling weights
    (:func:`parse_kind_weights`'s: ``kind:lang`` over ``kind`` over 1)."""
    pairs = [(k, lang) for k in kinds for lang in langs]
    return pairs, [weights.get(f"{k}:{lang}", weights.get(k, 1.0)) for k, lang in pairs]


def parse_share(text: str) -> float:
    """A share between 0 and 1."""
    share = float(text)
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"share {share} is not in 0..1")
    return share


def kinds_among(allowed: tuple[str, ...], what: str) -> Callable[[str], tuple[str, ...]]:
    """An argument parser of comma-separated question types, each one of ``allowed``."""

    def parse(text: str) -> tuple[str, ...]:
        kinds = tuple(filter(None, text.split(",")))
        if any(k not in allowed for k in kinds):
            raise argparse.ArgumentTypeError(f"{what} are among {', '.join(allowed)}")
        return kinds

    return parse


def parse_seed(text: str) -> int:
    """A run's seed: its samples' seeds, from ``seed`` x 10^10, stay below the held-out
    ones (``scenes.HELD_OUT_BASE``)."""
    seed = int(text)
    if not 0 <= seed < scenes.HELD_OUT_BASE // 10**10:
        raise argparse.ArgumentTypeError(f"seed {seed} is not in 0..99")
    return seed


def parse_span(text: str) -> tuple[float, float]:
    """``START,END`` with 0 <= START < END <= 1."""
    start, _, end = text.partition(",")
    try:
        span = float(start), float(end)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad schedule span {text!r}") from None
    if not 0.0 <= span[0] < span[1] <= 1.0:
        raise argparse.ArgumentTypeError(f"bad schedule span {text!r}")
    return span


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--processor-dir", type=Path, default=WEIGHTS)
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=14)
    p.add_argument(
        "--seed",
        type=parse_seed,
        default=1,
        help="picks the training samples (seeds from SEED x 10^10 on) and the initial "
        "weights: a run continuing another needs a new one, or it sees the same samples",
    )
    p.add_argument(
        "--schedule-span",
        type=parse_span,
        default=(0.0, 1.0),
        help="START,END: the share of one cosine schedule this run covers, so that a "
        "schedule can be spread over several device calls (0,0.5 then 0.5,1)",
    )
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-n", type=int, default=1024)
    p.add_argument("--save-every-s", type=float, default=120.0)
    p.add_argument("--max-minutes", type=float, default=8.0)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the language-model layers and the vision blocks' norms and "
        "MLPs (compile_parts)",
    )
    p.add_argument(
        "--aux-weight",
        type=float,
        default=1.0,
        help="weight of the auxiliary per-token shape/colour loss's gradient into the vision "
        "tower (0: the head is only a probe)",
    )
    p.add_argument(
        "--relation-weight",
        type=float,
        default=0.0,
        help="weight of the auxiliary relation bags (each shape's centre token names the "
        "shapes left of, right of, above and below it); 0: off",
    )
    p.add_argument(
        "--rank-weight",
        type=float,
        default=0.0,
        help="weight of the auxiliary ranks (every token of a shape says how many shapes lie "
        "left of it and above it, which the yes/no spatial questions compare); 0: off",
    )
    p.add_argument(
        "--name-weight",
        type=float,
        default=0.0,
        help="weight of the name head (at the last token of each shape a spatial question "
        "names, a language-model layer says that shape's ranks across and down); 0: off",
    )
    p.add_argument(
        "--name-layer",
        type=int,
        default=2,
        help="the language-model layer whose output the name head reads",
    )
    p.add_argument(
        "--pair-weight",
        type=float,
        default=0.0,
        help="weight of the pair head (at the position that answers a yes/no spatial "
        "question, a language-model layer says both named shapes' ranks); 0: off",
    )
    p.add_argument(
        "--pair-layer",
        type=int,
        default=4,
        help="the language-model layer whose output the pair head reads",
    )
    p.add_argument(
        "--referent-weight",
        type=float,
        default=0.0,
        help="weight of the referent head (at the position that answers a colour or shape "
        "question, a language-model layer says the named shape's kind and colour); 0: off",
    )
    p.add_argument(
        "--referent-layer",
        type=int,
        default=3,
        help="the language-model layer whose output the referent head reads",
    )
    p.add_argument(
        "--answer-weight",
        type=float,
        default=0.0,
        help="weight of the answer head (at the position that gives an answer's first token, "
        "a language-model layer says that token: the answer asked of a middle layer); 0: off",
    )
    p.add_argument(
        "--answer-layer",
        type=int,
        default=3,
        help="the language-model layer whose output the answer head reads",
    )
    p.add_argument(
        "--asked-weight",
        type=float,
        default=0.0,
        help="weight of the asked head (at the position that answers a spatial question, a "
        "language-model layer says the relation it asks: left, right, above or below); 0: off",
    )
    p.add_argument(
        "--asked-layer",
        type=int,
        default=4,
        help="the language-model layer whose output the asked head reads",
    )
    p.add_argument(
        "--position-weight",
        type=float,
        default=0.0,
        help="weight of the position head (at every image token, a language-model layer "
        "says the token's row and column in its image's merged grid); 0: off",
    )
    p.add_argument(
        "--position-layer",
        type=int,
        default=2,
        help="the language-model layer whose output the position head reads",
    )
    p.add_argument(
        "--coordinate-weight",
        type=float,
        default=0.0,
        help="weight of the coordinate head (where a grounding answer writes a box "
        "coordinate's digits, a language-model layer says its 28 px token and 7 px step); "
        "0: off",
    )
    p.add_argument(
        "--coordinate-layer",
        type=int,
        default=3,
        help="the language-model layer whose output the coordinate head reads",
    )
    p.add_argument(
        "--pointer-weight",
        type=float,
        default=0.0,
        help="weight of the pointer head (where a grounding answer writes a box "
        "coordinate's digits, one attention head of the language model should attend to "
        "the image tokens on that edge of the box); 0: off",
    )
    p.add_argument(
        "--pointer-layer",
        type=int,
        default=2,
        help="the decoder layer (0-based) whose attention the pointer head supervises",
    )
    p.add_argument("--pointer-head", type=int, default=0, help="the attention head it supervises")
    p.add_argument(
        "--answer-kinds",
        type=kinds_among(scenes.KINDS, "answer kinds"),
        default=names.ANSWER_KINDS,
        help="comma-separated question types whose first answers the answer head reads "
        f"(first turns and follow-ups alike; default {','.join(names.ANSWER_KINDS)})",
    )
    p.add_argument(
        "--vision-lr-mult", type=float, default=1.0, help="learning rate of `visual` vs --lr"
    )
    p.add_argument(
        "--freeze-vision-at",
        type=parse_share,
        default=None,
        help="from this share of the whole schedule on (0 to 1, across --schedule-span "
        "calls), the vision tower and its head stop learning (default: never)",
    )
    p.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        help="CPU probes only: cap images below the processor's max_pixels",
    )
    p.add_argument(
        "--kinds",
        default=",".join(scenes.ALL_KINDS),
        help="comma-separated question types to train and evaluate on (default: the "
        "grammar's, grounding and off-grammar refusals)",
    )
    p.add_argument(
        "--kind-weights",
        type=parse_kind_weights,
        default={},
        help="sampling weights of question types, e.g. count=3,exists=2,spatial:en=4 (a "
        "kind:lang key weighs one language of a type; others 1)",
    )
    p.add_argument(
        "--yes-no-share",
        type=parse_share,
        default=0.5,
        help="share of spatial training questions in the yes/no form (the grammar's: 0.5)",
    )
    p.add_argument(
        "--every-share",
        type=parse_share,
        default=locate.EVERY_SHARE,
        help="share of grounding training questions about every shape of a kind "
        f'("Where are the stars?"; the grammar\'s: {locate.EVERY_SHARE})',
    )
    p.add_argument(
        "--follow-up-share",
        type=float,
        default=0.5,
        help="share of single-image samples with follow-up turns about the same image",
    )
    p.add_argument(
        "--follow-ups",
        type=int,
        choices=range(1, 5),
        default=1,
        help="follow-up turns in each such sample (1 to 4; each a total, a count, "
        "existence, the colour or shape of a shape alone of its kind or colour, or a yes/no "
        "spatial question)",
    )
    p.add_argument(
        "--fresh-lm",
        action="store_true",
        help="with --init: keep the vision tower, re-initialise the language model (a language "
        "model stuck on answer priors does not learn to read new visual features)",
    )
    p.add_argument(
        "--init",
        type=Path,
        default=None,
        help="continue from this saved model folder (a new optimizer and schedule)",
    )
    p.add_argument(
        "--name-kinds",
        type=kinds_among(names.NAMING_KINDS, "name kinds"),
        default=("spatial",),
        help="comma-separated question types whose named shapes the name head labels "
        f"(of {','.join(names.NAMING_KINDS)}; run 29's: spatial)",
    )
    p.add_argument(
        "--init-heads",
        type=Path,
        default=None,
        help="the training-only heads saved by an earlier call (OUT/heads.pt), for a run "
        "spread over calls with --schedule-span",
    )
    p.add_argument(
        "--rope-theta",
        type=float,
        default=None,
        help="the language model's rope base, in place of the --init folder's (or "
        "modelcfg's); mrope gives the width axis the slowest rotations, so a smaller base "
        "is what lets the language model tell left from right",
    )
    return p.parse_args(argv)


def build_model(
    device: torch.device,
    init: Path | None = None,
    fresh_lm: bool = False,
    rope_theta: float | None = None,
) -> Any:
    """A fresh model, or (``init``) one continuing from a saved checkpoint, in fp32; with
    ``fresh_lm`` only its vision tower continues; ``rope_theta`` replaces the language
    model's rope base (the weights are kept; the rotations change)."""
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    config = modelcfg.build_config() if init is None else AutoConfig.from_pretrained(str(init))
    if rope_theta is not None:
        config.text_config.rope_parameters["rope_theta"] = rope_theta
    config._attn_implementation = "sdpa"
    if init is not None:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            str(init), config=config, dtype=torch.float32
        ).to(device)
    else:
        model = Qwen2_5_VLForConditionalGeneration(config).to(device)
    if init is not None and fresh_lm:
        reset_language_model(model)
    model.generation_config.eos_token_id = [modelcfg.IM_END_ID, modelcfg.ENDOFTEXT_ID]
    model.generation_config.pad_token_id = modelcfg.ENDOFTEXT_ID
    model.generation_config.do_sample = False
    return model


def reset_language_model(model: Any) -> None:
    """Fresh weights for the language model (embeddings, decoder layers, final norm; the tied
    head follows the embeddings), as a new model would have; the vision tower is kept."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    fresh = Qwen2_5_VLForConditionalGeneration(model.config)
    with torch.no_grad():
        model.model.language_model.load_state_dict(fresh.model.language_model.state_dict())


def make_optimizer(
    model: Any,
    lr: float,
    weight_decay: float,
    aux: AuxHead | None = None,
    vision_lr_mult: float = 1.0,
    heads: LanguageHeads = (),
) -> torch.optim.Optimizer:
    """AdamW; no decay on norms/embeddings/biases; ``visual`` (and the auxiliary head) at
    ``vision_lr_mult`` times the learning rate (each group's ``lr_scale``); the language
    model's heads (:mod:`names`) at its rate."""
    params = list(model.named_parameters())
    if aux is not None:
        params += [("visual.aux." + n, p) for n, p in aux.named_parameters()]
    for key, head in heads:
        params += [(f"{key}.{n}", p) for n, p in head.named_parameters()]
    groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = defaultdict(list)
    for name, param in params:
        decays = param.ndim >= 2 and "embed" not in name
        groups[(decays, "visual" in name)].append(param)
    param_groups = [
        {
            "params": ps,
            "weight_decay": weight_decay if decays else 0.0,
            "lr_scale": vision_lr_mult if vision else 1.0,
            "vision": vision,
        }
        for (decays, vision), ps in sorted(groups.items())
    ]
    # fused (CUDA and CPU): it takes train_step's on-device skip flag
    return torch.optim.AdamW(param_groups, lr=lr, betas=(0.9, 0.98), eps=1e-8, fused=True)


def labelling_of(args: argparse.Namespace) -> names.Labelling:
    return names.Labelling(args.name_kinds, args.answer_kinds)


def scene_batches(args: argparse.Namespace) -> SceneBatches:
    """The training samples and batches the arguments ask for."""
    return SceneBatches(
        args.processor_dir,
        args.batch,
        args.seed,
        tuple(args.kinds.split(",")),
        args.max_pixels,
        args.follow_up_share,
        args.kind_weights,
        args.yes_no_share,
        labelling_of(args),
        args.follow_ups,
        args.every_share,
    )


def scene_loader(args: argparse.Namespace, device: torch.device) -> DataLoader[Batch]:
    """Training batches from ``args.workers`` DataLoader workers (:class:`SceneBatches`)."""
    return DataLoader(
        scene_batches(args),
        batch_size=None,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if args.workers else None,
        persistent_workers=args.workers > 0,
    )


class StepResult(NamedTuple):
    """One update's figures, as device tensors (reading them syncs with the device)."""

    lm_loss: torch.Tensor
    aux_loss: torch.Tensor
    grad_norm: torch.Tensor  # the language model's (and the rest outside the vision tower)
    vision_grad_norm: torch.Tensor
    skipped: torch.Tensor  # 1.0 when a gradient was non-finite and the update skipped
    name_loss: torch.Tensor  # the language model's heads' (weighted; 0 without them)


def train_step(
    model: Any,
    opt: torch.optim.Optimizer,
    batch: Batch,
    attention: BatchedAttention,
    aux: AuxHead,
    heads: LanguageHeads = (),
) -> StepResult:
    """Forward, the answer and auxiliary losses, backward, the gradients of the language
    model, the vision tower and the head clipped apart (a large auxiliary gradient in the
    tower must not shrink the language model's update, nor the head's the model's), and
    the update unless a gradient is non-finite. The fused optimizer skips it on the device
    (its ``found_inf`` input, as ``GradScaler`` uses it), so the host never waits here."""
    logits, feats, hidden = forward_parts(model, batch, attention=attention, hidden=bool(heads))
    assert feats is not None
    lm_loss = answer_loss(logits, batch["labels"])
    aux_loss, _ = aux.loss(feats, batch["vision_labels"])
    name_loss = torch.zeros((), device=lm_loss.device)
    for key, head in heads:
        name_loss = name_loss + head.batch_loss(hidden, batch, key)[0]  # type: ignore[arg-type]
    opt.zero_grad(set_to_none=True)
    (lm_loss + aux_loss + name_loss).backward()  # type: ignore[no-untyped-call]
    vision, rest = split_parameters(model)
    norm = torch.nn.utils.clip_grad_norm_(rest, 1.0)
    vision_norm = torch.nn.utils.clip_grad_norm_(vision, 1.0)
    head_params = [*aux.parameters(), *(p for _, head in heads for p in head.parameters())]
    head_norm = torch.nn.utils.clip_grad_norm_(head_params, 1.0)
    finite = torch.isfinite(norm) & torch.isfinite(vision_norm) & torch.isfinite(head_norm)
    skipped = (~finite).float()
    opt.found_inf = skipped  # type: ignore[attr-defined]
    opt.step()
    return StepResult(
        lm_loss.detach(), aux_loss.detach(), norm, vision_norm, skipped, name_loss.detach()
    )


def split_parameters(model: Any) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """The vision tower's parameters, and all the others (language model, head)."""
    vision = list(model.model.visual.parameters())
    ids = {id(p) for p in vision}
    return vision, [p for p in model.parameters() if id(p) not in ids]


def compile_parts(model: Any) -> None:
    """``torch.compile`` (dynamic shapes: every batch has its own lengths) the pieces where
    a step's kernels go (the fifth session's profile: norms, rotations, activations and
    copies, 55 % of the device time): each language-model layer, and each vision
    block's norms and MLP (its attention is the engine's batched call, whose layouts are looked up
    per batch). Forward and backward are both compiled; the saved model is unchanged."""
    for layer in model.model.language_model.layers:
        layer.compile(dynamic=True)
    for block in model.model.visual.blocks:
        for part in (block.norm1, block.norm2, block.mlp):
            part.compile(dynamic=True)


def attention_kernels() -> None:
    """Keep cuDNN's attention out of training. Every batch brings new sequence lengths,
    and for each new shape cuDNN builds an execution plan on the host: run 45's step on
    the H200 spent 836 of its 1,074 ms of host time in its 101 attention calls forward
    and back, against 74 ms of kernels in all (training/NOTES.md). Flash and
    memory-efficient attention launch without a plan."""
    torch.backends.cuda.enable_cudnn_sdp(False)


def run(args: argparse.Namespace) -> None:
    seed_everything(args.seed)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    attention_kernels()
    args.out.mkdir(parents=True, exist_ok=True)
    model = build_model(device, args.init, args.fresh_lm, args.rope_theta)
    freeze_tower_from_start(model, args.freeze_vision_at)
    attention = BatchedAttention(model)
    log.info("params %d", sum(p.numel() for p in model.parameters()))
    kinds = tuple(args.kinds.split(","))
    hidden = model.config.text_config.hidden_size
    aux = AuxHead(hidden, args.aux_weight, args.relation_weight, args.rank_weight)
    aux = aux.to(device)
    heads = language_heads(args, hidden, device, model)
    if args.init_heads is not None:
        load_heads(args.init_heads, aux, heads)
    batches = iter(scene_loader(args, device))  # workers start now, while held-out encodes
    held = [
        to_device(b, device)
        for b in held_out_batches(
            args.processor_dir,
            args.eval_n,
            128,
            kinds,
            args.max_pixels,
            labelling_of(args),
        )
    ]
    log.info("equivalence %s", check_equivalence(model, held[0], attention))
    attention.enable(True)
    if args.compile:
        compile_parts(model)
    opt = make_optimizer(model, args.lr, args.weight_decay, aux, args.vision_lr_mult, heads)
    train_loop(model, opt, batches, held, args, device, attention, aux, heads)


def language_heads(
    args: argparse.Namespace, width: int, device: torch.device, model: Any = None
) -> LanguageHeads:
    """The language-model heads the arguments ask for (name, pair, referent, answer,
    asked, position and coordinate), each with its batch key: (key, weight, layer,
    outputs, classes); and the pointer head on ``model``'s own attention."""
    specs = (
        ("name_labels", args.name_weight, args.name_layer, names.N_AXES, scenes.MAX_SHAPES),
        ("pair_labels", args.pair_weight, args.pair_layer, 2 * names.N_AXES, scenes.MAX_SHAPES),
        ("referent_labels", args.referent_weight, args.referent_layer, 1, scenes.JOINT_CLASSES),
        ("answer_labels", args.answer_weight, args.answer_layer, 1, modelcfg.VOCAB_SIZE),
        ("asked_labels", args.asked_weight, args.asked_layer, 1, len(scenes.RELATIONS)),
        *(
            (key, weight, layer, locate_heads.N_AXES, locate_heads.GRID_CLASSES)
            for key, weight, layer in (
                ("position_labels", args.position_weight, args.position_layer),
                ("coordinate_labels", args.coordinate_weight, args.coordinate_layer),
            )
        ),
    )
    heads: list[tuple[str, names.NameHead | locate_heads.PointerHead]] = [
        (key, names.NameHead(width, weight, layer, outputs, classes).to(device))
        for key, weight, layer, outputs, classes in specs
        if weight > 0
    ]
    if args.pointer_weight > 0:
        if model is None:
            raise ValueError("the pointer head needs the model")
        pointer = locate_heads.PointerHead(
            model, args.pointer_weight, args.pointer_layer, args.pointer_head
        )
        heads.append(("pointer_labels", pointer))
    return tuple(heads)


def train_loop(
    model: Any,
    opt: torch.optim.Optimizer,
    batches: Iterator[Batch],
    held: list[Batch],
    args: argparse.Namespace,
    device: torch.device,
    attention: BatchedAttention,
    aux: AuxHead,
    heads: LanguageHeads = (),
) -> None:
    """The schedule's progress is the larger of steps done and wall time used after the
    warm-up (:func:`run_progress`), so the cosine decay completes within
    ``--max-minutes`` whatever the throughput."""
    metrics = (args.out / "metrics.jsonl").open("a")
    start = last_save = time.time()
    budget = args.max_minutes * 60
    warm_s: float | None = None
    wait = 0.0
    skipped = torch.zeros((), device=device)
    model.train()
    for step in range(args.steps):
        t0 = time.time()
        batch = to_device(next(batches), device)
        wait += time.time() - t0
        elapsed = time.time() - start
        if warm_s is None and step >= args.warmup:
            warm_s = elapsed
        progress = run_progress(step, elapsed, args.steps, budget, warm_s)
        overall = schedule_progress(progress, args.schedule_span)
        for group in opt.param_groups:
            lr = lr_at(step, progress, args.lr, args.warmup, span=args.schedule_span)
            group["lr"] = group_scale(group, overall, args.freeze_vision_at) * lr
        update = train_step(model, opt, batch, attention, aux, heads)
        skipped = skipped + update.skipped
        last = step == args.steps - 1 or progress >= 1.0
        row_loss = update.lm_loss.item() if step % 10 == 0 else 0.0
        if step % args.log_every == 0:
            row = {
                "step": step,
                "loss": round(update.lm_loss.item(), 4),
                "aux_loss": round(update.aux_loss.item(), 4),
                "name_loss": round(update.name_loss.item(), 4),
                "lr": opt.param_groups[0]["lr"],
                "grad_norm": round(update.grad_norm.item(), 3),
                "vision_grad_norm": round(update.vision_grad_norm.item(), 3),
                "elapsed_s": round(elapsed, 1),
                "data_wait_s": round(wait, 1),
                "skipped": int(skipped),  # updates skipped for non-finite gradients
                "tokens": int(batch["attention_mask"].sum()),
            }
            log.info("train %s", json.dumps(row))
            metrics.write(json.dumps({"train": row}) + "\n")
        if step % args.eval_every == 0 or last:
            result = evaluate(model, held, device, attention, aux, heads)
            result |= {"step": step, "elapsed_s": round(elapsed, 1)}
            log.info("eval %s", json.dumps(result, ensure_ascii=False))
            metrics.write(json.dumps({"eval": result}, ensure_ascii=False) + "\n")
            metrics.flush()
        if last or (time.time() - last_save > args.save_every_s and math.isfinite(row_loss)):
            attention.enable(False)
            save(model, args.out, step, aux, heads)
            attention.enable(True)
            last_save = time.time()
        if last:
            break
    metrics.close()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(parse_args(argv))


if __name__ == "__main__":
    main()
