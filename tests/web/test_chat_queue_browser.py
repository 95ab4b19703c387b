"""While an answer streams (Chromium via Playwright, tiny model with long answers): the box
takes the next question, sending it then is refused with a message and the text stays; a
question that admission holds in line shows its place ("Waiting in line: position 1"),
then its answer, when the tenant's budget lets one question run at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.tenants import Limits
from tests.support.browser import log_in_page
from tests.support.chat_page import (
    BOX,
    STOP,
    attach,
    send,
    settled,
    stage_logs,
    wait_stage,
    wait_text,
)
from tests.support.server import ServerProcess, tiny_model_server

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = tiny_model_server(tmp_path_factory, max_new_tokens=2000, endless=True)
    yield process
    process.stop()


def one_at_a_time(server: ServerProcess) -> None:
    """The demo tenant may run one question at a time (the server reloads the file)."""
    path = server.home / "tenants.toml"
    found = tenants_file.load(path)
    demo = found.tenants["demo"]
    limited = demo.model_copy(update={"limits": Limits(concurrent_requests=1)})
    tenants_file.save(path, tenants_file.with_tenant(found, limited))


def new_tab(browser: Browser, server: ServerProcess) -> Page:
    context = browser.new_context(locale="en-US", viewport={"width": 1200, "height": 1100})
    tab = context.new_page()
    log_in_page(tab, server)
    tab.wait_for_selector(BOX)
    return tab


def stop(page: Page) -> None:
    page.click(STOP)
    wait_text(page, "Stopped")
    settled(page)


def test_the_box_takes_the_next_question_while_an_answer_streams(
    page: Page, tmp_path: Path, artifacts: Path
) -> None:
    attach(page, tmp_path, 1)
    send(page, "Which image is red?")
    wait_text(page, "Answering")
    assert page.locator(BOX).is_enabled()
    page.fill(BOX, "And which one is blue?")  # typed while the answer streams
    page.press(BOX, "Enter")
    page.wait_for_selector("text=An answer is still being written", timeout=15_000)
    page.screenshot(path=str(artifacts / "chat-typing-while-answering.png"), full_page=True)
    assert page.input_value(BOX) == "And which one is blue?"  # refused, kept
    assert "And which one is blue?" not in page.locator("#qwen-chat").inner_text()
    assert page.locator(STOP).is_visible()  # the running answer keeps its Stop button
    stop(page)
    assert page.input_value(BOX) == "And which one is blue?"  # still there to send
    page.press(BOX, "Enter")
    wait_text(page, "And which one is blue?")
    wait_text(page, "Answering")
    stop(page)


def test_a_question_held_in_line_shows_its_place_then_its_answer(
    browser: Browser, server: ServerProcess, tmp_path: Path, artifacts: Path
) -> None:
    one_at_a_time(server)
    first, second = new_tab(browser, server), new_tab(browser, server)
    try:
        attach(first, tmp_path, 1)
        send(first, "Which image is red?")
        wait_text(first, "Answering")
        attach(second, tmp_path, 1, name="other")
        send(second, "Which image is blue?")
        wait_text(second, "Waiting in line: position 1")
        second.screenshot(path=str(artifacts / "chat-waiting-in-line.png"), full_page=True)
        # the tab a user clicks in is the one in front: Chromium may hold back the frames
        # of a tab behind another (a click there waited 30 s for a frame in CI)
        first.bring_to_front()
        stop(first)  # the first answer gives its place up
        second.bring_to_front()
        wait_text(second, "Answering")
        wait_stage(second, "Waiting in line: position 1")
        assert stage_logs(second).count("Waiting in line") == 1  # its line, updated in place
        stop(second)
    finally:
        first.context.close()
        second.context.close()
