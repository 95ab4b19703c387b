"""Gradio's queue spoken over plain HTTP, as a hostile page would: join an event with any
value, then read the event's messages from the session's server-sent-event stream.

The events and the components they take come from the app's own ``/config``, so a test
built on :func:`events_taking` covers events added later without being edited."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

# Components whose value can name a file on the server.
FILE_COMPONENTS = frozenset(
    {
        "chatbot",
        "file",
        "image",
        "gallery",
        "multimodaltextbox",
        "annotatedimage",
        "imageeditor",
        "uploadbutton",
        "video",
        "audio",
        "model3d",
        "simpleimage",
        "dataset",
    }
)


@dataclass(frozen=True)
class Event:
    """One dependency of the page: its index (``fn_index``), trigger and input components."""

    fn_index: int
    trigger_id: int | None
    inputs: list[dict[str, Any]]  # the components' config entries
    queued: bool

    @property
    def file_inputs(self) -> list[str]:
        return [c["type"] for c in self.inputs if c["type"] in FILE_COMPONENTS]


def events_taking(config: dict[str, Any], types: frozenset[str] = FILE_COMPONENTS) -> list[Event]:
    """The page's events with at least one input component of ``types``."""
    components = {c["id"]: c for c in config["components"]}
    found = []
    for dep in config["dependencies"]:
        inputs = [components[i] for i in dep.get("inputs", []) if i in components]
        if not any(c["type"] in types for c in inputs):
            continue
        targets = dep.get("targets") or []
        trigger = targets[0][0] if targets and targets[0] else None
        found.append(Event(dep["id"], trigger, inputs, bool(dep.get("queue", True))))
    return found


def file_data(path: str) -> dict[str, Any]:
    return {
        "path": path,
        "orig_name": path.rsplit("/", 1)[-1],
        "meta": {"_type": "gradio.FileData"},
    }


def hostile_value(component: dict[str, Any], path: str) -> Any:
    """A value of ``component`` that names ``path`` wherever the component takes a file;
    other components get their own default value."""
    kind = component["type"]
    data = file_data(path)
    if kind == "chatbot":
        return [
            {"role": "user", "content": [{"type": "file", "file": data}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        ]
    if kind == "multimodaltextbox":
        return {"text": "How many shapes are there?", "files": [data]}
    if kind == "gallery":
        return [{"image": data, "caption": None}]
    if kind == "dataset":
        return [data]
    if kind in FILE_COMPONENTS:
        return data
    return component.get("props", {}).get("value")


@dataclass
class Reply:
    """What one event sent back: the raw stream text and its messages."""

    status: int
    text: str
    messages: list[dict[str, Any]]

    @property
    def completed(self) -> dict[str, Any] | None:
        done = [m for m in self.messages if m.get("msg") == "process_completed"]
        return done[-1] if done else None


def run_event(client: httpx.Client, event: Event, data: list[Any], timeout: float = 60.0) -> Reply:
    """Join ``event`` with ``data`` and read its stream until it completes (or the server
    refuses the join: then the join's own answer is the reply)."""
    session = secrets.token_hex(8)
    body = {
        "data": data,
        "event_data": None,
        "fn_index": event.fn_index,
        "trigger_id": event.trigger_id,
        "session_hash": session,
    }
    if not event.queued:  # answered in the post's own response
        posted = client.post("/gradio_api/run/predict", json=body, timeout=timeout)
        return Reply(posted.status_code, posted.text, [])
    joined = client.post("/gradio_api/queue/join", json=body, timeout=timeout)
    if joined.status_code != 200:
        return Reply(joined.status_code, joined.text, [])
    lines, messages = [], []
    with client.stream(
        "GET", "/gradio_api/queue/data", params={"session_hash": session}, timeout=timeout
    ) as stream:
        for message in _messages(stream.iter_lines()):
            lines.append(json.dumps(message))
            messages.append(message)
            if message.get("msg") in ("process_completed", "close_stream", "unexpected_error"):
                break
    return Reply(200, "\n".join(lines), messages)


def _messages(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data:"):
            yield json.loads(line[len("data:") :])


def paths_in(value: Any) -> list[str]:
    """Every ``path`` string in a decoded JSON value."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "path" and isinstance(item, str):
                found.append(item)
            else:
                found += paths_in(item)
    elif isinstance(value, list):
        for item in value:
            found += paths_in(item)
    return found
