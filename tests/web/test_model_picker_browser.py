"""The model picker in Debian's chromium against a real server offering the demo model's
two revisions: the picker lists them after "automatic", shows the demo's scope note, and
the question goes to the picked revision (only it loads)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page

from qwen_ui.demo import scenes
from qwen_ui.settings import DEMO_MODEL_ID
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

BF16, AWQ = f"{DEMO_MODEL_ID}@bf16", f"{DEMO_MODEL_ID}@awq"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "QWEN_UI_DEVICE": "cpu",
        "QWEN_UI_MODELS": f"{BF16},{AWQ}",
        "QWEN_UI_MAX_NEW_TOKENS": "8",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    process = ServerProcess(tmp_path_factory.mktemp("home"), env=env)
    process.wait_for("/login")
    yield process
    process.stop()


def states(server: ServerProcess) -> dict[str, str]:
    rows = httpx.get(server.url + "/healthz", timeout=10).json()["models"]
    return {row["model"]: row["state"] for row in rows}


def test_pick_the_awq_revision_and_ask(
    page: Page, server: ServerProcess, tmp_path: Path, artifacts: Path
) -> None:
    picker = page.locator("#qwen-model")
    picker.wait_for(state="visible", timeout=30_000)
    page.wait_for_selector("#qwen-model >> text=/Understands questions/", timeout=30_000)  # scope
    picker.locator("input").click()
    options = page.locator("ul[role=listbox] li")
    options.first.wait_for(timeout=10_000)
    # the selected option carries a check mark on a line of its own
    texts = [
        options.nth(i).inner_text().strip().lstrip("✓").strip() for i in range(options.count())
    ]
    assert texts[0].startswith("Automatic") and texts[1:] == [BF16, AWQ]
    options.nth(2).click()
    page.wait_for_function(
        f"document.querySelector('#qwen-model input').value === '{AWQ}'", timeout=10_000
    )
    sample = next(s for s in scenes.held_out(20, seed=1) if len(s.scenes) == 1)
    image = tmp_path / "scene.png"
    sample.images()[0].save(image)
    page.set_input_files("#qwen-question input[type=file]", [str(image)])
    page.wait_for_selector("#qwen-question .thumbnail-item", timeout=15_000)
    page.fill("#qwen-question textarea", "How many shapes are there?")
    page.press("#qwen-question textarea", "Enter")
    page.wait_for_selector("#qwen-chat >> text=/Done in/", timeout=180_000)
    page.wait_for_function(  # the status line names each model's state
        "document.querySelector('#qwen-status').innerText.includes('@awq ready')",
        timeout=30_000,
    )
    page.screenshot(path=str(artifacts / "chat-model-picker.png"), full_page=True)
    assert states(server) == {BF16: "not_loaded", AWQ: "ready"}
