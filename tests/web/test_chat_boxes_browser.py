"""Boxes in the chat, in Chromium, on the shipped demo model's own grounding answer: the
box is drawn where the shape is, "Show boxes" hides and shows it, the image downloads, a
reload draws it again, and the sidebar exports the conversation."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Page

from qwen_ui.demo.evaluate import located
from qwen_ui.engine.annotate import PALETTE
from tests.support.grounding import Grounding, grounding
from tests.support.server import ServerProcess
from tests.web.test_chat_conversation_browser import send, wait_text
from tests.web.test_chat_history_browser import open_sidebar

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

RGB = tuple[int, int, int]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"QWEN_UI_DEVICE": "cpu", "GRADIO_ANALYTICS_ENABLED": "False"}
    process = ServerProcess(tmp_path_factory.mktemp("home"), env=env)
    process.wait_for("/login")
    yield process
    process.stop()


def ask_where(page: Page, folder: Path) -> Grounding:
    case = grounding()
    path = folder / "scene.png"
    case.sample.images()[0].save(path)
    page.set_input_files("#qwen-question input[type=file]", [str(path)])
    page.wait_for_function(
        "() => document.querySelectorAll('#qwen-question .thumbnail-item').length === 1"
    )
    send(page, case.sample.question)
    wait_text(page, f"{case.label} (image 1)", timeout=180_000)
    return case


def located_image(page: Page, marker: str = "-boxes-") -> Image.Image:
    """The chat's located image as the browser got it (its src, with the page's cookie)."""
    selector = f"#qwen-chat img[src*='{marker}']"
    page.wait_for_selector(selector, timeout=30_000)
    src = page.locator(selector).first.get_attribute("src")
    assert src
    response = page.request.get(src)
    assert response.ok, response.status
    return Image.open(io.BytesIO(response.body())).convert("RGB")


def edge_pixels(image: Image.Image, box: tuple[float, ...]) -> list[RGB]:
    """Pixels along the box's left, right and bottom edges (the label tab sits on top),
    within 2 px of where they should be."""
    x1, y1, x2, y2 = (round(v) for v in box)
    mid_x, mid_y = (x1 + x2) // 2, (y1 + y2) // 2
    points = [(x1 + d, mid_y) for d in range(-2, 3)] + [(x2 + d, mid_y) for d in range(-2, 3)]
    points += [(mid_x, y2 + d) for d in range(-2, 3)]
    return [image.getpixel(p) for p in points]  # type: ignore[misc]


def test_the_box_is_drawn_where_the_shape_is_and_can_be_hidden(page: Page, tmp_path: Path) -> None:
    case = ask_where(page, tmp_path)
    text = page.locator("#qwen-chat").inner_text()
    assert "bbox_2d" not in text  # labels, not the model's JSON
    drawn = located_image(page)
    scene = case.sample.images()[0].convert("RGB")
    assert drawn.size == scene.size  # the original file's own pixels
    colour = PALETTE[0]  # the answer's first (only) label
    on_edges = edge_pixels(drawn, case.shape_box)
    assert on_edges.count(colour) >= 3, on_edges  # left, right and bottom edges drawn
    assert colour not in edge_pixels(scene, case.shape_box)  # not the picture's own colour
    assert page.locator("#qwen-chat a[data-testid='download-link'][href*='-boxes-']").count()
    assert not page.locator("#qwen-chat button[aria-label='Share']").first.is_visible()
    # hide the boxes: the same image without them; show them again
    page.click("#qwen-show-boxes input[type=checkbox]")
    plain = located_image(page, "-plain-")
    assert page.locator("#qwen-chat img[src*='-boxes-']").count() == 0
    assert colour not in edge_pixels(plain, case.shape_box)
    assert plain.tobytes() == scene.tobytes()  # the upright original, untouched
    page.click("#qwen-show-boxes input[type=checkbox]")
    assert edge_pixels(located_image(page), case.shape_box).count(colour) >= 3
    # a reload draws the conversation from the server, boxes included
    page.reload()
    page.wait_for_selector("#qwen-chat")
    wait_text(page, f"{case.label} (image 1)")
    assert edge_pixels(located_image(page), case.shape_box).count(colour) >= 3


def test_the_sidebar_exports_the_conversation(page: Page, tmp_path: Path) -> None:
    case = ask_where(page, tmp_path)
    open_sidebar(page)
    link = page.locator("#qwen-export a.qwen-export-zip")
    link.wait_for(state="visible", timeout=15_000)
    with page.expect_download() as started:
        link.click()
    archive = zipfile.ZipFile(started.value.path())
    markdown = archive.read("conversation.md").decode()
    assert case.sample.question in markdown and f"{case.label} (image 1)" in markdown
    body = json.loads(archive.read("conversation.json"))
    (turn,) = body["turns"]
    assert turn["question"] == case.sample.question
    assert located(turn["answer"], case.sample.answer)  # the model's own box, where the shape is
    assert turn["model"] == "qwen-ui/shapes-vl-demo" and turn["boxes"][0]["label"] == case.label
    assert any(name.endswith("-boxes-1.png") for name in archive.namelist())
    with page.expect_download() as as_json:
        page.click("#qwen-export a.qwen-export-json")
    assert json.loads(Path(as_json.value.path()).read_text())["turns"][0]["boxes"]


def test_the_switch_and_the_links_follow_the_language(page: Page, tmp_path: Path) -> None:
    ask_where(page, tmp_path)
    page.click("text=中文")
    page.wait_for_selector("#qwen-show-boxes >> text=在图片上显示框", timeout=15_000)
    open_sidebar(page)
    link = page.locator("#qwen-export a.qwen-export-zip")
    assert link.inner_text() == "Markdown + 图片（zip）"
    assert "lang=zh" in (link.get_attribute("href") or "")
    page.click("#qwen-new-chat")  # no conversation open: nothing to export, said so
    page.wait_for_selector("#qwen-export >> text=请先提问", timeout=15_000)
    assert page.locator("#qwen-export a").count() == 0
