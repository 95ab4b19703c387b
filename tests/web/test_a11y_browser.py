"""The login, logout and chat pages in Debian's chromium, checked by axe-core (vendored,
injected) in light and dark, on a desktop and a phone; the phone's first screen and tap
targets; names and alt texts in the page's language; the model's scope beside the
examples; the README's screenshot."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.sync_api import Browser, BrowserContext, Page

from qwen_ui.demo.examples import EXAMPLE_KINDS, SCOPE
from tests.support import a11y
from tests.support.browser import log_in_page
from tests.support.page import PHONE, VIEWPORTS, ask_example, small_png, wait_for_chat_page
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

SCHEMES = ("light", "dark")
TARGET_PX = 44
# every control a finger may tap: the radio and file inputs are drawn by their labels
TAPPABLE = """() => {
  const selector = "button, [role=button], a[href], textarea, select, " +
    "label:has(input[type=radio]), label:has(input[type=checkbox]), " +
    "input:not([type=hidden]):not([type=radio]):not([type=checkbox]):not([type=file])";
  return [...document.querySelectorAll(selector)].flatMap(el => {
    const r = el.getBoundingClientRect(), style = getComputedStyle(el);
    if (!r.width || !r.height || r.right <= 0 || r.left >= innerWidth) return [];
    if (style.visibility === "hidden" || el.closest("[aria-hidden=true]")) return [];
    const name = el.getAttribute("aria-label") || el.textContent.trim().slice(0, 30);
    return [{name, cls: String(el.className).slice(0, 40), w: r.width, h: r.height}];
  });
}"""
# words of the page's title that the layout broke across two lines
BROKEN_WORDS = """() => {
  const h1 = document.querySelector(".qwen-header h1");
  const broken = [];
  const walker = document.createTreeWalker(h1, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (tops.size > 1) broken.push(match[0]);
    }
  }
  return broken;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("home"), env={"QWEN_UI_DEVICE": "cpu"})
    process.wait_for("/login")
    yield process
    process.stop()


def _context(browser: Browser, viewport: str, scheme: str = "light", **kw: Any) -> BrowserContext:
    phone = viewport == "phone"
    return browser.new_context(
        locale=kw.pop("locale", "en-US"),
        color_scheme=scheme,  # type: ignore[arg-type]
        viewport=VIEWPORTS[viewport],
        is_mobile=phone,
        has_touch=phone,
        **kw,
    )


# axe leaves placeholders out of its contrast check: the question box's, measured here
PLACEHOLDER_CONTRAST = """() => {
  const rgb = text => text.match(/[\\d.]+/g).map(Number);
  const box = document.querySelector("#qwen-question textarea");
  const fg = rgb(getComputedStyle(box, "::placeholder").color);
  let el = box, bg = [0, 0, 0, 0];
  while (el && (bg.length > 3 && bg[3] === 0)) {
    bg = rgb(getComputedStyle(el).backgroundColor);
    el = el.parentElement;
  }
  const alpha = fg.length > 3 ? fg[3] : 1;  // a translucent colour over its background
  const mixed = fg.slice(0, 3).map((c, i) => alpha * c + (1 - alpha) * bg[i]);
  const lum = c => {
    const [r, g, b] = c.map(v => v / 255).map(v => v <= 0.03928 ? v / 12.92 :
      ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [hi, lo] = [lum(mixed), lum(bg.slice(0, 3))].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}"""


@dataclass
class Tab:
    page: Page
    name: str  # viewport-scheme, for artifacts


def _chat_tab(
    browser: Browser, server: ServerProcess, viewport: str, scheme: str, **kw: Any
) -> Tab:
    context = _context(browser, viewport, scheme, **kw)
    page = context.new_page()
    log_in_page(page, server)
    wait_for_chat_page(page)
    return Tab(page, f"{viewport}-{scheme}")


@pytest.fixture
def chat_tab(
    request: pytest.FixtureRequest, browser: Browser, server: ServerProcess
) -> Iterator[Tab]:
    """A logged-in chat tab in the viewport and colour scheme of the test's parameters."""
    tab = _chat_tab(browser, server, *request.param)
    yield tab
    tab.page.context.close()


