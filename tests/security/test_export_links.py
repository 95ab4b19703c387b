"""Point 9 of issue 57: the exported Markdown keeps no link a user or the model wrote but
http(s) ones. A conversation titled (by its first question, then by a rename through the
page) with ``[x](javascript:alert(1))`` exports that title as text.

The export is rendered the way a permissive Markdown viewer would (markdown-it with raw
HTML on and no link filter of its own), so every link in it is seen."""

from __future__ import annotations

import io
import json
import zipfile
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from markdown_it import MarkdownIt
from PIL import Image

from tests.security.conftest import Site
from tests.support.gradio_queue import Event, events_taking, run_event

pytestmark = pytest.mark.e2e

QUESTION = "[x](javascript:alert(1)) and ![y](javascript:alert(2)) <javascript:alert(3)>"
TITLES = [
    "[t](javascript:alert(4))",
    "[r][1]\n\n[1]: javascript:alert(5)",
    "\\[a\\](javascript:alert(6)) <a href='javascript:alert(7)'>a</a>",
]


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.targets += [v or "" for k, v in attrs if k in ("href", "src")]


def _links(markdown: str) -> list[str]:
    renderer = MarkdownIt("commonmark", {"html": True})
    renderer.validateLink = lambda url: True  # type: ignore[method-assign]
    parser = Links()
    parser.feed(renderer.render(markdown))
    return parser.targets


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 40), (200, 120, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def _asked(user: httpx.Client) -> str:
    form = {"question": QUESTION, "max_new_tokens": "2"}
    response = user.post("/api/v1/ask", data=form, files={"images": ("a.png", _png())})
    assert response.status_code == 200, response.text[:300]
    done = json.loads(response.text.splitlines()[-1])
    return str(done["conversation_id"])


def _markdown(user: httpx.Client, conversation_id: str) -> str:
    url = f"/api/v1/conversations/{conversation_id}/export"
    response = user.get(url, params={"format": "zip"})
    assert response.status_code == 200, response.text[:300]
    return zipfile.ZipFile(io.BytesIO(response.content)).read("conversation.md").decode()


def _assert_no_foreign_link(markdown: str) -> None:
    for target in _links(markdown):
        assert target.startswith(("images/", "https://", "http://")), (target, markdown)


def _rename_event(user: httpx.Client) -> Event:
    config = user.get("/config").json()
    events = events_taking(config, frozenset({"textbox"}))
    ids = {c["id"] for c in config["components"] if c.get("props", {}).get("elem_id")}
    return next(
        e
        for e in events
        if any(c.get("props", {}).get("elem_id") == "qwen-title" for c in e.inputs)
        and any(c["id"] not in ids and c["type"] == "browserstate" for c in e.inputs)
    )


def _rename(user: httpx.Client, conversation_id: str, title: str) -> None:
    event = _rename_event(user)
    values: list[Any] = []
    for component in event.inputs:
        storage = component.get("props", {}).get("storage_key", "")
        if component["type"] == "textbox":
            values.append(title)
        else:
            values.append(conversation_id if "conversation" in storage else "en")
    reply = run_event(user, event, values)
    assert reply.completed is not None and reply.completed.get("success"), reply.text[-300:]


def test_a_question_as_title_exports_as_text(memory_site: Site) -> None:
    user = memory_site.user()
    markdown = _markdown(user, _asked(user))
    _assert_no_foreign_link(markdown)
    assert "javascript:alert(1)" in markdown  # shown, as text


@pytest.mark.parametrize("title", TITLES)
def test_a_renamed_title_exports_as_text(memory_site: Site, title: str) -> None:
    user = memory_site.user()
    conversation_id = _asked(user)
    _rename(user, conversation_id, title)
    markdown = _markdown(user, conversation_id)
    assert "javascript:alert(" in markdown.split("\n", 1)[0]  # the heading shows it as text
    _assert_no_foreign_link(markdown)
