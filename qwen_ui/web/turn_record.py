"""What an answer was made of, kept with its turn in the conversation: the stages it went
through, its timings, the boxes it located (on the image files' own pixels, each naming its
image by sha256), the answer with boxes as labels, the model that answered and when.

The engine stores the turn (question, answer, images) as it finishes; this record is added
by the one path the page and the API ask through (:func:`qwen_ui.web.asking.ask_as`),
before the ``done`` event is passed on, so an export made right after an answer holds it.
Stateless requests (``/v1/chat/completions``) store nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from qwen_ui.engine.conversations import ConversationStore
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.errors import ConversationNotFound
from qwen_ui.engine.events import Done, Event, Stage
from qwen_ui.settings import Settings

log = logging.getLogger(__name__)
_STAGE_KEYS = ("stage", "index", "total", "cached", "ahead", "wait_s", "max_pixels")


def model_of(done: Done, settings: Settings) -> str:
    """The model that answered: the ``done`` event's own ``model`` where it names one,
    else the configured one (``OWNER/NAME@REVISION``, or the remote's name)."""
    named = getattr(done, "model", "")
    if isinstance(named, str) and named:
        return named
    if settings.engine == "openai":
        return settings.remote_model
    return f"{settings.model_id}@{settings.model_revision}"


def stage_entry(stage: Stage) -> dict[str, Any]:
    """A stage as the record keeps it: its name and the facts its label shows (the label
    itself is made in the reader's language)."""
    body = stage.to_dict()
    return {key: body[key] for key in _STAGE_KEYS if body.get(key)} | {"stage": stage.stage}


def boxes_on_files(boxes: Sequence[dict[str, Any]], images: Sequence[str]) -> list[dict[str, Any]]:
    """The ``done`` event's boxes (``image``: 1-based in the conversation's ``images``,
    their sha256 in order) with their image named by sha256, the way the conversation
    names its images."""
    out = []
    for box in boxes:
        index = int(box["image"]) - 1
        if 0 <= index < len(images):
            out.append({"sha256": images[index], "label": box["label"], "box": list(box["box"])})
    return out


@dataclass
class TurnLog:
    """The stages of one answer, as they pass."""

    stages: list[dict[str, Any]] = field(default_factory=list)

    def see(self, event: Event) -> None:
        if isinstance(event, Stage):
            self.stages.append(stage_entry(event))

    async def record(
        self, store: ConversationStore, request: AskRequest, done: Done, settings: Settings
    ) -> None:
        """Add the record to the conversation's last turn (nothing for stateless calls).
        The record adds to an answer already stored: when the state store fails here, the
        answer still goes out, without its record (logged)."""
        if request.history is not None or not done.conversation_id:
            return
        try:
            kept = await self._describe(store, request, done, settings)
        except Exception as exc:  # any store failure: the answer goes on
            # the type only: a store's message may hold its address and credentials
            log.warning(
                "request %s: its turn was not recorded (%s)", request.request_id, type(exc).__name__
            )
            return
        if not kept:
            log.info("request %s: its turn changed before it was recorded", request.request_id)

    async def _describe(
        self, store: ConversationStore, request: AskRequest, done: Done, settings: Settings
    ) -> bool:
        images: list[str] = []
        if done.boxes:  # numbered in the conversation's images
            try:
                images = (await store.get(request.owner, done.conversation_id)).images
            except ConversationNotFound:
                return False
        return await store.describe(
            request.owner,
            done.conversation_id,
            done.answer,
            answer_text=done.answer_text if done.answer_text != done.answer else "",
            boxes=boxes_on_files(done.boxes, images),
            stages=self.stages,
            timings=dict(done.timings),
            model=model_of(done, settings),
            answered=time.time(),
        )
