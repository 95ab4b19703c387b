"""The login page in Debian's chromium against a real server and our OSS server: redirect,
generic error, OSS login into the UI, cookie flags, logout; no secret in the server log."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.auth.conftest import ACME, make_oss, write_world
from tests.support.oss_server import FakeOSS
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeOSS, ServerProcess]]:
    oss = make_oss()
    home = tmp_path_factory.mktemp("home")
    write_world(home / "tenants.toml", oss.endpoint)
    server = ServerProcess(home, env={"QWEN_UI_ALLOW_INSECURE_OSS_ENDPOINTS": "true"})
    server.wait_for("/login")
    yield oss, server
    server.stop()
    oss.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if shutil.which("chromium") is None:
        pytest.fail("Debian chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


def fill_oss(page: Page, secret: str) -> None:
    page.fill("#tenant", "acme")
    page.check("#m-oss")
    page.fill("#key_id", ACME.key_id)
    page.fill("#key_secret", secret)
    page.click("button[type=submit]")


def test_oss_login_in_the_browser(
    browser: Browser, world: tuple[FakeOSS, ServerProcess], artifacts: Path
) -> None:
    oss, server = world
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    page.goto(server.url + "/")
    page.wait_for_url("**/login?next=/")
    page.check("#m-oss")
    assert page.is_hidden("#password") and page.is_visible("#key_secret")  # CSS only, no JS
    fill_oss(page, "not-the-secret-xxxxxxxxxxxxxxxxxx")
    assert page.text_content(".error") == "The tenant or credentials are not valid."
    page.screenshot(path=str(artifacts / "login-error-en.png"))
    fill_oss(page, ACME.secret)
    page.wait_for_url(server.url + "/")
    page.wait_for_selector("#qwen-question textarea", timeout=60_000)
    (cookie,) = [c for c in context.cookies() if c["name"] == "qwen_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/"
    page.goto(server.url + "/logout")
    page.click("button[type=submit]")
    page.wait_for_url("**/login?logged_out=1")
    assert page.text_content(".notice") == "You have logged out."
    page.goto(server.url + "/")
    page.wait_for_url("**/login?next=/")
    context.close()
    assert [c.code for c in oss.calls(ACME.key_id)] == ["SignatureDoesNotMatch", "OK"]
    assert ACME.secret not in server.output()
