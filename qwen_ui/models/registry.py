"""The offered models, which one answers a request, and the memory they share.

* **Picking**: an explicit model (``OWNER/NAME@REV``, or ``OWNER/NAME`` for its first
  offered revision) must be offered, its revision included (:class:`UnknownModel`, 404,
  naming the offered ones); without one a follow-up goes to the model its conversation
  follows (:mod:`qwen_ui.models.routes`), anything else to the default (the first
  offered model).
* **Loading**: a model's engine is created on its first question; just before its first
  request takes its place in the admission line, the registry counts its weights in the
  ledger, unloading the least recently used idle models first when they would not fit. A
  model with requests in flight is never unloaded: the load waits for them (at most
  ``queue_timeout_s``, then a busy error). A model that cannot fit even alone is refused.
* **Switching** (:meth:`activate`, :meth:`reload`): the offered list changes at once; a
  request already routed finishes on the engine it started on; a model no longer offered,
  or whose store ref now names another snapshot, is retired: closed once its last request
  ends, its memory freed for the next load. The new default is loaded in the background.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager, suppress
from dataclasses import replace
from typing import Any, Protocol

from qwen_ui.admission.errors import human_bytes
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.events import Done, Event, Failed
from qwen_ui.errors import QwenUIError
from qwen_ui.models.errors import ModelNeverFits, ModelsBusy, SwitchRefused, UnknownModel
from qwen_ui.models.memory import WeightLedger
from qwen_ui.models.refs import ModelRef, parse_list
from qwen_ui.models.routes import ConversationModels
from qwen_ui.models.served import Entry, ModelState, Served

log = logging.getLogger(__name__)

Report = Callable[[int, float], None]
Room = Callable[[int, Report], Awaitable[None]]
RELEASE_DELAY_S = 0.5  # freed engines are collected once their last frames are gone


class Host(Protocol):
    """What the registry needs from the app: engines, and the store's view of a ref."""

    def serve(self, entry: Entry, key: int, room: Room) -> Served:
        """A started engine for ``entry``; ``room(key, report)`` is awaited before each of
        its requests takes its place in the admission line."""
        ...

    def snapshot(self, ref: ModelRef) -> tuple[str, int, int]:
        """The ref's snapshot id, checkpoint bytes and the bytes of the dense copies its
        engine will keep of int4 weights (blocking; typed store errors)."""
        ...

    async def warm(self, engine: Any) -> None:
        """Load ``engine``'s model and warm it up (what ``preload`` does at start)."""
        ...

    def release_memory(self) -> None:
        """Give freed device memory back (after an engine was closed)."""
        ...


