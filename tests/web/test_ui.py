"""The mounted Gradio page: config, theme, proxy awareness, languages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from qwen_ui.demo.examples import NOTICE, SCOPE
from qwen_ui.engine.facts import DECLARED
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from qwen_ui.store import ModelStore
from qwen_ui.web.auth import SESSION_COOKIE
from qwen_ui.web.i18n import negotiate
from qwen_ui.web.theme import ThemeNotFound, load_theme
from qwen_ui.web.ui import PAGE_TITLE, Page, _about_default, _layout, status_markdown
from tests.support.auth import log_in


def config(client: TestClient, path: str = "/config", **headers: str) -> dict[str, Any]:
    response = client.get(path, headers=headers)
    assert response.status_code == 200
    return dict(response.json())


def test_page_and_title(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert config(client)["title"] == PAGE_TITLE


def test_no_api_link_by_default_and_upload_limit(client: TestClient, settings: Settings) -> None:
    cfg = config(client)
    assert "api" not in cfg["footer_links"]
    assert cfg["max_file_size"] == settings.max_image_bytes
    assert cfg["analytics_enabled"] is False


def test_no_gradio_extras_that_fail_here(client: TestClient) -> None:
    """No settings panel (language selector, PWA hint, Screen Studio), no run history, no
    share or copy-all buttons on the chat."""
    cfg = config(client)
    assert cfg["footer_links"] == ["gradio"]
    assert not cfg.get("pwa")
    chats = [c for c in cfg["components"] if c.get("props", {}).get("elem_id") == "qwen-chat"]
    assert len(chats) == 1
    assert chats[0]["props"]["buttons"] == ["copy"]


def test_pasted_long_question_stays_text(client: TestClient, settings: Settings) -> None:
    cfg = config(client)
    (box,) = [c for c in cfg["components"] if c.get("props", {}).get("elem_id") == "qwen-question"]
    assert box["props"]["max_plain_text_length"] > settings.max_question_chars


def test_api_link_when_enabled(home: Path) -> None:
    with TestClient(create_app(Settings(home=home, show_api=True))) as client:
        log_in(client)
        assert "api" in config(client)["footer_links"]


def test_theme_and_css_from_themes_folder(client: TestClient) -> None:
    cfg = config(client)
    assert ".qwen-status" in cfg["css"]
    assert cfg["stylesheets"] == []  # nothing external (fonts) to fetch
    assert "body_background_fill_dark" in cfg["body_css"]


def test_unknown_theme_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ThemeNotFound, match="nope"):
        load_theme(tmp_path, "nope")


def test_behind_proxy_root_uses_forwarded_host_and_proto(client: TestClient) -> None:
    cfg = config(client, **{"X-Forwarded-Host": "vqa.example.com", "X-Forwarded-Proto": "https"})
    assert cfg["root"] == "https://vqa.example.com"


@pytest.mark.parametrize(("trusted", "scheme"), [("testclient", "https"), ("10.0.0.1", "http")])
def test_proxy_scheme_from_trusted_peer_only(home: Path, trusted: str, scheme: str) -> None:
    """Our routes (cookies, redirects) see https only when the peer is a trusted proxy."""
    app = create_app(Settings(home=home, forwarded_allow_ips=trusted, ui_path="/ui"))

    async def seen_scheme(request: Request) -> str:
        return request.url.scheme

    app.add_api_route("/_scheme", seen_scheme)
    with TestClient(app) as client:
        session_id = log_in(client)  # every route but a few needs a session (web/guard.py)
        client.cookies.set("__Host-" + SESSION_COOKIE, session_id)
        assert client.get("/_scheme", headers={"X-Forwarded-Proto": "https"}).json() == scheme


def test_mount_path_is_configurable(home: Path) -> None:
    with TestClient(create_app(Settings(home=home, ui_path="/ui"))) as client:
        log_in(client)
        assert config(client, "/ui/config")["title"] == PAGE_TITLE
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    ("header", "configured", "expected"),
    [
        ("zh-CN,zh;q=0.9,en;q=0.8", "auto", "zh"),
        ("en-US,en;q=0.9", "auto", "en"),
        ("fr-FR,zh;q=0.5", "auto", "zh"),
        ("fr", "auto", "en"),
        (None, "auto", "en"),
        ("zh-CN", "en", "en"),
        ("en;q=0.2,zh-TW;q=0.8", "auto", "zh"),
    ],
)
def test_language_negotiation(header: str | None, configured: str, expected: str) -> None:
    assert negotiate(header, configured) == expected


def test_status_says_honestly_what_exists(client: TestClient, settings: Settings) -> None:
    text = status_markdown(client.app, "en")  # type: ignore[arg-type]
    assert settings.model_id in text
    assert "not installed" in text
    assert "idle" in text
    assert "not available" not in text  # an engine is present: answering is possible
    assert "未安装" in status_markdown(client.app, "zh")  # type: ignore[arg-type]


def test_status_reports_installed_model(client: TestClient, settings: Settings) -> None:
    ref = services_of(client.app).store.ref_path(settings.model_id, settings.model_revision)
    ref.parent.mkdir(parents=True)
    ref.write_text("0" * 64)
    assert "· installed" in status_markdown(client.app, "en")  # type: ignore[arg-type]


OTHER = "acme/gauges-vl@main"
GAUGES = "**This model:** Reads gauges."


def _other_model(home: Path) -> None:
    """A model that declares its own scope, installed in the store."""
    source = home / "gauges"
    source.mkdir()
    (source / "config.json").write_text("{}")
    scope = '{"scope": {"en": "Reads gauges.", "zh": "读取仪表。"}}'
    (source / DECLARED).write_text(scope, encoding="utf-8")
    ModelStore(Settings(home=home).model_path).install(source, *OTHER.split("@"))


def _shown(updates: dict[Any, Any], page: Page) -> tuple[bool, str, bool]:
    """(demo notice shown, English scope note, Chinese block shown) as a page load gets it."""
    scope = updates[page.scopes["en"]]
    text = scope["value"] if scope["visible"] else ""
    return updates[page.demo_note]["visible"], text, updates[page.examples["zh"]]["visible"]


async def test_the_page_describes_the_default_model_of_now_not_of_the_start(home: Path) -> None:
    """After ``qwen-ui models activate`` (or SIGHUP) a page load shows the new default's
    demo notice and scope note, not those of the model the server started with. (Async:
    Gradio leaks an event loop when Blocks are built outside a running one.)"""
    _other_model(home)
    settings = Settings(home=home, models=OTHER)
    app = create_app(settings, ui=False)
    async with app.router.lifespan_context(app):
        with gr.Blocks() as blocks:
            page = _layout(app, settings, blocks)
        assert _shown(_about_default(app, page, "en"), page) == (False, GAUGES, False)
        models = services_of(app).models
        await models.activate(f"{DEMO_MODEL_ID}@bf16")
        demo = _about_default(app, page, "en")
        assert demo[page.demo_note]["value"] == NOTICE["en"]
        assert _shown(demo, page) == (True, f"**This model:** {SCOPE['en']}", False)
        chinese = _about_default(app, page, "zh")
        assert SCOPE["zh"] in chinese[page.scopes["zh"]]["value"]
        assert chinese[page.examples["zh"]]["visible"] is True
        await models.activate(OTHER)
        assert _shown(_about_default(app, page, "en"), page) == (False, GAUGES, False)
