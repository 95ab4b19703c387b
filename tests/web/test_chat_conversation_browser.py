"""The page shows what the server's conversation holds (Chromium via Playwright, tiny
model): images stay after Stop and after an image-only submit, a refused attachment goes
back into the box, the trash icon starts afresh on the server too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.engine.conftest import png
from tests.support.server import ServerProcess, tiny_model_server

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

STOP = "#qwen-stop"  # shown in the Send button's place while an answer runs
SEND = "#qwen-question button.submit-button"
STAGES = "#qwen-chat .message.bot, #qwen-chat [data-testid='bot']"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = tiny_model_server(tmp_path_factory, max_new_tokens=2000, endless=True)
    yield process
    process.stop()


def attach(page: Page, folder: Path, n: int, extra: list[Path] | None = None) -> None:
    paths = []
    for i in range(n):
        path = folder / f"shape{i}.png"
        path.write_bytes(png((64 + 8 * i, 48), (200, 40 * i, 60)))
        paths.append(str(path))
    paths += [str(p) for p in extra or []]
    page.set_input_files("#qwen-question input[type=file]", paths)
    page.wait_for_function(
        "n => document.querySelectorAll('#qwen-question .thumbnail-item').length >= n",
        arg=len(paths),
        timeout=15_000,
    )


def send(page: Page, question: str) -> None:
    page.fill("#qwen-question textarea", question)
    page.press("#qwen-question textarea", "Enter")


def chat_images(page: Page) -> int:
    return page.locator("#qwen-chat img").count()


def chat_text(page: Page) -> str:
    return page.locator("#qwen-chat").inner_text()


def wait_text(page: Page, text: str, timeout: float = 60_000) -> None:
    try:
        page.wait_for_function(
            "t => document.querySelector('#qwen-chat').innerText.includes(t)",
            arg=text,
            timeout=timeout,
        )
    except PlaywrightTimeout:
        pytest.fail(f"{text!r} never shown; the chat says:\n{chat_text(page)}")


def settled(page: Page) -> None:
    """The turn's last step ran (it lists the conversation in the sidebar): the box
    submits again."""
    page.wait_for_function(
        "() => document.querySelectorAll('#qwen-history label').length > 0"
        " && document.querySelector('#qwen-question button.submit-button')"
        " && !document.querySelector('#qwen-stop')",
        timeout=30_000,
    )


def stop(page: Page, stopped_before: int) -> None:
    page.click(STOP)
    page.wait_for_function(
        "n => (document.querySelector('#qwen-chat').innerText.match(/Stopped/g) || []).length > n",
        arg=stopped_before,
        timeout=15_000,
    )


def test_stop_keeps_the_images_and_the_same_question_sees_them(
    page: Page, tmp_path: Path, artifacts: Path
) -> None:
    attach(page, tmp_path, 2)
    send(page, "Which image is red?")
    wait_text(page, "Encoding image")
    stop(page, 0)
    assert chat_images(page) == 2  # still shown: the conversation still holds them
    settled(page)
    send(page, "Which image is red?")  # no re-attaching
    # image 1 was encoded before the stop took effect; both are in the prompt again
    wait_text(page, "Encoding image 1/2 (cached)")
    wait_text(page, "Encoding image 2/2")
    page.wait_for_selector("#qwen-chat >> text=Answering", timeout=60_000)
    stop(page, 1)
    assert chat_images(page) == 2
    page.screenshot(path=str(artifacts / "chat-stop-keeps-images.png"), full_page=True)


def test_image_only_submit_then_a_question(page: Page, tmp_path: Path) -> None:
    attach(page, tmp_path, 2)
    page.press("#qwen-question textarea", "Enter")
    wait_text(page, "Please type a question.")
    page.wait_for_function(  # the images stay in the chat: the conversation holds them
        "() => document.querySelectorAll('#qwen-chat img').length === 2", timeout=10_000
    )
    settled(page)
    send(page, "Which one is red?")
    wait_text(page, "Encoding image 2/2")
    wait_text(page, "Answering")
    stop(page, 0)


def test_refused_attachment_stays_in_the_box_with_one_message(
    page: Page, tmp_path: Path, artifacts: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    attach(page, tmp_path, 1, [notes])
    send(page, "What is this?")
    wait_text(page, "not a supported format")
    assert chat_images(page) == 0
    page.wait_for_function(
        "document.querySelector('#qwen-question textarea').value === 'What is this?'",
        timeout=10_000,
    )
    assert page.locator("#qwen-question .thumbnail-item").count() == 2
    assert chat_text(page).count("not a supported format") == 1
    page.screenshot(path=str(artifacts / "chat-refused-attachment.png"), full_page=True)


def test_trash_clears_the_server_conversation(page: Page, tmp_path: Path) -> None:
    attach(page, tmp_path, 2)
    send(page, "Which image is red?")
    wait_text(page, "Answering")
    stop(page, 0)
    settled(page)  # the stopped turn's last update is in (it names the conversation)
    page.click("#qwen-chat [data-qwen-label=label_clear]")  # named by static/a11y.js
    page.wait_for_function(
        "!document.querySelector('#qwen-chat').innerText.includes('Which image')",
        timeout=10_000,
    )
    send(page, "And now?")
    wait_text(page, "Answering")
    assert "Encoding image" not in chat_text(page)  # a fresh conversation: no image
    assert chat_images(page) == 0
    stop(page, 0)


def test_header_names_the_user_and_logout_can_be_cancelled(
    page: Page, server: ServerProcess
) -> None:
    header = page.locator(".qwen-header #qwen-logout")
    header.locator("text=demo/demo").wait_for(timeout=15_000)
    assert "Logged in as demo/demo" in header.inner_text()
    footer = page.locator("footer")
    assert "Settings" not in footer.inner_text()  # Gradio's settings panel is gone
    assert page.locator("#qwen-chat button[title='Share'], #qwen-chat .share-button").count() == 0
    page.click("#qwen-logout a.qwen-logout")
    page.wait_for_url("**/logout")
    page.click("a.cancel")
    page.wait_for_url(server.url + "/")
    page.wait_for_selector("#qwen-question textarea")  # still logged in
    page.goto(server.url + "/?lang=zh")
    page.locator("#qwen-logout >> text=当前用户").wait_for(timeout=15_000)


def test_counters_and_stop_in_the_send_buttons_place(page: Page, tmp_path: Path) -> None:
    assert page.locator(SEND).is_visible() and page.locator(STOP).count() == 0
    attach(page, tmp_path, 2)
    page.wait_for_selector("#qwen-counter >> text=images 2/8", timeout=10_000)
    page.fill("#qwen-question textarea", "x" * 3_300)  # near the limit of 4,000 (from 80 %)
    page.wait_for_selector("#qwen-counter >> text=characters 3,300/4,000", timeout=10_000)
    page.fill("#qwen-question textarea", "x" * 4_001)
    page.wait_for_selector("#qwen-counter .over >> text=characters 4,001/4,000", timeout=10_000)
    page.fill("#qwen-question textarea", "Which image is red?")
    page.wait_for_function(
        "() => !document.querySelector('#qwen-counter').innerText.includes('characters')",
        timeout=10_000,
    )
    page.press("#qwen-question textarea", "Enter")
    page.wait_for_selector(STOP, timeout=30_000)
    page.wait_for_selector(SEND, state="detached", timeout=10_000)
    wait_text(page, "Encoding image")
    stop(page, 0)
    page.wait_for_selector(SEND, timeout=15_000)
    page.wait_for_selector(STOP, state="detached", timeout=10_000)
    page.wait_for_function(
        "() => !document.querySelector('#qwen-counter').innerText.includes('images')",
        timeout=10_000,
    )  # the box was emptied: the conversation holds the images now
