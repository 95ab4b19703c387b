from __future__ import annotations

import pytest

from qwen_ui.engine.conversations import Conversation, ConversationStore, StoredTurn, new_id
from qwen_ui.engine.errors import ConversationNotFound
from qwen_ui.state import State

ALICE = "acme/alice"


async def test_turns_and_images_round_trip(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = Conversation(new_id(), "acme", ALICE)
    await store.append(conv, StoredTurn("什么形状？", "圆形", ["sha1"]), {"sha1": b"img"})
    await store.append(conv, StoredTurn("and?", "two", []), {})
    loaded = await store.get(ALICE, conv.id)
    assert [t.question for t in loaded.turns] == ["什么形状？", "and?"]
    assert loaded.turns[0].images == ["sha1"] and loaded.tenant == "acme"
    assert await store.image("acme", "sha1") == b"img"


async def test_attached_images_wait_for_the_next_answered_turn(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = await store.create("acme", ALICE)
    await store.append(conv, StoredTurn("q1", "a1", ["s1"]), {"s1": b"1"})
    await store.attach(conv, {"s2": b"2", "s3": b"3"})  # a stopped turn
    loaded = await store.get(ALICE, conv.id)
    assert loaded.pending == ["s2", "s3"] and loaded.images == ["s1", "s2", "s3"]
    await store.attach(loaded, {"s4": b"4"})  # the next submit adds one more
    await store.append(loaded, StoredTurn("q2", "a2", []), {})
    again = await store.get(ALICE, conv.id)
    assert again.pending == [] and again.turns[1].images == ["s2", "s3", "s4"]
    assert again.images == ["s1", "s2", "s3", "s4"]


async def test_dropping_the_last_turn_keeps_its_images_pending(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = await store.create("acme", ALICE)
    await store.append(conv, StoredTurn("q1", "a1", ["s1"]), {"s1": b"1"})
    await store.attach(conv, {"s2": b"2", "s3": b"3"})
    await store.append(conv, StoredTurn("q2", "a2", []), {})
    await store.attach(conv, {"s4": b"4"})  # attached after q2, not yet asked about
    dropped = await store.drop_last_turn(conv)
    assert dropped == StoredTurn("q2", "a2", ["s2", "s3"])
    loaded = await store.get(ALICE, conv.id)
    assert [t.question for t in loaded.turns] == ["q1"]
    assert loaded.pending == ["s2", "s3", "s4"]  # numbered as before: images 2, 3, 4
    assert loaded.images == ["s1", "s2", "s3", "s4"]
    assert await store.image("acme", "s3") == b"3"
    await store.append(loaded, StoredTurn("q2 again", "a2'", []), {})  # asked again
    again = await store.get(ALICE, conv.id)
    assert again.turns[1] == StoredTurn("q2 again", "a2'", ["s2", "s3", "s4"])
    assert await store.drop_last_turn(again) is not None
    assert await store.drop_last_turn(again) is not None
    assert await store.drop_last_turn(again) is None  # nothing left to take back
    emptied = await store.get(ALICE, conv.id)
    assert emptied.turns == [] and emptied.images == ["s1", "s2", "s3", "s4"]


async def test_another_user_of_the_tenant_finds_nothing(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = await store.create("acme", ALICE)
    with pytest.raises(ConversationNotFound):
        await store.get("acme/bob", conv.id)
    with pytest.raises(ConversationNotFound):
        await store.get("acme/token:t1", conv.id)
    assert not await store.delete("acme/bob", conv.id)
    assert (await store.get(ALICE, conv.id)).id == conv.id


async def test_tenants_are_isolated(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = Conversation(new_id(), "alice", "alice/u")
    await store.append(conv, StoredTurn("q", "a", ["sha1"]), {"sha1": b"secret"})
    with pytest.raises(ConversationNotFound):
        await store.get("bob/u", conv.id)
    with pytest.raises(ConversationNotFound):
        await store.image("bob", "sha1")
    # an owner name cannot smuggle a separator into another owner's key space
    with pytest.raises(ConversationNotFound):
        await store.get("alice/u:" + conv.id, "")


async def test_conversations_expire(state: State) -> None:
    store = ConversationStore(state, ttl_s=120)
    conv = Conversation(new_id(), "alice", "alice/u")
    await store.append(conv, StoredTurn("q", "a", []), {})
    ttl = await state.namespace("conv").ttl(f"alice%2Fu:{conv.id}")
    assert ttl is not None and 0 < ttl <= 120
    assert await store.delete("alice/u", conv.id)
    with pytest.raises(ConversationNotFound):
        await store.get("alice/u", conv.id)


async def test_the_owner_lists_renames_and_deletes(state: State) -> None:
    store = ConversationStore(state, ttl_s=120, max_per_owner=2)
    first = await store.create("acme", ALICE)
    await store.append(first, StoredTurn("How many circles?", "2", ["s1", "s2"]), {})
    second = await store.create("acme", ALICE)
    listed = await store.owned(ALICE)
    assert [s.id for s in listed] == [second.id, first.id]  # the latest first
    assert listed[1].title == "How many circles?" and listed[1].images == 2
    await store.rename(ALICE, first.id, "  Circles \n count ")
    assert (await store.owned(ALICE))[1].title == "Circles count"
    assert await store.owned("acme/bob") == []
    third = await store.create("acme", ALICE)  # beyond max_per_owner: the oldest goes
    assert [s.id for s in await store.owned(ALICE)] == [third.id, second.id]
    with pytest.raises(ConversationNotFound):
        await store.get(ALICE, first.id)
    assert await store.delete(ALICE, third.id)
    assert [s.id for s in await store.owned(ALICE)] == [second.id]