def assert_no_serious_violations(page: Page, artifacts: Path, name: str) -> None:
    result = a11y.run_axe(page)
    a11y.save(result, artifacts / f"axe-{name}.json")
    found = a11y.failing(result)
    assert not found, f"axe on {name}:\n{a11y.report(found)}"


@pytest.mark.parametrize("viewport", VIEWPORTS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_login_page_has_no_serious_violations(
    browser: Browser, server: ServerProcess, artifacts: Path, scheme: str, viewport: str
) -> None:
    context = _context(browser, viewport, scheme)
    page = context.new_page()
    page.goto(server.url + "/login")
    page.wait_for_selector("#tenant")
    assert_no_serious_violations(page, artifacts, f"login-{viewport}-{scheme}")
    context.close()


BOTH = [(v, s) for v in VIEWPORTS for s in SCHEMES]


@pytest.mark.parametrize("chat_tab", BOTH, indirect=True, ids=[f"{v}-{s}" for v, s in BOTH])
def test_chat_page_has_no_serious_violations(chat_tab: Tab, artifacts: Path) -> None:
    """Empty, then answered (images, stage message, answer, its buttons), then with the
    conversations sidebar open."""
    page, name = chat_tab.page, f"chat-{chat_tab.name}"
    assert_no_serious_violations(page, artifacts, f"{name}-empty")
    assert page.evaluate(PLACEHOLDER_CONTRAST) >= 4.5
    ask_example(page)
    assert_no_serious_violations(page, artifacts, f"{name}-answered")
    open_sidebar(page)
    assert_no_serious_violations(page, artifacts, f"{name}-sidebar")


def open_sidebar(page: Page) -> None:
    page.click(".toggle-button")
    page.wait_for_selector("#qwen-history label", timeout=15_000)
    page.wait_for_timeout(500)  # its slide-in (0.3 s) has ended


def small_targets(page: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.evaluate(TAPPABLE)
    assert len(found) > 5  # the check saw the page's controls
    return [t for t in found if t["w"] < TARGET_PX - 0.5 or t["h"] < TARGET_PX - 0.5]


@pytest.mark.parametrize("chat_tab", [("phone", "light")], indirect=True, ids=["phone"])
def test_phone_first_screen_and_tap_targets(chat_tab: Tab, artifacts: Path) -> None:
    """390 x 844: the question box on the first screen, the title's words whole, every
    control at least 44 x 44 px, empty, answered and with the sidebar open."""
    page = chat_tab.page
    page.screenshot(path=str(artifacts / "phone-first-screen.png"))
    box = page.locator("#qwen-question").bounding_box()
    assert box is not None and page.evaluate("scrollY") == 0
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
    assert page.evaluate(BROKEN_WORDS) == []
    assert small_targets(page) == []
    ask_example(page)
    assert small_targets(page) == []
    open_sidebar(page)
    page.screenshot(path=str(artifacts / "phone-sidebar.png"))
    assert small_targets(page) == []


def _pick_chinese(page: Page) -> None:
    page.click("#qwen-lang label:has-text('中文')")
    page.wait_for_selector("#qwen-question >> text=问题", timeout=15_000)
    page.wait_for_function(
        "document.querySelector('#qwen-question textarea').getAttribute('aria-label') === '问题'",
        timeout=10_000,
    )


def _names(page: Page) -> dict[str, Any]:
    return dict(
        page.evaluate(
            """() => ({
      lang: document.documentElement.lang,
      question: document.querySelector("#qwen-question textarea").getAttribute("aria-label"),
      attach: document.querySelector("#qwen-question .upload-button").getAttribute("aria-label"),
      send: document.querySelector("#qwen-question .submit-button")?.getAttribute("aria-label"),
      sidebar: document.querySelector(".toggle-button").getAttribute("aria-label"),
      progress: document.querySelector(".qwen-progress").getAttribute("aria-label"),
      examples: [...document.querySelectorAll("[id^=qwen-examples-] .gallery-item")]
        .filter(item => item.offsetParent)
        .map(item => [...item.querySelectorAll("img")].map(img => img.alt)),
      chat: [...document.querySelectorAll("#qwen-chat img")].map(img => img.alt),
      unnamed: [...document.querySelectorAll("button")]
        .filter(b => b.offsetParent && !b.closest("[aria-hidden=true]"))
        .filter(b => !(b.getAttribute("aria-label") || b.textContent.trim() ||
                       [...b.querySelectorAll("img")].some(i => i.alt)))
        .map(b => b.outerHTML.slice(0, 120)),
    })"""
        )
    )


@pytest.mark.parametrize("chat_tab", [("desktop", "light")], indirect=True, ids=["desktop"])
def test_names_and_alt_texts_follow_the_page_language(chat_tab: Tab) -> None:
    page = chat_tab.page
    english = _names(page)
    assert english["lang"] == "en"
    assert english["question"] == "Question"
    assert (english["attach"], english["send"]) == ("Attach images", "Send the question")
    assert english["sidebar"] == "Show or hide the conversations"
    assert english["progress"] == "Progress"
    assert english["unnamed"] == []
    three = next(alts for alts in english["examples"] if len(alts) == 3)
    assert three[1].startswith("image 2 of 3, demo-") and three[1].endswith(".png")
    assert all(alt.startswith("image 1 of ") for alts in english["examples"] for alt in alts[:1])
    _pick_chinese(page)
    ask_example(page, lang="zh")
    chinese = _names(page)
    assert chinese["lang"] == "zh-CN"
    assert (chinese["attach"], chinese["send"]) == ("添加图片", "发送问题")
    assert chinese["sidebar"] == "显示或隐藏对话记录"
    assert chinese["progress"] == "进度"
    three = next(alts for alts in chinese["examples"] if len(alts) == 3)
    assert three[2].startswith("第 3 张图片（共 3 张），demo-")
    assert [alt.split("，")[0] for alt in chinese["chat"]] == ["图片 1", "图片 2", "图片 3"]
    assert chinese["unnamed"] == []


@pytest.mark.parametrize("chat_tab", [("phone", "dark")], indirect=True, ids=["phone-dark"])
def test_chinese_page_and_logout_page_have_no_serious_violations(
    chat_tab: Tab, server: ServerProcess, artifacts: Path
) -> None:
    page = chat_tab.page
    _pick_chinese(page)
    assert_no_serious_violations(page, artifacts, "chat-zh-phone-dark")
    page.goto(server.url + "/logout")
    page.wait_for_selector("form button[type=submit]")
    assert_no_serious_violations(page, artifacts, "logout-phone-dark")


@pytest.mark.parametrize("chat_tab", [("desktop", "light")], indirect=True, ids=["desktop"])
def test_scope_note_beside_the_examples_in_the_page_language(chat_tab: Tab) -> None:
    page = chat_tab.page
    english = page.locator("#qwen-scope-en")
    assert english.is_visible() and SCOPE["en"] in english.inner_text()
    assert not page.locator("#qwen-scope-zh").is_visible()
    # beside the examples: in the same block, just before them
    following = page.locator("#qwen-examples-en #qwen-scope-en + *")
    assert following.locator(".gallery-item").count() == len(EXAMPLE_KINDS)
    _pick_chinese(page)
    chinese = page.locator("#qwen-scope-zh")
    chinese.wait_for(state="visible", timeout=10_000)
    assert SCOPE["zh"] in chinese.inner_text()
    assert not english.is_visible()


def test_readme_screenshot_is_a_small_picture_of_the_chat(
    browser: Browser, server: ServerProcess, artifacts: Path
) -> None:
    """The helper behind scripts/screenshot.py (docs/chat-page.png) on the real page."""
    tab = _chat_tab(browser, server, "desktop", "light")
    ask_example(tab.page)
    tab.page.evaluate("window.scrollTo(0, 0)")
    path = small_png(tab.page, artifacts / "chat-page.png")
    tab.page.context.close()
    with Image.open(path) as image:
        assert image.size == (1280, 800) and image.mode == "P"
    assert path.stat().st_size < 150_000
