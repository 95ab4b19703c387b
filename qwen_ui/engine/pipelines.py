"""The vision pipeline (processor + vision tower) and the language pipeline (tokenizer +
language model), loaded lazily from the model store, once, behind a lock.

Both halves live in one checkpoint and one module tree (``model.model.visual`` and the
decoder), so one load serves both; each pipeline is a view with only what its stage needs.
The loader drives :class:`~qwen_ui.engine.status.EngineStatus` (idle → loading → ready |
failed). Loading never reaches the network: the path comes from the store, every
``from_pretrained`` gets ``local_files_only=True`` and the hub's offline switches are set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import transformers
from PIL import Image
from transformers import AutoProcessor, PreTrainedModel

from qwen_ui.engine import patching, vision
from qwen_ui.engine.boxes import GROUNDING_TOKENS, family_of
from qwen_ui.engine.cache import Embedding
from qwen_ui.engine.dense_weights import keep_dense_copies
from qwen_ui.engine.detokenize import decode_keeping
from qwen_ui.engine.errors import UnsupportedModel
from qwen_ui.engine.generate import Prompt
from qwen_ui.engine.loading import load_model
from qwen_ui.engine.status import EngineStatus
from qwen_ui.errors import QwenUIError

log = logging.getLogger(__name__)

OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


class SnapshotLike(Protocol):
    @property
    def path(self) -> Path: ...

    @property
    def id(self) -> str: ...


class StoreLike(Protocol):
    def resolve(self, model_id: str, revision: str) -> Any: ...


@dataclass(frozen=True)
class ModelSpec:
    model_id: str
    revision: str
    device: str  # "auto" | "cpu" | "cuda"
    min_pixels: int
    max_pixels: int
    prefill_dequant_rows: int = 0  # AWQ: prompts longer than this skip the int4 kernel
    vision_attention: str = "batched"  # "stock": transformers' per-window loop
    fuse_projections: bool = True  # AWQ: one int4 matmul for q/k/v and one for gate/up
    dense_limit: int = 0  # AWQ on CUDA: bytes dense copies of int4 weights may take
    triton_int4: bool = False  # AWQ on CUDA: few-row inputs on the Triton int4 kernel


@dataclass(frozen=True)
class Turn:
    """One exchange of a conversation, as the prompt sees it."""

    question: str
    image_count: int
    answer: str | None = None  # None: the turn being asked now
    first_image: int = 0  # the number of its first image in the conversation (0: no labels)


def pick_device(wanted: str) -> torch.device:
    if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def compute_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA (what the int4 kernel takes); float32 on the CPU (fast and exact there)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


class VisionPipeline:
    """Images → (pixel patches, grids) → embeddings, several images in one pass of the
    vision tower."""

    def __init__(self, processor: Any, model: PreTrainedModel, spec: ModelSpec) -> None:
        self.image_processor = processor.image_processor
        self.model = model
        self.device = model.device
        low, high = pixel_bounds(self.image_processor, spec.min_pixels, spec.max_pixels)
        self.size = {"shortest_edge": low, "longest_edge": high}
        self.settings_key = (
            f"min={low},max={high},"
            f"patch={self.image_processor.patch_size},merge={self.image_processor.merge_size}"
        )

    def preprocess(self, images: Sequence[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
        """The processor's ``(pixel_values, image_grid_thw)`` for ``images``. With the
        model on CUDA each image is resized on the host in a thread of its own, the host's
        cores being otherwise idle, and rescaled, normalised and cut into patches on the
        device (:mod:`~qwen_ui.engine.patching`; the whole pass on the host, one image per
        thread, for a processor that cannot be split); with the model on the CPU the
        whole pass runs in this thread, whose cores the model's own threads need."""
        if self.device.type != "cuda":
            return patches(self.image_processor, images, self.size, 1)
        if patching.splits(self.image_processor):
            return patching.device_patches(
                self.image_processor, images, self.size, self.device, patch_threads()
            )
        return patches(self.image_processor, images, self.size, patch_threads())

    def encode(self, image: Image.Image) -> Embedding:
        return self.encode_many([image])[0]

    @torch.inference_mode()
    def encode_many(
        self, images: Sequence[Image.Image], timings: dict[str, float] | None = None
    ) -> list[Embedding]:
        """The embeddings of several images (several requests' too) from one pass of the
        vision tower, which attends within each image; with Qwen3-VL's deepstack features,
        each image's slice of every layer's. ``timings["patches"]``: the seconds their
        pixel patches took (the rest is the tower's)."""
        if not images:
            return []
        start = time.perf_counter()
        pixels, grid = self.preprocess(images)
        if timings is not None:
            timings["patches"] = round(time.perf_counter() - start, 4)
        grid = grid.to(self.device)
        pixels = pixels.to(self.device)
        out = self.model.model.get_image_features(pixels, grid, return_dict=True)
        grids = [(int(t), int(h), int(w)) for t, h, w in grid.tolist()]
        layers = getattr(out, "deepstack_features", None) or []  # Qwen3-VL only
        # image i's [layers, tokens, hidden]: its slice of every deepstack layer
        stacks = [
            torch.stack([layer[i] for layer in layers]) if layers else None
            for i in range(len(grids))
        ]
        return [
            Embedding(features.detach().to("cpu"), thw, None if st is None else st.to("cpu"))
            for features, thw, st in zip(out.pooler_output, grids, stacks, strict=True)
        ]


