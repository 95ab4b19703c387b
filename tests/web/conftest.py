"""Browser fixtures shared by the chat's browser tests; each module brings its own
``server`` (its settings differ)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page

from tests.support.browser import chromium, log_in_page
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[Page]:
    """A logged-in English chat tab of the module's server."""
    context = browser.new_context(locale="en-US", viewport={"width": 1200, "height": 1100})
    tab = context.new_page()
    log_in_page(tab, server)
    tab.wait_for_selector("#qwen-question textarea")
    yield tab
    context.close()
