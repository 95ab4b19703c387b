"""The model registry with stand-in engines: picking, conversations, LRU unloading under a
small weights budget, busy models never unloaded, switching and moved refs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import pytest

from qwen_ui.admission.controller import AdmissionController
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.events import Done, Event, Failed, Stage
from qwen_ui.engine.facts import placement
from qwen_ui.engine.status import EngineStatus
from qwen_ui.errors import ModelNotInstalled
from qwen_ui.models.errors import ModelNeverFits, SwitchRefused, UnknownModel
from qwen_ui.models.memory import WeightLedger
from qwen_ui.models.refs import ModelRef
from qwen_ui.models.registry import ModelRegistry, Room
from qwen_ui.models.routes import ConversationModels
from qwen_ui.models.served import Entry, Served
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState

A, B, C = "acme/a@v1", "acme/b@v1", "acme/c@v1"
MB = 1024 * 1024


class FakeEngine:
    """Answers after ``gate`` opens; makes room for its weights as the real one does (in
    its admission reservation, after the input checks)."""

    def __init__(self, name: str, key: int, room: Room, status: EngineStatus) -> None:
        self.name, self.key, self.room, self.status = name, key, room, status
        self.gate = asyncio.Event()
        self.gate.set()
        self.closed = False
        self.asked = 0

    async def ask(self, request: AskRequest) -> AsyncGenerator[Event]:
        self.asked += 1
        await self.room(self.key, lambda ahead, wait_s=0.0: None)
        self.status.ready()
        yield Stage.at("answering")
        await self.gate.wait()
        conversation = request.conversation_id or f"new-{self.asked}"
        yield Done(self.name, conversation, 1, 1, 0, 0, "stop", {})

    async def preload(self) -> None:
        await self.room(self.key, lambda ahead, wait_s=0.0: None)
        self.status.ready()

    async def close(self) -> None:
        self.closed = True


class FakeHost:
    def __init__(self, sizes: dict[str, int], dense: dict[str, int] | None = None) -> None:
        self.sizes = sizes  # checkpoint bytes per OWNER/NAME@REV
        self.dense = dense or {}  # dense copies of int4 weights the engine would keep
        self.snapshots = {name: "snap-1" for name in sizes}
        self.engines: list[FakeEngine] = []

    def serve(self, entry: Entry, key: int, room: Room) -> Served:
        status = EngineStatus()
        engine = FakeEngine(entry.name, key, room, status)
        self.engines.append(engine)
        return Served(entry.name, engine, None, key, status)  # type: ignore[arg-type]

    def snapshot(self, ref: ModelRef) -> tuple[str, int, int]:
        if str(ref) not in self.sizes:
            raise ModelNotInstalled(model_id=ref.model_id, revision=ref.revision, command="x")
        return self.snapshots[str(ref)], self.sizes[str(ref)], self.dense.get(str(ref), 0)

    async def warm(self, engine: FakeEngine) -> None:
        await engine.preload()

    def release_memory(self) -> None:
        return None

    def live(self, name: str) -> list[FakeEngine]:
        return [e for e in self.engines if e.name == name and not e.closed]


def registry(
    tmp_path: Path, names: list[str], host: FakeHost, limit_mb: int = 0, wait_s: float = 5.0
) -> ModelRegistry:
    settings = Settings(home=tmp_path, device="cpu", model_memory_bytes=limit_mb * MB)
    line = AdmissionController(settings.cpu_budget_bytes, queue_max=8, timeout_s=5)
    ledger = WeightLedger(settings, placement(settings), line)
    routes = ConversationModels(MemoryState(), 3600)
    return ModelRegistry(names, host, ledger, routes, wait_s)


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)


def question(conversation: str | None = None) -> AskRequest:
    return AskRequest(tenant="t", user="u", question="how many?", conversation_id=conversation)


async def answer(models: ModelRegistry, request: AskRequest, model: str | None = None) -> Done:
    events = [e async for e in models.ask(request, model)]
    assert isinstance(events[-1], Done), events[-1]
    return events[-1]


async def test_explicit_model_default_and_unknown(tmp_path: Path) -> None:
    models = registry(tmp_path, [A, B], FakeHost({A: MB, B: MB}))
    assert (await answer(models, question())).model == A
    assert (await answer(models, question(), B)).model == B
    assert (await answer(models, question(), "acme/b")).model == B  # its offered revision
    with pytest.raises(UnknownModel) as raised:
        models.entry("acme/zzz@v1")
    assert raised.value.status == 404 and A in raised.value.message("en")
    assert "此处不提供模型" in raised.value.message("zh")
    events = [e async for e in models.ask(question(), "nope/x@1")]
    assert isinstance(events[-1], Failed) and events[-1].code == "model_not_found"


def test_an_unknown_revision_of_an_offered_model_is_unknown(tmp_path: Path) -> None:
    models = registry(tmp_path, [A, B], FakeHost({A: MB, B: MB}))
    for model in ("acme/b@other", "acme/b@", " acme/b@zzz "):
        with pytest.raises(UnknownModel) as raised:
            models.entry(model)
        assert A in raised.value.message("en") and B in raised.value.message("en")
    assert models.entry(f" {B} ").name == B


async def test_a_follow_up_stays_on_its_conversations_model(tmp_path: Path) -> None:
    models = registry(tmp_path, [A, B], FakeHost({A: MB, B: MB}))
    first = await answer(models, question(), B)
    follow_up = await answer(models, question(first.conversation_id))
    assert follow_up.model == B  # not the default: the conversation started on B
    moved = await answer(models, question(first.conversation_id), A)  # the user picks A
    assert moved.model == A
    assert (await answer(models, question(first.conversation_id))).model == A


async def test_least_recently_used_idle_model_is_unloaded(tmp_path: Path) -> None:
    host = FakeHost({A: 4 * MB, B: 4 * MB, C: 4 * MB})
    models = registry(tmp_path, [A, B, C], host, limit_mb=9)  # two fit, not three
    await answer(models, question(), A)
    await answer(models, question(), B)
    await answer(models, question(), A)  # B is now the least recently used
    assert [models.entries[n].state.value for n in (A, B, C)] == ["ready", "ready", "not_loaded"]
    await answer(models, question(), C)
    assert [models.entries[n].state.value for n in (A, B, C)] == ["ready", "not_loaded", "ready"]
    assert host.live(B) == [] and len(host.live(A)) == len(host.live(C)) == 1
    assert models.ledger is not None and models.ledger.total == 8 * MB


async def test_dense_copies_count_with_the_weights_before_loading(tmp_path: Path) -> None:
    host = FakeHost({A: 3 * MB, B: 3 * MB}, dense={B: 3 * MB})
    models = registry(tmp_path, [A, B], host, limit_mb=8)  # A and B's checkpoints would fit
    await answer(models, question(), A)
    await answer(models, question(), B)  # B with its copies does not fit beside A
    assert [models.entries[n].state.value for n in (A, B)] == ["not_loaded", "ready"]
    assert models.ledger is not None and models.ledger.total == 3 * MB + 3 * MB


async def test_a_busy_model_is_never_unloaded_the_load_waits(tmp_path: Path) -> None:
    host = FakeHost({A: 6 * MB, B: 6 * MB})
    models = registry(tmp_path, [A, B], host, limit_mb=8)  # one at a time
    await answer(models, question(), A)
    engine_a = host.live(A)[0]
    engine_a.gate.clear()  # A's next answer holds it busy
    busy = asyncio.create_task(answer(models, question(), A))
    await asyncio.sleep(0.05)
    waiting = asyncio.create_task(answer(models, question(), B))
    await asyncio.sleep(0.3)
    assert not waiting.done() and not engine_a.closed  # B waits; A keeps answering
    engine_a.gate.set()
    assert (await busy).model == A
    assert (await waiting).model == B
    assert engine_a.closed and models.entries[A].state.value == "not_loaded"


async def test_a_load_waits_at_most_wait_s_then_is_busy(tmp_path: Path) -> None:
    host = FakeHost({A: 6 * MB, B: 6 * MB})
    models = registry(tmp_path, [A, B], host, limit_mb=8, wait_s=0.3)
    await answer(models, question(), A)
    host.live(A)[0].gate.clear()
    busy = asyncio.create_task(answer(models, question(), A))
    await asyncio.sleep(0.05)
    with pytest.raises(Exception) as raised:  # the fake engine does not catch: the error
        [e async for e in models.ask(question(), B)]
    assert getattr(raised.value, "code", None) == "models_busy"
    host.live(A)[0].gate.set()
    await busy


async def test_a_model_larger_than_the_limit_alone_is_refused(tmp_path: Path) -> None:
    models = registry(tmp_path, [A], FakeHost({A: 20 * MB}), limit_mb=8)
    with pytest.raises(ModelNeverFits):
        [e async for e in models.ask(question())]


async def test_activate_replaces_a_revision_and_drains_the_old_engine(tmp_path: Path) -> None:
    a2 = "acme/a@v2"
    host = FakeHost({A: MB, B: MB, a2: MB})
    models = registry(tmp_path, [A, B], host)
    await answer(models, question())
    old = host.live(A)[0]
    old.gate.clear()
    running = asyncio.create_task(answer(models, question()))  # started on A@v1
    await asyncio.sleep(0.05)
    report = await models.activate(a2)
    assert report["models"] == [a2, B] and report["retired"] == [A]
    assert {"model": A, "state": "draining", "default": False, "in_flight": 1} in models.health()
    assert (await answer(models, question())).model == a2  # new requests: the new default
    old.gate.set()
    assert (await running).model == A  # finished where it started
    await until(lambda: all(row["model"] != A for row in models.health()))
    assert old.closed


async def test_activate_refuses_what_is_not_installed_or_not_a_ref(tmp_path: Path) -> None:
    models = registry(tmp_path, [A], FakeHost({A: MB}))
    with pytest.raises(ModelNotInstalled):
        await models.activate("acme/new@v1")
    with pytest.raises(SwitchRefused):
        await models.activate("not a ref")
    assert models.names == [A]


async def test_reload_serves_a_moved_ref_from_a_new_engine(tmp_path: Path) -> None:
    host = FakeHost({A: MB})
    models = registry(tmp_path, [A], host)
    await answer(models, question())
    first = host.live(A)[0]
    host.snapshots[A] = "snap-2"  # `qwen-ui models install` moved the ref
    report = await models.reload()
    assert report["moved"] == [A]
    await answer(models, question())
    assert first.closed and len(host.live(A)) == 1 and host.live(A)[0] is not first


async def test_a_replaced_idle_revision_makes_room_for_its_successor(tmp_path: Path) -> None:
    a2 = "acme/a@v2"
    host = FakeHost({A: 6 * MB, a2: 6 * MB})
    models = registry(tmp_path, [A], host, limit_mb=8)  # one revision at a time
    await answer(models, question())
    await models.activate(a2)  # A is idle: closed while a2 loads in the background
    assert (await answer(models, question())).model == a2
    assert host.live(A) == [] and models.ledger is not None and models.ledger.total == 6 * MB