def patch_threads() -> int:
    """The threads that make a CUDA model's patches: half the host's cores."""
    return max(1, (os.cpu_count() or 2) // 2)


def patches(
    image_processor: Any, images: Sequence[Image.Image], size: dict[str, int], threads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pixel_values, image_grid_thw)`` of ``images``: the processor's own batch when
    ``threads`` is 1 or there is one image, else each image on its own in a pool of up to
    ``threads`` threads (the processor works through a batch an image at a time, with
    little parallelism inside), concatenated in order: the same bytes as the batch."""

    def one(batch: Sequence[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
        out = image_processor(images=list(batch), size=size, return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    if threads <= 1 or len(images) <= 1:
        return one(images)
    parts = patching.each_image(lambda image: one([image]), images, threads)
    return torch.cat([p for p, _ in parts]), torch.cat([g for _, g in parts])


def pixel_bounds(image_processor: Any, low: int, high: int) -> tuple[int, int]:
    """The settings' pixel bounds, tightened by the model's own processor bounds: a model
    trained on small images (the demo) keeps seeing them at the size it was trained on."""
    size = getattr(image_processor, "size", None)
    own_low, own_high = (
        size.get(key) if isinstance(size, dict) else getattr(size, key, None)
        for key in ("shortest_edge", "longest_edge")
    )
    if own_high:
        high = min(high, int(own_high))
    if own_low:
        low = max(low, int(own_low))
    return min(low, high), high


class LanguagePipeline:
    """Chat template + tokenizer → :class:`Prompt`; token ids → text."""

    def __init__(self, processor: Any, model: PreTrainedModel) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.model = model
        self.device = model.device
        self.merge = int(processor.image_processor.merge_size)
        self.image_token_id = int(model.config.image_token_id)
        self.stop_ids = stop_token_ids(model, self.tokenizer)
        self.family = family_of(str(getattr(model.config, "model_type", "")))
        self.patch = int(processor.image_processor.patch_size)
        self._kept = grounding_token_ids(self.tokenizer) if self.family == "qwen2_vl" else {}

    def build_prompt(self, turns: Sequence[Turn], embeddings: Sequence[Embedding]) -> Prompt:
        text = self.processor.apply_chat_template(
            messages(turns), tokenize=False, add_generation_prompt=True
        )
        counts = [e.features.shape[0] for e in embeddings]
        # one placeholder per image tokenized, then widened among the ids: the text around a
        # special token tokenizes alike, and the host skips a thousand pads per image
        short = self.tokenizer(text)["input_ids"]
        expanded = expand_image_ids(short, self.image_token_id, counts)
        ids = torch.tensor([expanded], dtype=torch.long).to(self.device)
        type_ids = (ids == self.image_token_id).to(torch.int32)
        grid = None
        if embeddings:
            grid = torch.tensor([e.grid_thw for e in embeddings], device=self.device)
        deepstack = [e.deepstack for e in embeddings if e.deepstack is not None]
        if deepstack and len(deepstack) != len(embeddings):
            raise UnsupportedModel(reason="cached image embeddings lack deepstack features")
        return Prompt(ids, type_ids, grid, [e.features for e in embeddings], deepstack)

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens`` without special tokens, except Qwen2-VL's box tags."""
        if self._kept:
            return decode_keeping(self._decode_plain, self._kept, tokens)
        return self._decode_plain(tokens)

    def _decode_plain(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=True))


def grounding_token_ids(tokenizer: Any) -> dict[int, str]:
    """Id to text of the grounding tags the tokenizer knows."""
    out: dict[int, str] = {}
    for token in GROUNDING_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            out[token_id] = token
    return out


VISION_ID = "Picture {number}: "  # the label Qwen's chat template writes with add_vision_id


