"""Point 7 of issue 57: ``OWNER/NAME@REV`` names one revision. A revision that is not
offered is refused with the offered ids named, on the ask API and the OpenAI route alike;
it is never answered silently by another revision of the same model."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from PIL import Image

from qwen_ui.settings import DEMO_MODEL_ID
from tests.security.conftest import Site

pytestmark = pytest.mark.e2e

OFFERED = f"{DEMO_MODEL_ID}@bf16"  # the security site offers the demo model alone
UNKNOWN = [f"{DEMO_MODEL_ID}@nope", f"{DEMO_MODEL_ID}@", f"{DEMO_MODEL_ID}@bf16x"]


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (30, 160, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def _ask(site: Site, model: str) -> httpx.Response:
    form = {"question": "Any shape?", "max_new_tokens": "1", "model": model}
    files = {"images": ("a.png", _png(), "image/png")}
    return site.user().post("/api/v1/ask", data=form, files=files)


def _chat(site: Site, model: str) -> httpx.Response:
    url = "data:image/png;base64," + base64.b64encode(_png()).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Hi"}]
    body = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": content}]}
    with site.anonymous() as client:
        headers = {"Authorization": f"Bearer {site.token}"}
        return client.post("/v1/chat/completions", json=body, headers=headers)


@pytest.mark.parametrize("model", UNKNOWN)
def test_ask_with_an_unknown_revision_is_model_not_found_naming_the_offered(
    memory_site: Site, model: str
) -> None:
    response = _ask(memory_site, model)
    assert response.status_code == 404, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "model_not_found"
    assert OFFERED in error["message"]


@pytest.mark.parametrize("model", UNKNOWN)
def test_chat_completions_with_an_unknown_revision_is_model_not_found(
    memory_site: Site, model: str
) -> None:
    response = _chat(memory_site, model)
    assert response.status_code == 404, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert OFFERED in error["message"]


@pytest.mark.parametrize("model", [OFFERED, DEMO_MODEL_ID])
def test_the_offered_revision_and_the_bare_model_id_are_answered(
    memory_site: Site, model: str
) -> None:
    """The control: the exact ref, or ``OWNER/NAME`` alone (its first offered revision)."""
    response = _ask(memory_site, model)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["x-qwen-ui-model"] == OFFERED
    chat = _chat(memory_site, model)
    assert chat.status_code == 200, chat.text[:300]
    assert chat.json()["model"] == OFFERED
