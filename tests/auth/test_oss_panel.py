"""The Gradio OSS panel's handlers (qwen_ui/web/oss_panel.py), with real sessions."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from qwen_ui.services import services_of
from qwen_ui.web.oss_panel import attach, list_page, panel_visible
from tests.auth.conftest import (
    ACME,
    ACME_OBJECTS,
    SecretWatch,
    local_fields,
    oss_fields,
    session_cookie,
    submit,
)


def gradio_request(session_id: str | None) -> gr.Request:
    headers = [(b"accept-language", b"en")]
    if session_id:
        headers.append((b"cookie", f"qwen_session={session_id}".encode()))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/gradio_api/queue/join",
        "headers": headers,
        "query_string": b"",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("testclient", 1),
        "root_path": "",
    }
    return gr.Request(request=Request(scope))


def login(web: TestClient, watch: SecretWatch, tenant: str, fields: dict[str, str]) -> gr.Request:
    assert submit(web, tenant, fields).status_code == 303
    session_id = session_cookie(web)
    watch.add(session_id)
    return gradio_request(session_id)


def test_visible_only_for_oss_sessions(web: TestClient, secret_watch: SecretWatch) -> None:
    app = web.app
    assert not web.portal.call(panel_visible, app, gradio_request(None))  # type: ignore[union-attr]
    school = login(web, secret_watch, "school", local_fields("alice"))
    assert not web.portal.call(panel_visible, app, school)  # type: ignore[union-attr]
    acme = login(web, secret_watch, "acme", oss_fields(ACME))
    assert web.portal.call(panel_visible, app, acme)  # type: ignore[union-attr]


def test_browse_and_attach(web: TestClient, secret_watch: SecretWatch) -> None:
    request = login(web, secret_watch, "acme", oss_fields(ACME))
    page, note = web.portal.call(list_page, web.app, "", None, request)  # type: ignore[union-attr]
    assert [o.key for o in page.objects] == ["acme/cat.png"] and "photos/" in note
    value = web.portal.call(
        attach, web.app, ["acme/cat.png"], {"text": "what?", "files": []}, request
    )  # type: ignore[union-attr]
    assert value["text"] == "what?"
    (path,) = value["files"]
    assert Path(path).read_bytes() == ACME_OBJECTS["acme/cat.png"] and Path(path).name == "cat.png"
    assert oct(Path(path).stat().st_mode & 0o777) == "0o600"


def test_attach_refuses_other_tenants_keys(web: TestClient, secret_watch: SecretWatch) -> None:
    request = login(web, secret_watch, "acme", oss_fields(ACME))
    for key in ("beta/secret-plan.png", "acme/../beta/secret-plan.png", "acme/%2e%2e/beta/x.png"):
        with pytest.raises(gr.Error, match="not allowed"):
            web.portal.call(attach, web.app, [key], None, request)  # type: ignore[union-attr]


def test_attach_respects_max_images(web: TestClient, secret_watch: SecretWatch) -> None:
    request = login(web, secret_watch, "acme", oss_fields(ACME))
    limit = services_of(web.app).settings.max_images
    full = {"text": "", "files": [f"/tmp/x{i}.png" for i in range(limit)]}
    value = web.portal.call(attach, web.app, ["acme/cat.png"], full, request)  # type: ignore[union-attr]
    assert len(value["files"]) == limit


async def test_panel_builds_inside_blocks() -> None:
    """(Async: Gradio leaks an event loop when Blocks are built outside a running one.)"""
    from fastapi import FastAPI

    from qwen_ui.web.oss_panel import build_oss_panel

    with gr.Blocks() as blocks:
        question = gr.MultimodalTextbox(file_count="multiple")
        build_oss_panel(FastAPI(), blocks, question)
    ids = {getattr(block, "elem_id", None) for block in blocks.blocks.values()}
    assert {"qwen-oss", "qwen-oss-list", "qwen-oss-attach"} <= ids