def messages(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """The turns as chat-template messages; a turn with ``first_image`` labels each of its
    images with its number in the conversation (the template's own ``add_vision_id``
    counts from 1 in the prompt, which may hold only the conversation's latest turns)."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        content = image_parts(turn)
        content.append({"type": "text", "text": turn.question})
        out.append({"role": "user", "content": content})
        if turn.answer is not None:
            out.append({"role": "assistant", "content": [{"type": "text", "text": turn.answer}]})
    return out


def image_parts(turn: Turn) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for i in range(turn.image_count):
        if turn.first_image:
            parts.append({"type": "text", "text": VISION_ID.format(number=turn.first_image + i)})
        parts.append({"type": "image"})
    return parts


def expand_image_ids(ids: Sequence[int], pad_id: int, counts: Sequence[int]) -> list[int]:
    """Replace the i-th ``pad_id`` with ``counts[i]`` of them (what the processor does to the
    text's ``<|image_pad|>``, done on the token ids)."""
    places = [i for i, token in enumerate(ids) if token == pad_id]
    if len(places) != len(counts):
        raise UnsupportedModel(reason="image placeholders do not match the images")
    out: list[int] = []
    start = 0
    for place, count in zip(places, counts, strict=True):
        out.extend(ids[start:place])
        out.extend([pad_id] * count)
        start = place + 1
    out.extend(ids[start:])
    return out


def stop_token_ids(model: PreTrainedModel, tokenizer: Any) -> list[int]:
    ids: set[int] = set()
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    for token in ("<|im_end|>", "<|endoftext|>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            ids.add(token_id)
    return sorted(int(i) for i in ids)


@dataclass
class Loaded:
    vision: VisionPipeline
    language: LanguagePipeline
    snapshot_id: str
    seconds: float


class Pipelines:
    """Loads the model once, on first need, and hands out the two pipelines."""

    def __init__(self, store: StoreLike, spec: ModelSpec, status: EngineStatus) -> None:
        self.store = store
        self.spec = spec
        self.status = status
        self._lock = threading.Lock()
        self._loaded: Loaded | None = None
        self._snapshot: SnapshotLike | None = None

    @property
    def is_loaded(self) -> bool:
        return self._loaded is not None

    def snapshot(self) -> SnapshotLike:
        """The store snapshot (cheap: a ref read and a manifest size check)."""
        if self._snapshot is None:
            self._snapshot = self.store.resolve(self.spec.model_id, self.spec.revision)
        return self._snapshot

    def load(self) -> Loaded:
        if self._loaded is not None:
            return self._loaded
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load_once()
            return self._loaded

    def vision(self) -> VisionPipeline:
        return self.load().vision

    def language(self) -> LanguagePipeline:
        return self.load().language

    def _load_once(self) -> Loaded:
        self.status.loading()
        start = time.perf_counter()
        try:
            loaded = self._build()
        except QwenUIError as exc:
            self.status.failed(exc.message("en"))
            raise
        except Exception as exc:
            log.exception("model load failed")
            self.status.failed(f"{type(exc).__name__}: {exc}")
            raise UnsupportedModel(reason=f"{type(exc).__name__}: {exc}") from exc
        loaded.seconds = time.perf_counter() - start
        self.status.ready()
        log.info(
            "model %s@%s loaded in %.1f s on %s",
            self.spec.model_id,
            self.spec.revision,
            loaded.seconds,
            loaded.language.device,
        )
        return loaded

    def _build(self) -> Loaded:
        for name in OFFLINE_ENV:
            os.environ[name] = "1"
        transformers.utils.logging.disable_progress_bar()  # no tqdm bars in server logs
        snapshot = self.snapshot()
        device = pick_device(self.spec.device)
        processor = AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
            snapshot.path, local_files_only=True
        )
        model = load_model(
            Path(snapshot.path),
            device,
            compute_dtype(device),
            self.spec.prefill_dequant_rows,
            self.spec.fuse_projections,
        )
        if self.spec.dense_limit:
            keep_dense_copies(model, self.spec.dense_limit)  # after load: timed on its layers
        if self.spec.triton_int4:
            _keep_triton_copies(model)  # after load: checked and timed on its layers
        if self.spec.vision_attention == "batched":
            vision.install(model)
            if device.type == "cuda":
                vision.pad_mlps(model)  # the aligned matmul kernels
        return Loaded(
            VisionPipeline(processor, model, self.spec),
            LanguagePipeline(processor, model),
            snapshot.id,
            0.0,
        )

    def unload(self) -> None:
        with self._lock:
            self._loaded = None
        self.status.reset()


def _keep_triton_copies(model: PreTrainedModel) -> None:
    # imported here: Triton comes with CUDA builds of torch, which a CPU install may lack
    from qwen_ui.engine.triton_int4 import keep_copies

    keep_copies(model)
