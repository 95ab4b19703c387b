from __future__ import annotations

import pytest

from qwen_ui.engine.conversations import Conversation, ConversationStore, StoredTurn, new_id
from qwen_ui.engine.errors import ConversationNotFound
from qwen_ui.state import State


async def test_turns_and_images_round_trip(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = Conversation(new_id(), "alice")
    await store.append(conv, StoredTurn("什么形状？", "圆形", ["sha1"]), {"sha1": b"img"})
    await store.append(conv, StoredTurn("and?", "two", []), {})
    loaded = await store.get("alice", conv.id)
    assert [t.question for t in loaded.turns] == ["什么形状？", "and?"]
    assert loaded.turns[0].images == ["sha1"]
    assert await store.image("alice", "sha1") == b"img"


async def test_tenants_are_isolated(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = Conversation(new_id(), "alice")
    await store.append(conv, StoredTurn("q", "a", ["sha1"]), {"sha1": b"secret"})
    with pytest.raises(ConversationNotFound):
        await store.get("bob", conv.id)
    with pytest.raises(ConversationNotFound):
        await store.image("bob", "sha1")
    # a tenant name cannot smuggle a separator into another tenant's key space
    with pytest.raises(ConversationNotFound):
        await store.get("alice:" + conv.id, "")


async def test_conversations_expire(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = Conversation(new_id(), "alice")
    await store.append(conv, StoredTurn("q", "a", []), {})
    ttl = await state.namespace("conv").ttl(f"alice:{conv.id}")
    assert ttl is not None and 0 < ttl <= 120
    assert await store.delete("alice", conv.id)
    with pytest.raises(ConversationNotFound):
        await store.get("alice", conv.id)
