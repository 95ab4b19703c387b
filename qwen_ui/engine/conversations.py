"""Conversations per tenant: earlier turns and the bytes of their images.

Keys carry the tenant, so a tenant asking for another tenant's conversation id finds
nothing (and gets ConversationNotFound). Everything lives in the app's state store
(memory or Redis) with ``conversation_ttl_s``, refreshed on every new turn.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from urllib.parse import quote

from qwen_ui.engine.errors import ConversationNotFound
from qwen_ui.state import State


@dataclass(frozen=True)
class StoredTurn:
    question: str
    answer: str
    images: list[str]  # sha256 of each image, in order


@dataclass
class Conversation:
    id: str
    tenant: str
    turns: list[StoredTurn] = field(default_factory=list)


def new_id() -> str:
    return secrets.token_urlsafe(16)


class ConversationStore:
    def __init__(self, state: State, ttl_s: float) -> None:
        self._turns = state.namespace("conv")
        self._images = state.namespace("conv-img")
        self.ttl_s = ttl_s

    @staticmethod
    def _key(tenant: str, conversation_id: str) -> str:
        return f"{quote(tenant, safe='')}:{quote(conversation_id, safe='')}"

    async def get(self, tenant: str, conversation_id: str) -> Conversation:
        raw = await self._turns.get(self._key(tenant, conversation_id))
        if raw is None:
            raise ConversationNotFound()
        turns = [StoredTurn(**t) for t in json.loads(raw)["turns"]]
        return Conversation(conversation_id, tenant, turns)

    async def image(self, tenant: str, sha256: str) -> bytes:
        data = await self._images.get(self._key(tenant, sha256))
        if data is None:
            raise ConversationNotFound()
        return data

    async def append(
        self, conversation: Conversation, turn: StoredTurn, images: dict[str, bytes]
    ) -> None:
        for sha, data in images.items():
            await self._images.set(self._key(conversation.tenant, sha), data, ttl=self.ttl_s)
        for old in conversation.turns:  # keep earlier images alive as long as the turns
            for sha in old.images:
                await self._images.expire(self._key(conversation.tenant, sha), self.ttl_s)
        conversation.turns.append(turn)
        body = json.dumps({"turns": [asdict(t) for t in conversation.turns]}, ensure_ascii=False)
        key = self._key(conversation.tenant, conversation.id)
        await self._turns.set(key, body.encode(), ttl=self.ttl_s)

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        return await self._turns.delete(self._key(tenant, conversation_id))
