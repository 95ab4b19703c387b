"""Conversations per principal: earlier turns, the images attached to them, and images
attached but not yet answered about.

A conversation belongs to one principal (``owner``: ``tenant/user``, or ``tenant/token:id``
for an API token); its key carries the owner, so another user of the same tenant asking
for its id finds nothing (and gets ConversationNotFound). Image bytes are keyed by tenant
and sha256 (one copy per tenant however many conversations show it). Everything lives in
the app's state store (memory or Redis) with ``conversation_ttl_s``, refreshed on every
change.

The conversation is the only truth about which images a question sees: images are
*attached* as soon as they pass the checks (``pending``), so a turn that is stopped, fails
or has no question keeps them, and the next question sees them; a finished turn takes the
pending images as its own.
"""

from __future__ import annotations

import json
import secrets
import time
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
    owner: str = ""  # the principal's label, tenant/user
    turns: list[StoredTurn] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # attached, not yet answered about
    created: float = field(default_factory=time.time)

    @property
    def images(self) -> list[str]:
        """Every image of the conversation in the order it was attached (numbered from 1)."""
        return [sha for turn in self.turns for sha in turn.images] + list(self.pending)

    def to_json(self) -> bytes:
        body = {
            "tenant": self.tenant,
            "owner": self.owner,
            "created": self.created,
            "turns": [asdict(t) for t in self.turns],
            "pending": self.pending,
        }
        return json.dumps(body, ensure_ascii=False).encode()


def new_id() -> str:
    return secrets.token_urlsafe(16)


def owner_of(tenant: str, user: str) -> str:
    return f"{tenant}/{user}"


class ConversationStore:
    def __init__(self, state: State, ttl_s: float) -> None:
        self._turns = state.namespace("conv")
        self._images = state.namespace("conv-img")
        self.ttl_s = ttl_s

    @staticmethod
    def _key(scope: str, name: str) -> str:
        return f"{quote(scope, safe='')}:{quote(name, safe='')}"

    async def get(self, owner: str, conversation_id: str) -> Conversation:
        raw = await self._turns.get(self._key(owner, conversation_id))
        if raw is None:
            raise ConversationNotFound()
        body = json.loads(raw)
        return Conversation(
            conversation_id,
            body.get("tenant") or owner.partition("/")[0],
            owner,
            [StoredTurn(**t) for t in body["turns"]],
            list(body.get("pending", [])),
            float(body.get("created", 0.0)),
        )

    async def create(self, tenant: str, owner: str) -> Conversation:
        """A new, empty conversation, stored now (so its id holds even if no turn ends)."""
        conversation = Conversation(new_id(), tenant, owner)
        await self._save(conversation)
        return conversation

    async def image(self, tenant: str, sha256: str) -> bytes:
        data = await self._images.get(self._key(tenant, sha256))
        if data is None:
            raise ConversationNotFound()
        return data

    async def attach(self, conversation: Conversation, images: dict[str, bytes]) -> None:
        """Add checked images to the conversation before anything is asked about them."""
        await self._keep_images(conversation, images)
        conversation.pending.extend(images)
        await self._save(conversation)

    async def append(
        self, conversation: Conversation, turn: StoredTurn, images: dict[str, bytes]
    ) -> None:
        """Record an answered turn; images attached earlier (``pending``) are its own too."""
        await self._keep_images(conversation, images)
        pending = [sha for sha in conversation.pending if sha not in turn.images]
        own = pending + [sha for sha in turn.images]
        conversation.turns.append(StoredTurn(turn.question, turn.answer, own))
        conversation.pending = []
        await self._save(conversation)

    async def delete(self, owner: str, conversation_id: str) -> bool:
        return await self._turns.delete(self._key(owner, conversation_id))

    async def _keep_images(self, conversation: Conversation, images: dict[str, bytes]) -> None:
        for sha, data in images.items():
            await self._images.set(self._key(conversation.tenant, sha), data, ttl=self.ttl_s)
        for sha in conversation.images:  # keep earlier images alive as long as the turns
            await self._images.expire(self._key(conversation.tenant, sha), self.ttl_s)

    async def _save(self, conversation: Conversation) -> None:
        key = self._key(conversation.owner, conversation.id)
        await self._turns.set(key, conversation.to_json(), ttl=self.ttl_s)
