"""The wall around the files of the Gradio surface: no path a browser names is opened
unless it is the caller's own.

Gradio sends component values back from the browser (the chatbot's history, the question
box's files, image and file values) as ``FileData`` objects naming a server path, and its
input preprocessing copies any such path into its upload folder before a handler runs;
an app mounted with ``mount_gradio_app`` is never ``launch()``-ed, so Gradio's own
allowed-path check is skipped. So, in the request guard, before Gradio sees a byte:

* **In**: the JSON body of every post to Gradio's routes (``queue/join``, ``run``,
  ``call``, ``api``, ``stream``, ``component_server``...) is read whole and every ``path``
  in it must be a file the caller may read (:meth:`UploadRegistry.may_read`: uploaded by
  the caller, sent to the caller by the server, or one of the page's own files). Anything
  else is refused with 404 ``upload_not_found``; a body that is not JSON is 400.
* **Out**: every path inside the upload folder that Gradio's answers name (the event
  stream of ``queue/data``, the answers of the posts) is recorded as the caller's before
  the answer goes out, so the conversation images a handler shows can be sent back and
  fetched by that caller, and by nobody else.

``GET /gradio_api/file=`` is checked by the guard against the same registry.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import Message, Receive, Send

from qwen_ui.errors import MalformedBody
from qwen_ui.uploads import UploadNotFound, UploadRegistry
from qwen_ui.web.caller import Caller

GRADIO_ROUTE = re.compile(r"/gradio_api/(?P<rest>.*)$")
UPLOAD = re.compile(r"upload/?$")
# Answers that name files: the queue's event stream, the posts' own answers, and the
# event streams of the ``call`` API.
ANSWERS = re.compile(r"(?:queue/data|call/.+|run/.+|api/.+|queue/join|component_server)/?$")
PATH_VALUE = re.compile(rb'"path"\s*:\s*"((?:[^"\\]|\\.)*)"')


def gradio_rest(path: str) -> str | None:
    """The part after ``/gradio_api/``, or None for a path outside Gradio's API."""
    match = GRADIO_ROUTE.search(path)
    return None if match is None else match.group("rest")


def takes_values(method: str, path: str) -> bool:
    """A post to a Gradio route whose body may carry component values (all but uploads,
    which the upload hook records)."""
    rest = gradio_rest(path)
    return method == "POST" and rest is not None and not UPLOAD.match(rest)


def names_files(path: str) -> bool:
    """A Gradio route whose answer may name files for the caller."""
    rest = gradio_rest(path)
    return rest is not None and ANSWERS.match(rest) is not None


def paths_in(value: Any) -> list[str]:
    """Every string under a ``path`` key of a decoded JSON value, however deep."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if key == "path" and isinstance(inner, str):
                    found.append(inner)
                else:
                    stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return found


async def check_values(body: bytes, registry: UploadRegistry, caller: Caller) -> None:
    """Raise unless every path the body names is one the caller may read."""
    try:
        value = json.loads(body) if body.strip() else {}
    except ValueError as exc:
        raise MalformedBody() from exc
    for path in paths_in(value):
        if not await registry.may_read(caller.principal, path):
            raise UploadNotFound()


async def read_whole(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body from ``receive`` (the guard's reader: size and time limits apply),
    and a ``receive`` that hands it to the app again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, replay


class RecordingAnswer:
    """Passes an answer on, recording first the upload-folder paths it names as the
    caller's. Only whole lines are passed on (an event-stream message is never cut inside a
    path), the rest waits for the next piece of the answer."""

    def __init__(self, send: Send, registry: UploadRegistry, caller: Caller) -> None:
        self._send = send
        self.registry = registry
        self.caller = caller
        self._pending = b""
        self._recorded: set[str] = set()

    async def __call__(self, message: Message) -> None:
        if message["type"] != "http.response.body":
            await self._send(message)
            return
        more = bool(message.get("more_body", False))
        data = self._pending + message.get("body", b"")
        cut = data.rfind(b"\n") + 1 if more else len(data)
        ready, self._pending = data[:cut], data[cut:]
        await self._record(ready)
        if ready or not more:
            await self._send({**message, "body": ready})

    async def _record(self, data: bytes) -> None:
        if b'"path"' not in data:
            return
        found = []
        for match in PATH_VALUE.finditer(data):
            try:
                path = json.loads(b'"' + match.group(1) + b'"')
            except ValueError:
                continue
            if path not in self._recorded and self.registry.inside(path) is not None:
                found.append(path)
        if found:
            await self.registry.record(self.caller.principal, found)
            self._recorded.update(found)
