"""The README's screenshot of a box drawn in the chat, taken from a real page:

    python -m tests.support.boxes_screenshot docs/img/chat-boxes.png

A fresh ``qwen-ui serve`` (embedded defaults: the shipped demo model, on the CPU) in a
temporary home; Chromium logs in, attaches a held-out grounding scene, asks "Where is the
…?" and photographs the chat with the model's answer and the controls under it.
"""

from __future__ import annotations

import argparse
import io
import logging
import tempfile
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page

from tests.support.browser import chromium, log_in_page
from tests.support.grounding import grounding
from tests.support.page import tall_chat
from tests.support.server import ServerProcess

log = logging.getLogger(__name__)
VIEWPORT = {"width": 980, "height": 1800}


def ask(page: Page, folder: Path) -> None:
    case = grounding()
    path = folder / "scene.png"
    case.sample.images()[0].save(path)
    page.set_input_files("#qwen-question input[type=file]", [str(path)])
    page.wait_for_function(
        "() => document.querySelectorAll('#qwen-question .thumbnail-item').length === 1"
    )
    page.fill("#qwen-question textarea", case.sample.question)
    page.press("#qwen-question textarea", "Enter")
    page.wait_for_selector("#qwen-chat img[src*='-boxes-']", timeout=180_000)
    page.wait_for_timeout(1500)  # the image's fade-in


def photograph(page: Page) -> bytes:
    """The chat and the row of controls under it."""
    chat = page.locator("#qwen-chat").bounding_box()
    controls = page.locator("#qwen-show-boxes").bounding_box()
    assert chat is not None and controls is not None
    bottom = controls["y"] + controls["height"] + 8
    clip = {"x": chat["x"], "y": chat["y"], "width": chat["width"], "height": bottom - chat["y"]}
    return page.screenshot(clip=clip, full_page=True)


def small_png(data: bytes) -> bytes:
    """The screenshot in 256 colours: a fraction of the bytes, the same picture to the eye."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    out = io.BytesIO()
    image.quantize(256, dither=Image.Dither.NONE).save(out, "PNG", optimize=True)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = {"QWEN_UI_DEVICE": "cpu", "GRADIO_ANALYTICS_ENABLED": "False"}
        server = ServerProcess(home, env=env)
        try:
            server.wait_for("/login")
            with chromium() as browser:
                page = browser.new_context(locale="en-US", viewport=VIEWPORT).new_page()
                log_in_page(page, server)
                page.wait_for_selector("#qwen-question textarea")
                tall_chat(page, 1150)
                ask(page, home)
                args.out.write_bytes(small_png(photograph(page)))
        finally:
            server.stop()
    log.warning("wrote %s (%d bytes)", args.out, args.out.stat().st_size)


if __name__ == "__main__":
    logging.basicConfig(format="%(message)s")
    main()
