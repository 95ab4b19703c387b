"""Stage events: what the engine reports while it works, as plain JSON-able dataclasses.

Every event serialises to ``{"type": "stage" | "token" | "done" | "failed", ...}``. The UI,
the HTTP API (newline-delimited JSON) and the tests all consume the same objects.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from qwen_ui.errors import QwenUIError
from qwen_ui.lang import Lang
from qwen_ui.texts import t

StageName = Literal[
    "queued",
    "downscaled",
    "loading_model",
    "decoding",
    "encoding",
    "sending",
    "waiting",
    "answering",
]

# Where each stage sits on the overall progress bar (start, end), in the order they run.
_SPANS: dict[str, tuple[float, float]] = {
    "decoding": (0.0, 0.15),
    "downscaled": (0.15, 0.15),
    "queued": (0.15, 0.15),
    "loading_model": (0.15, 0.2),
    "encoding": (0.2, 0.5),
    "sending": (0.2, 0.3),  # remote engine: the request goes out
    "waiting": (0.3, 0.5),  # remote engine: until its first token
    "answering": (0.5, 0.5),
}


class Event:
    """Base of all events."""

    type: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Stage(Event):
    """A stage of the work started (or made progress): ``index``/``total`` count images."""

    stage: StageName
    index: int = 0
    total: int = 0
    cached: bool = False
    ahead: int = 0
    progress: float = 0.0
    wait_s: float = 0.0  # "queued": estimated wait (0: unknown)
    max_pixels: int = 0  # "downscaled": the request's lower pixel bound per image
    prompt_tokens: int = 0  # "answering": the prompt's length in tokens (0: unknown)
    type: str = field(default="stage", init=False)

    @classmethod
    def at(cls, stage: StageName, index: int = 0, total: int = 0, **kw: Any) -> Stage:
        """The stage as it starts (image ``index`` of ``total``, 1-based)."""
        start, end = _SPANS[stage]
        fraction = (index - 1) / total if total else 0.0
        return cls(stage, index, total, progress=round(start + (end - start) * fraction, 4), **kw)

    def label(self, lang: str = "en") -> str:
        chosen: Lang = "zh" if lang == "zh" else "en"
        text = t(
            f"stage_{self.stage}",
            chosen,
            index=self.index,
            total=self.total,
            position=self.ahead + 1,  # "queued": the place in line (1: next)
            max_pixels=self.max_pixels,
        )
        if self.stage == "queued" and self.wait_s > 0:
            text += t("stage_wait", chosen, wait_s=self.wait_s)
        return text + (t("stage_cached", chosen) if self.cached else "")


@dataclass(frozen=True)
class Token(Event):
    """New answer text (may be empty while a multi-byte character completes)."""

    text: str
    count: int
    progress: float
    type: str = field(default="token", init=False)


@dataclass(frozen=True)
class Done(Event):
    """The answer is complete. ``timings`` are seconds per stage; ``ttft`` to first token.

    ``model``: the model that answered, ``OWNER/NAME@REV``.
    ``boxes``: where the answer located things, ``{"image": i, "label": ..., "box": [x1, y1,
    x2, y2]}`` with ``i`` the image's 1-based number in the conversation (a stateless
    request's: in its messages' images) and the box in that file's own pixels (see
    :mod:`qwen_ui.engine.box_mapping`); ``answer_text``: the answer with those
    boxes written as their labels (``answer`` itself when it has none).
    """

    answer: str
    conversation_id: str
    prompt_tokens: int
    completion_tokens: int
    images: int
    cache_hits: int
    finish_reason: Literal["stop", "length"]
    timings: dict[str, float]
    boxes: list[dict[str, Any]] = field(default_factory=list)
    answer_text: str = ""
    progress: float = 1.0
    images_seen: int = 0  # images in the prompt (0: the answer used no image)
    model: str = ""  # OWNER/NAME@REV that answered (set by the model registry)
    type: str = field(default="done", init=False)


@dataclass(frozen=True)
class Failed(Event):
    """The request ended with a typed error; ``message`` is in the request's language."""

    code: str
    message: str
    status: int
    retry_after: float | None = None  # busy errors: seconds after which to try again
    conversation_id: str | None = None  # set when the conversation holds this turn's images
    type: str = field(default="failed", init=False)

    @classmethod
    def of(cls, error: QwenUIError, lang: str = "en") -> Failed:
        retry = None if error.retry_after is None else round(error.retry_after, 1)
        return cls(error.code, error.message(lang), error.status, retry)


def answering_progress(count: int, max_new_tokens: int) -> float:
    """Progress during the answer: 0.5 → 1.0 as tokens approach the cap."""
    return round(0.5 + 0.5 * min(1.0, count / max(1, max_new_tokens)), 4)
