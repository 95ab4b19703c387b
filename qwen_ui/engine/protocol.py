"""What the web layer needs of an engine: the local one (``engine.Engine``) and the remote
one (``remote.RemoteEngine``) both provide it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from qwen_ui.engine.conversations import ConversationStore
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.events import Event
from qwen_ui.engine.status import EngineStatus


class AnsweringEngine(Protocol):
    status: EngineStatus
    conversations: ConversationStore

    def start(self) -> None: ...

    async def preload(self) -> None: ...

    async def close(self) -> None: ...

    def ask(self, request: AskRequest) -> AsyncIterator[Event]: ...
