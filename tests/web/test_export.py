"""A conversation exported as JSON and as a zip of Markdown + images: contents read back."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile

import pytest
from PIL import Image

from qwen_ui.engine.conversations import Conversation, ConversationStore, StoredTurn
from qwen_ui.state import MemoryState
from qwen_ui.web.export import gather_images, json_bytes, markdown_text, to_json, zip_bytes
from tests.engine.conftest import png

OWNER = "acme/alice"
RED, BLUE, GREEN = png((80, 60), (200, 30, 30)), png((120, 120), (0, 0, 255)), png((30, 20))
SHA = {name: hashlib.sha256(data).hexdigest() for name, data in [("red", RED), ("blue", BLUE)]}


async def conversation_with_boxes() -> tuple[ConversationStore, Conversation]:
    """Turn 1: two images, an answer with a box on the second; turn 2: no new image;
    then one image attached and not yet asked about."""
    store = ConversationStore(MemoryState(), ttl_s=120)
    conv = await store.create("acme", OWNER)
    await store.attach(conv, {SHA["red"]: RED, SHA["blue"]: BLUE})
    answer = '[{"bbox_2d": [40, 50, 90, 100], "label": "blue <b>square</b>", "image": 2}]'
    await store.append(conv, StoredTurn("Where is the <b>blue</b> square?", answer, []), {})
    box = {"sha256": SHA["blue"], "label": "blue <b>square</b>", "box": [40, 50, 90, 100]}
    stages = [{"stage": "decoding", "index": 1, "total": 2}, {"stage": "answering"}]
    await store.describe(
        OWNER, conv.id, answer, answer_text="blue <b>square</b>", boxes=[box],
        stages=stages, timings={"total": 1.25, "ttft": 0.5}, model="Qwen/Demo@awq",
        answered=1_700_000_000.0,
    )  # fmt: skip
    conv = await store.get(OWNER, conv.id)
    await store.append(conv, StoredTurn("And the red one?", "There is none.", []), {})
    await store.attach(conv, {hashlib.sha256(GREEN).hexdigest(): GREEN})
    return store, await store.get(OWNER, conv.id)


async def test_json_names_images_by_sha256_with_turns_stages_timings_and_model() -> None:
    store, conv = await conversation_with_boxes()
    body = json.loads(json_bytes(conv, await gather_images(store, conv)))
    assert body["format"] == "qwen-ui.conversation" and body["version"] == 1
    assert body["id"] == conv.id and body["title"] == "Where is the <b>blue</b> square?"
    images = body["images"]
    assert [i["sha256"] for i in images] == [*SHA.values(), hashlib.sha256(GREEN).hexdigest()]
    assert [i["numbers"] for i in images] == [[1], [2], [3]]
    assert images[1]["width"] == 120 and images[1]["media_type"] == "image/png"
    assert images[1]["bytes"] == len(BLUE) and images[1]["file"].startswith("images/")
    first, second = body["turns"]
    assert [i["number"] for i in first["images"]] == [1, 2] and second["images"] == []
    assert first["boxes"] == [
        {"sha256": SHA["blue"], "label": "blue <b>square</b>", "box": [40, 50, 90, 100], "image": 2}
    ]
    assert first["model"] == "Qwen/Demo" and first["revision"] == "awq"
    assert first["timings"] == {"total": 1.25, "ttft": 0.5}
    assert [s["stage"] for s in first["stages"]] == ["decoding", "answering"]
    assert first["answered"] == "2023-11-14T22:13:20Z"
    assert first["answer"].startswith("[{") and first["answer_text"] == "blue <b>square</b>"
    assert second["answer_text"] == "There is none." and second["model"] == ""
    assert body["pending"] == [{"sha256": hashlib.sha256(GREEN).hexdigest(), "number": 3}]


async def test_zip_holds_markdown_that_shows_every_image_it_references() -> None:
    store, conv = await conversation_with_boxes()
    data = zip_bytes(conv, await gather_images(store, conv), "en")
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = set(archive.namelist())
    markdown = archive.read("conversation.md").decode()
    referenced = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert referenced and set(referenced) <= names  # every picture the Markdown shows is there
    originals = [n for n in names if n.startswith("images/") and "-boxes-" not in n]
    assert sorted(archive.read(n) for n in originals) == sorted([RED, BLUE, GREEN])
    assert json.loads(archive.read("conversation.json")) == json.loads(
        json_bytes(conv, await gather_images(store, conv))
    ) | {"exported": json.loads(archive.read("conversation.json"))["exported"]}
    # words as text, never HTML; the answer shows its labels, not the model's JSON
    assert "<b>" not in markdown and "&lt;b&gt;blue&lt;/b&gt;" in markdown
    assert "bbox_2d" not in markdown
    assert "**Answer:** blue &lt;b&gt;square&lt;/b&gt;" in markdown
    assert "Located: blue &lt;b&gt;square&lt;/b&gt; (image 2)" in markdown
    assert "`Qwen/Demo@awq` · 1.2 s" in markdown or "`Qwen/Demo@awq` · 1.3 s" in markdown
    assert "## Images attached after the last answer" in markdown


async def test_zip_draws_the_box_on_its_image() -> None:
    store, conv = await conversation_with_boxes()
    archive = zipfile.ZipFile(io.BytesIO(zip_bytes(conv, await gather_images(store, conv), "zh")))
    (drawn,) = [n for n in archive.namelist() if "-boxes-" in n]
    assert drawn.startswith(f"images/{SHA['blue'][:16]}") and drawn.endswith("-boxes-1.png")
    image = Image.open(io.BytesIO(archive.read(drawn))).convert("RGB")
    assert image.size == (120, 120)
    assert image.getpixel((65, 99)) != (0, 0, 255)  # the bottom edge of the box, drawn
    assert image.getpixel((40, 80)) != (0, 0, 255)  # its left edge
    assert image.getpixel((65, 80)) == (0, 0, 255)  # inside it, the image itself
    assert image.getpixel((110, 110)) == (0, 0, 255)  # outside it too
    markdown = archive.read("conversation.md").decode()
    assert "## 问题 1" in markdown and "（图片 2）" in markdown


async def test_an_image_gone_from_the_store_is_named_not_invented() -> None:
    store, conv = await conversation_with_boxes()
    await store._images.delete(store._key("acme", SHA["red"]))
    images = await gather_images(store, conv)
    body = to_json(conv, images)
    assert body["images"][0] == {
        "sha256": SHA["red"], "numbers": [1], "file": None,
        "media_type": "application/octet-stream", "bytes": 0, "width": 0, "height": 0,
    }  # fmt: skip
    archive = zipfile.ZipFile(io.BytesIO(zip_bytes(conv, images, "en")))
    assert (
        f"*image 1, {SHA['red'][:16]}: no longer stored*"
        in archive.read("conversation.md").decode()
    )


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("[x](javascript:alert(1))", "\\[x\\](javascript:alert(1))"),
        ("![x](https://a.example/p.png)", "!\\[x\\](https://a.example/p.png)"),  # no remote image
        ("<javascript:alert(1)>", "&lt;javascript:alert(1)&gt;"),
        ("[r][1]\n\n[1]: javascript:alert(1)", "\\[r\\]\\[1\\]\n\n\\[1\\]: javascript:alert(1)"),
        ("\\[x\\](javascript:a)", "\\\\\\[x\\\\\\](javascript:a)"),  # its own escapes stay text
        (
            "see [docs](https://a.example/x?a=1&b=2).",
            "see [docs](https://a.example/x?a=1&amp;b=2).",
        ),
        (
            "[a [b](https://a.example)](javascript:x)",
            "\\[a [b](https://a.example)\\](javascript:x)",
        ),
        ("**bold** `code` 3 < 4", "**bold** `code` 3 &lt; 4"),
    ],
)
def test_markdown_text_keeps_only_inline_web_links(text: str, written: str) -> None:
    assert markdown_text(text) == written


async def test_a_title_and_answer_with_link_syntax_export_as_text() -> None:
    store = ConversationStore(MemoryState(), ttl_s=120)
    conv = await store.create("acme", OWNER)
    await store.append(conv, StoredTurn("q", "[a](javascript:alert(1))", []), {})
    await store.rename(OWNER, conv.id, "[t](javascript:alert(2))")
    conv = await store.get(OWNER, conv.id)
    markdown = zipfile.ZipFile(io.BytesIO(zip_bytes(conv, [], "en"))).read("conversation.md")
    text = markdown.decode()
    assert text.startswith("# \\[t\\](javascript:alert(2))")
    assert "**Answer:** \\[a\\](javascript:alert(1))" in text
