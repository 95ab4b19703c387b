"""Make the README's screenshot of the chat page (docs/chat-page.png): a real
``qwen-ui serve`` with the shipped demo model on a fresh home, logged in through the
login form in Debian's chromium, one of the examples asked and answered.

    PYTHONPATH=. python scripts/screenshot.py [--out docs/chat-page.png] [--dark]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from tests.support.browser import chromium, log_in_page
from tests.support.page import ask_example, small_png, tall_chat, wait_for_chat_page
from tests.support.server import ServerProcess

log = logging.getLogger("screenshot")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/chat-page.png"))
    parser.add_argument("--dark", action="store_true", help="dark colour scheme")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll otherwise
    with tempfile.TemporaryDirectory() as home:
        server = ServerProcess(Path(home), env={"QWEN_UI_DEVICE": "cpu"})
        try:
            server.wait_for("/login")
            with chromium() as browser:
                context = browser.new_context(
                    locale="en-US",
                    viewport={"width": 1280, "height": 1400},  # the chat and the box
                    color_scheme="dark" if args.dark else "light",
                )
                page = context.new_page()
                log_in_page(page, server)
                wait_for_chat_page(page)
                tall_chat(page, 860)  # the answer, its question and most of its three images
                ask_example(page)
                page.evaluate("window.scrollTo(0, 0)")
                small_png(page, args.out)
                context.close()
        finally:
            server.stop()
    log.info("wrote %s (%d bytes)", args.out, args.out.stat().st_size)


if __name__ == "__main__":
    main()
