"""What the page-level browser tests and the README screenshot share: viewports, asking
one of the demo model's examples through the page, a taller chat for screenshots, and a
small PNG of the page."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page, ViewportSize

DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
VIEWPORTS: dict[str, ViewportSize] = {"desktop": DESKTOP, "phone": PHONE}
THREE_IMAGES = 6  # the demo examples' "Which image has the most …?" (3 images)


def wait_for_chat_page(page: Page) -> None:
    """The chat page is drawn and its load events have run (status, labels, scripts)."""
    page.wait_for_selector("#qwen-question textarea", timeout=60_000)
    page.wait_for_selector("#qwen-status >> text=qwen-ui/shapes-vl-demo", timeout=60_000)
    page.wait_for_function(
        "document.querySelector('#qwen-question textarea')?.hasAttribute('aria-label')",
        timeout=30_000,
    )
    wait_until_loaded(page)


def wait_until_loaded(page: Page) -> None:
    """No block of the page is waiting for an update (Gradio marks those while loading)."""
    page.wait_for_function(
        "[...document.querySelectorAll('[data-testid=status-tracker]')]"
        ".every(tracker => tracker.classList.contains('hide'))"
        " && !document.querySelector('.pending')",
        timeout=30_000,
    )


def ask_example(page: Page, index: int = THREE_IMAGES, lang: str = "en") -> None:
    """Click one of the demo's examples (it fills the question box) and send it; returns
    when the answer is done."""
    page.locator(f"#qwen-examples-{lang} .gallery-item").nth(index).click()
    page.wait_for_function(
        "document.querySelectorAll('#qwen-question .thumbnail-item').length > 0",
        timeout=15_000,
    )
    page.press("#qwen-question textarea", "Enter")
    page.wait_for_selector("#qwen-chat >> text=/Done in|完成，用时/", timeout=120_000)
    page.wait_for_selector("#qwen-stop", state="hidden", timeout=30_000)  # the answer's end
    page.wait_for_function(
        "[...document.querySelectorAll('#qwen-chat img')].every(i => i.alt)", timeout=10_000
    )
    wait_until_loaded(page)


def tall_chat(page: Page, height_px: int) -> None:
    """Draw the chat ``height_px`` tall instead of its 460 px, so that a screenshot shows
    more of the conversation unscrolled; nothing else of the page changes."""
    css = f"#qwen-chat {{ height: {height_px}px !important; max-height: none !important; }}"
    page.add_style_tag(content=css)


def small_png(page: Page, path: Path, colours: int = 128) -> Path:
    """A screenshot of the viewport as a palette PNG (a few tens of KiB)."""
    shot = Image.open(io.BytesIO(page.screenshot(type="png")))
    small = shot.convert("RGB").quantize(colors=colours, dither=Image.Dither.NONE)
    small.save(path, "PNG", optimize=True)
    return path
