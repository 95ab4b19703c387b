"""Point 8 of issue 57: the page's language is a value the browser keeps and sends back
with every event, so it may be anything. An unknown one falls back to the default
language (QWEN_UI_LANGUAGE, else the browser's Accept-Language, else English) in every
handler, never a ``KeyError``.

The events come from the app's own ``/config`` (every event that takes the language), so
one added later is covered without editing this test."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.security.conftest import Site
from tests.support.gradio_queue import Event, Reply, events_taking, run_event

pytestmark = pytest.mark.e2e

LANG_KEY = "qwen-ui-lang"  # the BrowserState that keeps the page's language
BOGUS: list[Any] = ["xx", "", 42, {"en": "zh"}, ["en"], None]
NO_IMAGE_EN = "Please attach an image first"  # no_image's English message
NO_IMAGE_ZH = "请先添加图片"


def _lang_events(client: httpx.Client) -> tuple[int, list[Event]]:
    config = client.get("/config").json()
    lang_id = next(
        c["id"] for c in config["components"] if c.get("props", {}).get("storage_key") == LANG_KEY
    )
    events = events_taking(config, frozenset({"browserstate"}))
    taking = [e for e in events if any(c["id"] == lang_id for c in e.inputs)]
    return lang_id, taking


def _value(component: dict[str, Any], lang_id: int, lang: Any) -> Any:
    """``lang`` for the language, a question for the question box, else the default."""
    if component["id"] == lang_id:
        return lang
    if component["type"] == "multimodaltextbox":
        return {"text": "How many shapes are there?", "files": []}
    return component.get("props", {}).get("value")


def _run(client: httpx.Client, event: Event, lang_id: int, lang: Any) -> Reply:
    return run_event(client, event, [_value(c, lang_id, lang) for c in event.inputs])


def _succeeded(reply: Reply) -> bool:
    return reply.completed is not None and bool(reply.completed.get("success"))


def test_every_event_taking_the_language_survives_an_unknown_one(memory_site: Site) -> None:
    """Each event ends as it does under a known language (the default inputs are not
    all meaningful to every event: a retry of an empty chat, an edit without its data)."""
    user = memory_site.user()
    lang_id, events = _lang_events(user)
    assert len(events) >= 5, "the page's events that take its language"
    known = {e.fn_index: _succeeded(_run(user, e, lang_id, "en")) for e in events}
    assert sum(known.values()) >= len(events) - 2, known
    differs = []
    for event in events:
        for lang in BOGUS:
            reply = _run(user, event, lang_id, lang)
            if _succeeded(reply) != known[event.fn_index]:
                differs.append((event.fn_index, lang, reply.text[-300:]))
    assert differs == [], "\n".join(map(str, differs))
    assert "KeyError" not in memory_site.server.output()


def _submit(client: httpx.Client, lang: Any) -> str:
    lang_id, events = _lang_events(client)
    submit = next(e for e in events if any(c["type"] == "multimodaltextbox" for c in e.inputs))
    reply = _run(client, submit, lang_id, lang)
    assert reply.completed is not None and reply.completed.get("success"), reply.text[-500:]
    return json.dumps(reply.messages, ensure_ascii=False)


def test_a_question_under_an_unknown_language_is_answered_in_the_default(
    memory_site: Site,
) -> None:
    """The demo model answers only about images: its refusal comes in the default language
    (English here: the site's QWEN_UI_LANGUAGE is auto and the client asks for none)."""
    user = memory_site.user()
    assert NO_IMAGE_EN in _submit(user, "xx")
    user.headers["accept-language"] = "zh-CN"
    assert NO_IMAGE_ZH in _submit(user, "fr")  # auto: the browser's language
    assert NO_IMAGE_EN in _submit(user, "en")  # a known choice wins over the browser's
