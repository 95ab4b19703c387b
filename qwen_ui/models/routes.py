"""Which model a conversation follows: the one that answered its latest question.

A follow-up without an explicit model goes there (while that model is still offered, or
another revision of it is); a follow-up that names a model moves the conversation to it.
Kept in the state store beside the conversation, for as long as the conversation."""

from __future__ import annotations

from urllib.parse import quote

from qwen_ui.state import State


class ConversationModels:
    def __init__(self, state: State, ttl_s: int) -> None:
        self._store = state.namespace("conv-model")
        self.ttl_s = ttl_s

    @staticmethod
    def _key(owner: str, conversation_id: str) -> str:
        return f"{quote(owner, safe='')}:{quote(conversation_id, safe='')}"

    async def get(self, owner: str, conversation_id: str) -> str | None:
        raw = await self._store.get(self._key(owner, conversation_id))
        return None if raw is None else raw.decode()

    async def remember(self, owner: str, conversation_id: str, model: str) -> None:
        await self._store.set(self._key(owner, conversation_id), model.encode(), self.ttl_s)
