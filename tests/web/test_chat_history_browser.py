"""The sidebar of conversations in Chromium (tiny model): a reload restores the open
conversation and the chosen language; rename and delete; another user of the same tenant
neither sees nor opens it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from qwen_ui.auth import tenants as tenants_file
from tests.support import auth
from tests.support.browser import log_in_page
from tests.support.server import ServerProcess, tiny_model_server
from tests.web.test_chat_conversation_browser import attach, chat_text, send, wait_text

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = tiny_model_server(tmp_path_factory, max_new_tokens=3)
    path = process.home / "tenants.toml"
    current = tenants_file.load(path, allow_insecure=True)
    demo = current.tenants["demo"]
    bob = demo.model_copy(update={"users": {**demo.users, "bob": auth.test_password_hash()}})
    tenants_file.save(path, current.model_copy(update={"tenants": {"demo": bob}}))
    yield process
    process.stop()


def open_page(browser: Browser, server: ServerProcess, user: str = "demo") -> Page:
    context = browser.new_context(locale="en-US", viewport={"width": 1200, "height": 1100})
    tab = context.new_page()
    if user == "demo":
        log_in_page(tab, server)
    else:
        tab.goto(server.url + "/")
        tab.wait_for_url("**/login**")
        tab.fill("#tenant", "demo")
        tab.check("#m-local")
        tab.fill("#user", user)
        tab.fill("#password", auth.TEST_PASSWORD)
        tab.click("button[type=submit]")
        tab.wait_for_url(server.url + "/")
    tab.wait_for_selector("#qwen-question textarea")
    return tab


def history_labels(page: Page) -> list[str]:
    return [label.inner_text() for label in page.locator("#qwen-history label").all()]


def open_sidebar(page: Page) -> None:
    page.click(".toggle-button")
    page.wait_for_function(
        "() => document.querySelector('#qwen-rename').getBoundingClientRect().left >= 0",
        timeout=10_000,
    )


def test_reload_restores_the_conversation_and_the_language(
    browser: Browser, server: ServerProcess, tmp_path: Path, artifacts: Path
) -> None:
    page = open_page(browser, server)
    try:
        page.click("text=中文")
        page.wait_for_selector("text=新对话")
        attach(page, tmp_path, 2)
        send(page, "Which image is red?")
        wait_text(page, "完成")
        page.reload()
        page.wait_for_selector("#qwen-question textarea")
        wait_text(page, "Which image is red?", 20_000)
        page.wait_for_selector("text=新对话")  # the language came back too
        assert page.locator("#qwen-chat img").count() == 2
        open_sidebar(page)
        page.screenshot(path=str(artifacts / "chat-history-sidebar.png"))
        labels = history_labels(page)
        assert len(labels) == 1 and labels[0].startswith("Which image is red?")
        assert "2 张图片" in labels[0]
        page.screenshot(path=str(artifacts / "chat-history-restored.png"), full_page=True)
        # a follow-up after the reload sees the two images
        send(page, "And the other?")
        wait_text(page, "正在编码图片 2/2")
        page.wait_for_function(
            "() => (document.querySelector('#qwen-chat').innerText.match(/完成/g) || [])"
            ".length === 1 && document.querySelector('#qwen-question button.submit-button')"
            " && !document.querySelector('#qwen-stop')",
            timeout=60_000,
        )  # the answer ended (the page shows no stage log after a reload)
        page.fill("#qwen-title textarea, #qwen-title input", "Red or blue")
        page.click("#qwen-rename")
        page.wait_for_function(
            "() => [...document.querySelectorAll('#qwen-history label')]"
            ".some(l => l.innerText.startsWith('Red or blue'))",
            timeout=10_000,
        )
        bob = open_page(browser, server, "bob")
        try:
            open_sidebar(bob)
            assert history_labels(bob) == []
            assert "Which image" not in chat_text(bob)
        finally:
            bob.context.close()
        page.click("#qwen-delete")
        page.wait_for_function(
            "() => !document.querySelector('#qwen-chat').innerText.includes('Which image')",
            timeout=10_000,
        )
        page.wait_for_function(
            "() => document.querySelectorAll('#qwen-history label').length === 0",
            timeout=10_000,
        )
    finally:
        page.context.close()
