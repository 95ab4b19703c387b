"""Debian's chromium, driven by Playwright, loads the real page of a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser

from qwen_ui.web.ui import PAGE_TITLE
from tests.support.browser import chromium, log_in_page
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("home"))
    process.wait_for("/login")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def test_page_renders_offline(browser: Browser, server: ServerProcess, artifacts: Path) -> None:
    context = browser.new_context(locale="en-US", color_scheme="dark")
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    log_in_page(page, server)
    page.wait_for_selector("#qwen-question textarea", timeout=30_000)
    page.wait_for_selector("#qwen-status >> text=qwen-ui/shapes-vl-demo", timeout=30_000)
    assert page.title() == PAGE_TITLE
    page.screenshot(path=str(artifacts / "page-en-dark.png"), full_page=True)
    foreign = {url for url in requested if urlparse(url).hostname not in ("127.0.0.1",)}
    foreign = {url for url in foreign if not url.startswith(("data:", "blob:"))}
    assert not foreign, f"requests left the machine: {sorted(foreign)}"
    assert len(requested) > 5
    context.close()


def test_page_follows_browser_language(
    browser: Browser, server: ServerProcess, artifacts: Path
) -> None:
    context = browser.new_context(locale="zh-CN", color_scheme="light")
    page = context.new_page()
    log_in_page(page, server)
    page.wait_for_selector("#qwen-status >> text=模型", timeout=30_000)
    page.screenshot(path=str(artifacts / "page-zh-light.png"), full_page=True)
    context.close()
