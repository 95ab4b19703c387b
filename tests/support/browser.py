"""Debian's chromium driven by Playwright: one launch recipe and one login for all
browser tests (the flags keep chromium off the network, which this machine lacks)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.server import ServerProcess

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    if shutil.which("chromium") is None:
        pytest.fail("Debian chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def log_in_page(
    page: Page, server: ServerProcess, tenant: str = "demo", user: str = "demo"
) -> None:
    """Open the app, land on the login page, log in as a local user, back on the app."""
    page.goto(server.url + "/")
    page.wait_for_url("**/login**")
    page.fill("#tenant", tenant)
    page.check("#m-local")
    page.fill("#user", user)
    page.fill("#password", server.demo_password())
    page.click("button[type=submit]")
    page.wait_for_url(server.url + "/")
