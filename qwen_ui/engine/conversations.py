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
    title: str = ""  # set by the owner; the first question when empty
    updated: float = field(default_factory=time.time)

    @property
    def images(self) -> list[str]:
        """Every image of the conversation in the order it was attached (numbered from 1)."""
        return [sha for turn in self.turns for sha in turn.images] + list(self.pending)

    @property
    def display_title(self) -> str:
        return self.title or (self.turns[0].question if self.turns else "")

    def summary(self) -> Summary:
        shas = self.images
        return Summary(self.id, self.display_title, self.updated, shas[:THUMBNAILS], len(shas))

    def to_json(self) -> bytes:
        body = {
            "tenant": self.tenant,
            "owner": self.owner,
            "created": self.created,
            "updated": self.updated,
            "title": self.title,
            "turns": [asdict(t) for t in self.turns],
            "pending": self.pending,
        }
        return json.dumps(body, ensure_ascii=False).encode()


THUMBNAILS = 3  # images of a conversation shown in the list
TITLE_CHARS = 80


@dataclass(frozen=True)
class Summary:
    """A conversation as the owner's list shows it."""

    id: str
    title: str
    updated: float  # seconds since the epoch
    thumbnails: list[str]  # sha256 of its first images
    images: int = 0  # how many images it holds


def new_id() -> str:
    return secrets.token_urlsafe(16)


def owner_of(tenant: str, user: str) -> str:
    return f"{tenant}/{user}"


class ConversationStore:
    def __init__(self, state: State, ttl_s: float, max_per_owner: int = 50) -> None:
        self._turns = state.namespace("conv")
        self._images = state.namespace("conv-img")
        self._lists = state.namespace("conv-list")
        self.ttl_s = ttl_s
        self.max_per_owner = max_per_owner

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
            str(body.get("title", "")),
            float(body.get("updated", body.get("created", 0.0))),
        )

    async def owned(self, owner: str) -> list[Summary]:
        """The owner's conversations, the latest first (expired ones left out)."""
        raw = await self._lists.get(quote(owner, safe=""))
        if raw is None:
            return []
        oldest = time.time() - self.ttl_s
        found = [Summary(**item) for item in json.loads(raw)]
        return [item for item in found if item.updated >= oldest]

    async def rename(self, owner: str, conversation_id: str, title: str) -> Conversation:
        conversation = await self.get(owner, conversation_id)
        conversation.title = " ".join(title.split())[:TITLE_CHARS]
        await self._save(conversation, touch=False)
        return conversation

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

    async def drop_last_turn(self, conversation: Conversation) -> StoredTurn | None:
        """Take back the last answered turn (to answer its question again, or an edited
        one): its images stay attached, pending again, first, so they keep their numbers
        and the next question sees them. None when there is no answered turn."""
        if not conversation.turns:
            return None
        turn = conversation.turns.pop()
        conversation.pending = [*turn.images, *conversation.pending]
        await self._save(conversation)
        return turn

    async def delete(self, owner: str, conversation_id: str) -> bool:
        await self._write_list(
            owner, [s for s in await self.owned(owner) if s.id != conversation_id]
        )
        return await self._turns.delete(self._key(owner, conversation_id))

    async def _keep_images(self, conversation: Conversation, images: dict[str, bytes]) -> None:
        for sha, data in images.items():
            await self._images.set(self._key(conversation.tenant, sha), data, ttl=self.ttl_s)
        for sha in conversation.images:  # keep earlier images alive as long as the turns
            await self._images.expire(self._key(conversation.tenant, sha), self.ttl_s)

    async def _save(self, conversation: Conversation, touch: bool = True) -> None:
        """Store the conversation and its line in the owner's list; beyond
        ``max_per_owner`` the least recently used conversations are deleted."""
        if touch:
            conversation.updated = time.time()
        key = self._key(conversation.owner, conversation.id)
        await self._turns.set(key, conversation.to_json(), ttl=self.ttl_s)
        others = [s for s in await self.owned(conversation.owner) if s.id != conversation.id]
        listed = sorted([conversation.summary(), *others], key=lambda s: -s.updated)
        for dropped in listed[self.max_per_owner :]:
            await self._turns.delete(self._key(conversation.owner, dropped.id))
        await self._write_list(conversation.owner, listed[: self.max_per_owner])

    async def _write_list(self, owner: str, items: list[Summary]) -> None:
        body = json.dumps([asdict(item) for item in items], ensure_ascii=False).encode()
        await self._lists.set(quote(owner, safe=""), body, ttl=self.ttl_s)
