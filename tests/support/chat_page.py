"""Driving the chat page in a browser: attach images, send a question, wait for text."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.engine.conftest import png

BOX = "#qwen-question textarea"
STOP = "#qwen-stop"


def attach(page: Page, folder: Path, n: int, name: str = "shape") -> list[Path]:
    paths = []
    for i in range(n):
        path = folder / f"{name}{i}.png"
        path.write_bytes(png((64 + 8 * i, 48), (200, 40 * i, 60)))
        paths.append(path)
    page.set_input_files("#qwen-question input[type=file]", [str(p) for p in paths])
    page.wait_for_function(
        "n => document.querySelectorAll('#qwen-question .thumbnail-item').length >= n",
        arg=n,
        timeout=15_000,
    )
    return paths


def send(page: Page, question: str) -> None:
    page.fill(BOX, question)
    page.press(BOX, "Enter")


def chat_text(page: Page) -> str:
    return page.locator("#qwen-chat").inner_text()


def wait_text(page: Page, text: str, count: int = 1, timeout: float = 60_000) -> None:
    """Until the chat shows ``text`` at least ``count`` times."""
    try:
        page.wait_for_function(
            "([t, n]) => document.querySelector('#qwen-chat').innerText.split(t).length > n",
            arg=[text, count],
            timeout=timeout,
        )
    except PlaywrightTimeout:
        pytest.fail(f"{text!r} never shown {count}x; the chat says:\n{chat_text(page)}")


def stage_logs(page: Page) -> str:
    """Every message's text as the page names it for screen readers (a collapsed stage
    message shows only its title, its aria-label holds the whole stage log)."""
    labels = page.locator("#qwen-chat [data-testid='bot']").evaluate_all(
        "items => items.map(e => e.getAttribute('aria-label') || '')"
    )
    return "\n".join(str(label) for label in labels)


def wait_stage(page: Page, text: str, count: int = 1, timeout: float = 60_000) -> None:
    """Until the stage logs mention ``text`` at least ``count`` times."""
    try:
        page.wait_for_function(
            """([t, n]) => [...document.querySelectorAll("#qwen-chat [data-testid='bot']")]
                .map(e => e.getAttribute('aria-label') || '').join('\\n').split(t).length > n""",
            arg=[text, count],
            timeout=timeout,
        )
    except PlaywrightTimeout:
        pytest.fail(f"{text!r} never in the stage log {count}x:\n{stage_logs(page)}")


def settled(page: Page) -> None:
    """The turn's last step ran (it lists the conversation, Send is back)."""
    page.wait_for_function(
        "() => document.querySelectorAll('#qwen-history label').length > 0"
        " && document.querySelector('#qwen-question button.submit-button')"
        " && !document.querySelector('#qwen-stop')",
        timeout=30_000,
    )
