"""Per-answer actions in Chromium (Playwright) against a real server on the tiny model:
copy copies the answer only, regenerate and edit ask the last question again (the server's
conversation drops the earlier answer), and images keep their numbers across the
conversation in the chat and the stages (the prompt's labels: tests/engine/test_vision_ids)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.browser import log_in_page
from tests.support.chat_page import attach, chat_text, send, settled, wait_stage, wait_text
from tests.support.server import ServerProcess, tiny_model_server

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

BOTS = "#qwen-chat [data-testid='bot']"
BOT_BUTTONS = "#qwen-chat .message-buttons-left"  # beside each answer and stage message
USER_BUTTONS = "#qwen-chat .message-buttons-right"  # beside each question and image


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = tiny_model_server(tmp_path_factory, max_new_tokens=12)  # answers end quickly
    yield process
    process.stop()


@pytest.fixture
def page(browser: Browser, server: ServerProcess) -> Iterator[Page]:
    """A logged-in English chat tab that may read the clipboard."""
    context = browser.new_context(
        locale="en-US",
        viewport={"width": 1200, "height": 1100},
        permissions=["clipboard-read", "clipboard-write"],
    )
    tab = context.new_page()
    log_in_page(tab, server)
    tab.wait_for_selector("#qwen-question textarea")
    yield tab
    context.close()


def answered(page: Page, question: str, count: int = 1) -> None:
    send(page, question)
    wait_text(page, "Done in", count)
    settled(page)


def reloaded(page: Page, server: ServerProcess) -> str:
    """The chat as the server's conversation draws it after a reload."""
    page.goto(server.url + "/")
    page.wait_for_function(
        "() => document.querySelectorAll('#qwen-chat .bot-row').length > 0", timeout=30_000
    )
    return chat_text(page)


def test_copy_copies_the_answer_text_only(page: Page, tmp_path: Path, artifacts: Path) -> None:
    attach(page, tmp_path, 1)
    answered(page, "What colour is it?")
    text = page.locator(BOTS).last.inner_text().strip()
    assert text
    page.locator(BOTS).last.hover()
    page.locator(BOT_BUTTONS).last.locator("button[data-qwen-label='label_copy']").click()
    copied = str(page.evaluate("navigator.clipboard.readText()"))
    page.screenshot(path=str(artifacts / "chat-copy-answer.png"), full_page=True)
    assert copied.strip() == text
    assert "Done in" not in copied and "•" not in copied and "Encoding" not in copied


def test_regenerate_answers_the_same_question_again(
    page: Page, server: ServerProcess, tmp_path: Path
) -> None:
    attach(page, tmp_path, 2)
    answered(page, "Which image is red?")
    page.locator(f"{BOT_BUTTONS} button[data-qwen-label='label_retry']").last.click()
    wait_stage(page, "Encoding image 2/2 (cached)")  # the same images, seen again
    wait_text(page, "Done in")
    settled(page)
    assert chat_text(page).count("Which image is red?") == 1
    assert page.locator("#qwen-chat img").count() == 2
    after = reloaded(page, server)  # the server holds one turn, not two
    assert after.count("Which image is red?") == 1
    assert page.locator("#qwen-chat img").count() == 2


def test_edit_the_last_question_and_send_it_again(
    page: Page, server: ServerProcess, tmp_path: Path, artifacts: Path
) -> None:
    attach(page, tmp_path, 1)
    answered(page, "Is there a circle?")
    answered(page, "Is there a square?", 2)
    edit_buttons = page.locator(f"{USER_BUTTONS} button[data-qwen-label='label_edit']")
    edit_buttons.first.click()  # an earlier question: put back, with a message
    page.locator("#qwen-chat textarea").first.fill("Is there a star?")
    page.locator("#qwen-chat button[data-qwen-label='label_send']").first.click()
    page.wait_for_selector("text=Only the last question can be edited", timeout=15_000)
    page.wait_for_function(
        "() => document.querySelector('#qwen-chat').innerText.includes('Is there a circle?')",
        timeout=15_000,
    )
    assert "Is there a star?" not in chat_text(page)
    settled(page)
    page.locator(f"{USER_BUTTONS} button[data-qwen-label='label_edit']").last.click()
    page.locator("#qwen-chat textarea").first.fill("Is there a triangle?")
    page.locator("#qwen-chat button[data-qwen-label='label_send']").first.click()
    wait_text(page, "Is there a triangle?")
    wait_stage(page, "Encoding image 1/1 (cached)")
    wait_text(page, "Done in", 2)
    settled(page)
    shown = chat_text(page)
    assert "Is there a square?" not in shown and shown.count("Done in") == 2
    page.screenshot(path=str(artifacts / "chat-edit-last-question.png"), full_page=True)
    after = reloaded(page, server)
    assert "Is there a square?" not in after
    assert after.index("Is there a circle?") < after.index("Is there a triangle?")


def test_images_keep_their_numbers_across_the_conversation(page: Page, tmp_path: Path) -> None:
    attach(page, tmp_path, 2)
    answered(page, "How many shapes?")
    attach(page, tmp_path, 1, name="more")
    answered(page, "And in the third image?", 2)
    try:  # the chat's last redraw may still be on its way when Send is back
        page.wait_for_function(
            "() => document.querySelectorAll('#qwen-chat img').length === 3", timeout=10_000
        )
    except PlaywrightTimeout:
        alts = page.locator("#qwen-chat img").evaluate_all("els => els.map(e => e.alt)")
        pytest.fail(f"the chat shows {len(alts)} images, not 3: {alts}")
    wait_stage(page, "Decoding image 3/3")  # the new image is the conversation's third
    wait_stage(page, "Encoding image 3/3")