class ModelRegistry:
    def __init__(
        self,
        names: Sequence[str],
        host: Host,
        ledger: WeightLedger | None,
        routes: ConversationModels,
        wait_s: float,
        remote: bool = False,
    ) -> None:
        self.host = host
        self.ledger = ledger
        self.routes = routes
        self.wait_s = wait_s
        self.remote = remote
        self.entries: dict[str, Entry] = {n: self._entry(n) for n in names}
        self.draining: list[Served] = []
        self.closed = False
        self._keys = itertools.count(1)
        self._room = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._switch = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_key: dict[int, Served] = {}

    def _entry(self, name: str) -> Entry:
        return Entry(name, None if self.remote else ModelRef.parse(name))

    # --- what is offered ---------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.entries)

    @property
    def default(self) -> Entry:
        return next(iter(self.entries.values()))

    def entry(self, model: str) -> Entry:
        """The offered model named ``model``: ``OWNER/NAME@REV`` exactly (a revision that is
        not offered is unknown, never another revision), or ``OWNER/NAME`` alone for its
        first offered revision; :class:`UnknownModel` (naming the offered ones) otherwise."""
        wanted = model.strip()
        found = self.entries.get(wanted)
        if found is None and "@" not in wanted:
            found = self._first_revision(wanted)
        if found is None:
            raise UnknownModel(model=wanted[:200], offered=", ".join(self.names))
        return found

    def _first_revision(self, model_id: str) -> Entry | None:
        for entry in self.entries.values():
            if entry.ref is not None and entry.ref.model_id == model_id:
                return entry
        return None

    def _find(self, model: str) -> Entry | None:
        """The model a conversation follows: its revision, else another one still offered."""
        return self.entries.get(model) or self._first_revision(model.partition("@")[0])

    async def route(self, request: AskRequest, model: str | None) -> Entry:
        """The model that answers ``request`` (see the module's docstring)."""
        if model:
            return self.entry(model)
        if request.conversation_id and request.history is None:
            followed = await self.routes.get(request.owner, request.conversation_id)
            found = self._find(followed) if followed else None
            if found is not None:
                return found
        return self.default

    # --- asking ------------------------------------------------------------------------
    async def ask(self, request: AskRequest, model: str | None = None) -> AsyncGenerator[Event]:
        """The engine's events for ``request`` on the model it is routed to; ``done``
        names that model. Never raises a QwenUIError (it becomes ``failed``)."""
        try:
            entry = await self.route(request, model)
        except QwenUIError as exc:
            yield Failed.of(exc, request.lang)
            return
        async with self.holding(entry) as served, aclosing(served.engine.ask(request)) as events:
            async for event in events:
                if isinstance(event, Done):
                    event = replace(event, model=entry.name)
                    if event.conversation_id:
                        await self.routes.remember(request.owner, event.conversation_id, entry.name)
                yield event

    @asynccontextmanager
    async def holding(self, entry: Entry) -> AsyncIterator[Served]:
        """The entry's current engine, held busy (never unloaded) for the block."""
        served = self.current(entry)
        served.in_flight += 1
        try:
            yield served
        finally:
            served.in_flight -= 1
            served.last_used = time.monotonic()
            if served.idle:
                await self._idle(served)

    def current(self, entry: Entry) -> Served:
        """The entry's engine, created (and started) now when it has none."""
        served = entry.current
        if served is None or served.closed or served.retired:
            served = self.host.serve(entry, next(self._keys), self._room_for)
            self._by_key[served.key] = served
            entry.current = served
        return served

    async def _room_for(self, key: int, report: Report) -> None:
        served = self._by_key.get(key)
        if served is not None:
            await self.make_room(served, report)

    async def _idle(self, served: Served) -> None:
        if served.retired and not served.closed:
            self._spawn(self._close(served))  # its last request has finished
        async with self._changed:
            self._changed.notify_all()

    # --- memory ------------------------------------------------------------------------
    async def make_room(self, served: Served, report: Report | None = None) -> None:
        """Count ``served``'s weights, unloading least recently used idle models first;
        waits for busy ones to finish (at most ``wait_s``)."""
        if served.counted or self.ledger is None or self.remote:
            return
        async with self._room:
            if served.counted:
                return
            ref = ModelRef.parse(served.name)
            snapshot_id, checkpoint, dense = await asyncio.to_thread(self.host.snapshot, ref)
            served.snapshot_id = served.snapshot_id or snapshot_id
            need = self.ledger.estimate(checkpoint) + dense
            await self._free(served, need, report)
            self.ledger.add(served.key, need)
            served.counted = True

    async def _free(self, served: Served, need: int, report: Report | None) -> None:
        assert self.ledger is not None
        deadline = time.monotonic() + self.wait_s
        while not self.ledger.fits(need):
            victim = self._victim(served)
            if victim is not None:
                log.info("unloading %s (least recently used) to load %s", victim.name, served.name)
                await self._close(victim)
                continue
            if self.ledger.total == 0:  # nothing else holds memory: it never fits
                limit = self.ledger.limit or 0
                raise ModelNeverFits(
                    model=served.name, needed=human_bytes(need), limit=human_bytes(limit)
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModelsBusy(model=served.name, retry_after=5)
            if report is not None:
                report(0, left)
            async with self._changed:
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), min(left, 1.0))

    def _victim(self, wanting: Served) -> Served | None:
        idle = [
            s for s in self._all() if s is not wanting and s.counted and not s.closed and s.idle
        ]
        return min(idle, key=lambda s: s.last_used, default=None)

    def _all(self) -> list[Served]:
        current = [e.current for e in self.entries.values() if e.current is not None]
        return [*current, *self.draining]

    async def _close(self, served: Served) -> None:
        """Stop ``served``'s engine and uncount its weights (it holds no request); the
        bookkeeping happens even when the caller is cancelled meanwhile."""
        if served.closed:
            return
        served.closed = True
        try:
            await asyncio.shield(served.engine.close())
        finally:
            self._forget(served)
        log.info("model %s unloaded", served.name)
        self._spawn(self._release())
        async with self._changed:
            self._changed.notify_all()

    def _forget(self, served: Served) -> None:
        if self.ledger is not None:
            self.ledger.remove(served.key)
        if served in self.draining:
            self.draining.remove(served)
        self._by_key.pop(served.key, None)
        entry = self.entries.get(served.name)
        if entry is not None and entry.current is served:
            entry.current = None

    # --- switching ---------------------------------------------------------------------
    async def activate(self, model: str) -> dict[str, Any]:
        """Make ``model`` the default; another revision of the same model is replaced."""
        if self.remote:
            raise SwitchRefused(reason="the remote engine (engine=openai) serves one model")
        try:
            ref = ModelRef.parse(model)
        except ValueError:
            raise SwitchRefused(reason=f"{model[:200]!r} is not OWNER/NAME@REV") from None
        await asyncio.to_thread(self.host.snapshot, ref)  # installed and intact
        names = [str(ref)] + [
            n for n in self.names if n != str(ref) and ModelRef.parse(n).model_id != ref.model_id
        ]
        return await self.reload(names)

    async def reload(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """Offer ``names`` (None: the same ones), re-reading every ref from the store."""
        async with self._switch:
            wanted = list(dict.fromkeys(names or self.names))
            if not wanted:
                raise SwitchRefused(reason="no model to offer")
            if not self.remote:
                parse_list(",".join(wanted))  # every name is OWNER/NAME@REV
            retired = [n for n in self.names if n not in wanted]
            for name in retired:
                self._retire_entry(self.entries.pop(name))
            self.entries = {n: self.entries.get(n) or self._entry(n) for n in wanted}
            moved = await self._recheck_refs()
            log.info(
                "models offered: %s (default %s; retired %s; ref moved %s)",
                ", ".join(wanted),
                wanted[0],
                ", ".join(retired) or "none",
                ", ".join(moved) or "none",
            )
            self._warm(self.default)
            return {"default": wanted[0], "models": wanted, "retired": retired, "moved": moved}

    def _retire_entry(self, entry: Entry) -> None:
        if entry.current is not None:
            self._retire(entry.current)
            entry.current = None

    def _retire(self, served: Served) -> None:
        served.retired = True
        if served.closed:
            return
        if served.idle:
            self._spawn(self._close(served))
        else:
            self.draining.append(served)

    async def _recheck_refs(self) -> list[str]:
        """Retire engines whose ref now names another snapshot (``models install`` or
        ``cache_model.sh`` moved it): their next request gets a new engine."""
        moved = []
        for entry in self.entries.values():
            served = entry.current
            if entry.ref is None or served is None or served.snapshot_id is None:
                continue
            try:
                snapshot_id, *_ = await asyncio.to_thread(self.host.snapshot, entry.ref)
            except QwenUIError as exc:
                log.warning("model %s: %s", entry.name, exc.message("en"))
                continue
            if snapshot_id != served.snapshot_id:
                moved.append(entry.name)
                self._retire(served)
                entry.current = None
        return moved

    def _warm(self, entry: Entry) -> None:
        """Load ``entry`` in the background (after making room) when it is not loaded."""
        if self.remote or entry.state is not ModelState.NOT_LOADED:
            return
        self._spawn(self._preload(entry))

    async def preload_default(self) -> None:
        """Load and warm up the default model now (``QWEN_UI_PRELOAD``); failures land in
        its status."""
        await self._preload(self.default)

    async def _preload(self, entry: Entry) -> None:
        try:
            async with self.holding(entry) as served:
                await self.make_room(served)
                await self.host.warm(served.engine)
        except QwenUIError as exc:
            log.warning("model %s not preloaded: %s", entry.name, exc.message("en"))

    async def _release(self) -> None:
        await asyncio.sleep(RELEASE_DELAY_S)
        await asyncio.to_thread(self.host.release_memory)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- reporting and closing ---------------------------------------------------------
    def health(self) -> list[dict[str, Any]]:
        """Each offered model's state (and engines still finishing requests)."""
        rows: list[dict[str, Any]] = []
        for i, entry in enumerate(self.entries.values()):
            served = entry.current
            row: dict[str, Any] = {"model": entry.name, "state": entry.state.value}
            row.update(default=i == 0, in_flight=served.in_flight if served else 0)
            if entry.state is ModelState.FAILED and entry.status.reason:
                row["reason"] = entry.status.reason
            rows.append(row)
        for served in self.draining:
            rows.append(
                {
                    "model": served.name,
                    "state": "draining",
                    "default": False,
                    "in_flight": served.in_flight,
                }
            )
        return rows

    async def close(self) -> None:
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        for served in self._all():
            if not served.closed:
                await served.engine.close()
