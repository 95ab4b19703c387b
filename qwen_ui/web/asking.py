"""The one way the web layer (Gradio handler and HTTP API) asks the engine on behalf of a
principal: the tenant's daily quota is counted first, and every question leaves exactly
one audit line (tenant, user, request id, outcome, counts, timings — never image bytes,
never the question text, never a secret), whatever way it ends; an answered turn keeps
what it was made of (:mod:`qwen_ui.web.turn_record`)."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field

from qwen_ui.auth.principal import Principal
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.events import Done, Event, Failed
from qwen_ui.errors import EngineNotAvailable
from qwen_ui.services import Services
from qwen_ui.web.turn_record import TurnLog


@dataclass
class _Record:
    """What the audit line says about one question."""

    images: int
    outcome: str = "cancelled"
    counts: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def see(self, event: Event) -> None:
        if isinstance(event, Done):
            self.outcome = "answered"
            self.counts = {
                "prompt_tokens": event.prompt_tokens,
                "completion_tokens": event.completion_tokens,
                "cache_hits": event.cache_hits,
            }
            self.timings = dict(event.timings)
        elif isinstance(event, Failed):
            self.outcome = f"failed:{event.code}"


async def ask_as(
    services: Services, principal: Principal, request: AskRequest
) -> AsyncGenerator[Event, None]:
    """Engine events for ``request``; raises QuotaExceeded before any work starts."""
    if not services.answering:
        raise EngineNotAvailable()
    engine, auth = services.engine, services.auth
    await auth.quotas.count_question(principal)
    record = _Record(images=len(request.images))
    turn, conversations = TurnLog(), services.engine.conversations
    started = time.perf_counter()
    try:
        async with aclosing(engine.ask(request)) as events:
            async for event in events:
                record.see(event)
                turn.see(event)
                if isinstance(event, Done):  # kept with the turn before anyone sees it done
                    await turn.record(conversations, request, event, services.settings)
                yield event
    finally:
        record.timings.setdefault("total", round(time.perf_counter() - started, 3))
        auth.audit.question(
            principal,
            request_id=secrets.token_hex(8),
            outcome=record.outcome,
            counts={"images": record.images, **record.counts},
            timings=record.timings,
        )
