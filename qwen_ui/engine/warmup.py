"""Start-up of the local engine: load the model, then answer one synthetic question.

With ``preload`` on (``auto``: on CUDA) the server loads the model in the background as
soon as it starts, then asks the engine a 1-image question of its own (a drawn
1024x768 picture, the server's default ``max_new_tokens``, greedy) through
:meth:`~qwen_ui.engine.engine.Engine.ask`, the path every user takes. That first answer
compiles the dequantized prefill's kernels, records the prefill graph of its length bucket
and compiles the decode step for its cache length, so no user's question pays for them.
A worker that batches questions (``max_batch`` > 1) gets the question 1, 2, 4, ... at
once, up to ``max_batch``, so that the decode step of each batch-size bucket is recorded;
every question has a picture of its own (the shapes moved a little), so each round's
newcomers also go through the vision tower together, as a class's first questions do,
and the device memory that takes is set aside before the first user asks.
The engine status reads ``warming`` meanwhile; ``/readyz`` turns ready when the warm-up has
answered; ``/healthz`` answers throughout. A warm-up that fails (a typed error) is logged
and leaves readiness to the first real answer.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time

from PIL import Image, ImageDraw

from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Event, Failed

log = logging.getLogger(__name__)

WARM_UP_TENANT = "qwen-ui-warm-up"  # in audit lines and metrics; holds no conversation
WARM_UP_SIZE = (1024, 768)
WARM_UP_QUESTION = "What shapes are in this picture, and what colour is each?"


def warm_up_image(size: tuple[int, int] = WARM_UP_SIZE, variant: int = 0) -> bytes:
    """A PNG of a few coloured shapes on a grey ground, drawn here (nothing fetched);
    each ``variant`` moves the rectangle's right edge, so no two are the same picture."""
    width, height = size
    image = Image.new("RGB", size, (200, 200, 200))
    draw = ImageDraw.Draw(image)
    right = width // 3 + variant % (width // 8)
    draw.rectangle((width // 10, height // 8, right, height // 2), fill=(220, 40, 40))
    draw.ellipse((width // 2, height // 4, 4 * width // 5, 3 * height // 4), fill=(40, 80, 220))
    draw.polygon(
        [
            (width // 5, 7 * height // 8),
            (width // 3, 5 * height // 8),
            (width // 2, 7 * height // 8),
        ],
        fill=(40, 170, 60),
    )
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def warm_up_request(max_new_tokens: int, variant: int = 0) -> AskRequest:
    """The warm-up question about picture ``variant``: stateless (no conversation is
    stored), greedy."""
    return AskRequest(
        tenant=WARM_UP_TENANT,
        question=WARM_UP_QUESTION,
        images=[warm_up_image(variant=variant)],
        options=AskOptions(max_new_tokens=max_new_tokens, temperature=0.0),
        history=(),
        request_id="warm-up",
    )


BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # the batch sizes whose decode steps are recorded


def warm_up_rounds(max_batch: int) -> list[int]:
    """How many warm-up questions to ask at once, round after round: each batch-size
    bucket up to ``max_batch`` (a continuously batching worker records its decode step
    per bucket), or one question when the worker answers one at a time."""
    return [b for b in BATCH_BUCKETS if b < max_batch] + [max(1, max_batch)]


def batch_limit(engine: Engine) -> int:
    """The most questions the engine answers at once (``max_batch``; 1 without batching)."""
    return int(getattr(engine.settings, "max_batch", 1))


async def start_up(engine: Engine) -> Event | None:
    """Load the model, then answer the warm-up questions (:func:`warm_up_rounds`); the
    status reads ``warming`` in between and ``ready`` after. Returns the last warm-up
    answer's last event (None when the model did not load: the status says why)."""
    await engine.preload()
    if not engine.pipelines.is_loaded:
        return None
    engine.status.warming()
    t0 = time.perf_counter()
    last: Event | None = None
    asked = 0
    try:
        for size in warm_up_rounds(batch_limit(engine)):
            ends = await asyncio.gather(*(_answer(engine, asked + i) for i in range(size)))
            asked += size
            last = next((e for e in ends if not isinstance(e, Done)), ends[-1])
            if not isinstance(last, Done):
                break
    finally:
        engine.status.ready()
    seconds = time.perf_counter() - t0
    if isinstance(last, Done):
        log.info(
            "warm-up answered in %.1f s (%d prompt tokens, %d new tokens); ready",
            seconds,
            last.prompt_tokens,
            last.completion_tokens,
        )
    else:
        code = last.code if isinstance(last, Failed) else "no answer"
        log.warning("warm-up failed after %.1f s (%s); ready after the first answer", seconds, code)
    return last


async def _answer(engine: Engine, variant: int) -> Event | None:
    """One warm-up question's last event."""
    last: Event | None = None
    async for event in engine.ask(warm_up_request(engine.settings.max_new_tokens, variant)):
        last = event
    return last
