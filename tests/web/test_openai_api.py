"""/v1/chat/completions and /v1/models over the in-process app (tiny random model): the
wire format, stop sequences, the stage extension and every error shape, driven by the
real ``openai`` SDK over FastAPI's TestClient."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from qwen_ui.auth.tenants import Limits
from qwen_ui.auth.tokens import add_token, new_token
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.store import ModelStore
from qwen_ui.web.openai_api import StopScan
from tests.engine.conftest import TINY_ID, png, tiny_settings
from tests.engine.support import build_tiny_model
from tests.support.auth import add_tenants, local_tenant

MODEL = f"{TINY_ID}@bf16"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "bf16")


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    """API tokens of tenant 'demo' and of tenant 'small' (one question a day)."""
    demo_token, demo_record = new_token("test")
    small_token, small_record = new_token("test")
    small = local_tenant("small").model_copy(update={"limits": Limits(questions_per_day=1)})
    add_tenants(
        tmp_path / "home" / "tenants.toml",
        add_token(local_tenant("demo"), demo_record),
        add_token(small, small_record),
    )
    return {"demo": demo_token, "small": small_token}


@pytest.fixture
def http(tmp_path: Path, tiny_model: Path, tokens: dict[str, str]) -> Iterator[TestClient]:
    settings = tiny_settings(tmp_path / "home", max_images=3, max_image_bytes=64 * 1024)
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    with TestClient(create_app(settings, ui=False)) as client:
        yield client


def sdk(http: TestClient, token: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{http.base_url}/v1", api_key=token, http_client=http, max_retries=0
    )


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def user(text: str, *images: bytes) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": data_url(i)}} for i in images
    ]
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def test_models_lists_the_installed_model(http: TestClient, tokens: dict[str, str]) -> None:
    models = sdk(http, tokens["demo"]).models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].owned_by == TINY_ID.split("/")[0]


def test_completion_matches_the_engine_answer_and_streams_the_same(
    http: TestClient, tokens: dict[str, str]
) -> None:
    client = sdk(http, tokens["demo"])
    messages: Any = [user("What shape?", png())]
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
    answer = reply.choices[0].message.content
    assert answer and reply.choices[0].finish_reason in ("stop", "length")
    assert reply.model == MODEL and reply.usage is not None
    assert reply.usage.completion_tokens <= 8 and reply.usage.prompt_tokens > 10
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answer
    assert chunks[-1].choices == [] and chunks[-1].usage == reply.usage
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == reply.choices[0].finish_reason and finishes[:-1] == [None] * (
        len(finishes) - 1
    )
    # stateless follow-up: the earlier turn's image is sent again and seen again
    follow = client.chat.completions.create(
        model=MODEL,
        messages=[*messages, {"role": "assistant", "content": answer}, user("And now?")],
        max_tokens=4,
        extra_body={"qwen_ui": {"stages": True}},
    )
    extra = follow.model_extra["qwen_ui"]  # type: ignore[index]
    encoding = [s for s in extra["stages"] if s["stage"] == "encoding"]
    assert [(s["index"], s["total"], s["cached"]) for s in encoding] == [(1, 1, True)]
    assert extra["done"]["images"] == 0 and "timings" in extra["done"]


def test_stop_sequence_cuts_the_answer(http: TestClient, tokens: dict[str, str]) -> None:
    client = sdk(http, tokens["demo"])
    messages: Any = [user("What shape?", png())]
    full = (
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16)
        .choices[0]
        .message.content
    )
    assert full and len(full) > 4
    stop = full[3:5]
    cut = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, stop=stop)
    assert cut.choices[0].message.content == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=16, stop=[stop], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == full[: full.index(stop)]


def test_stage_chunks_are_opt_in(http: TestClient, tokens: dict[str, str]) -> None:
    client = sdk(http, tokens["demo"])
    messages: Any = [user("What shape?", png(), png((30, 30)))]
    plain = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True))
    assert all(c.choices for c in plain)
    staged = list(
        client.chat.completions.create(
            model=MODEL, messages=messages, stream=True, extra_body={"qwen_ui": {"stages": True}}
        )
    )
    extras = [c.model_extra["qwen_ui"] for c in staged if not c.choices]  # type: ignore[index]
    labels = [e["label"] for e in extras if e["type"] == "stage"]
    assert labels[:2] == ["Decoding image 1/2", "Decoding image 2/2"]
    assert "Answering" in labels and extras[-1]["type"] == "done"


def raw(http: TestClient, token: str, body: dict[str, Any], **kw: Any) -> Any:
    return http.post(
        "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"}, **kw
    )


def assert_openai_error(response: Any, status: int, code: str, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["message"]
    if param is not None:
        assert error["param"] == param


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"logit_bias": {"1": 5}}, "unsupported_parameter", "logit_bias"),
        ({"n": 2}, "unsupported_parameter", "n"),
        ({"temperature": "hot"}, "invalid_value", "temperature"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "invalid_value", "stop"),
        ({"max_tokens": 10**6}, "bad_option", None),
        ({"model": "other/model"}, "model_not_found", "model"),
        ({"messages": [{"role": "system", "content": "x"}]}, "unsupported_parameter", "messages"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "invalid_value", "messages"),
        ({"messages": [user("What?")]}, None, None),  # no image: answered
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "unsupported_parameter",
            "messages[0].content[0]",
        ),
        (
            {"messages": [user("x", png(), png(), png(), png())]},
            "too_many_images",
            None,
        ),
    ],
)
def test_bad_requests_get_openai_errors(
    http: TestClient, tokens: dict[str, str], body: dict[str, Any], code: str | None, param: str
) -> None:
    full = {"model": MODEL, "messages": [user("What?", png())], "max_tokens": 2, **body}
    response = raw(http, tokens["demo"], full)
    if code is None:
        assert response.status_code == 200, response.text
        return
    status = 404 if code == "model_not_found" else 400
    assert_openai_error(response, status, code, param)


def image_message(url: str) -> dict[str, Any]:
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "?"}]
    return {"model": MODEL, "messages": [{"role": "user", "content": content}]}


def test_image_urls_are_checked(http: TestClient, tokens: dict[str, str]) -> None:
    token = tokens["demo"]
    refused = raw(http, token, image_message("https://example.com/cat.png"))
    assert_openai_error(refused, 400, "image_url_refused")
    assert "data: URL" in refused.json()["error"]["message"]
    local_file = image_message("file:///etc/passwd")
    assert_openai_error(raw(http, token, local_file), 400, "image_url_refused")
    bad64 = "data:image/png;base64,@@@@"
    assert_openai_error(raw(http, token, image_message(bad64)), 400, "image_url_refused")
    not_image = data_url(b"hello, not an image")
    assert_openai_error(raw(http, token, image_message(not_image)), 400, "image_unsupported")
    huge = data_url(b"\x89PNG" + bytes(70 * 1024))
    assert_openai_error(raw(http, token, image_message(huge)), 413, "image_too_large")
    # a session-less API token has no OSS credentials to read oss:// with
    oss = image_message("oss://demo/a.png")
    assert_openai_error(raw(http, token, oss), 404, "no_object_storage")


def test_auth_quota_size_and_availability_errors(http: TestClient, tokens: dict[str, str]) -> None:
    body = {"model": MODEL, "messages": [user("What?", png())], "max_tokens": 2}
    with pytest.raises(openai.AuthenticationError) as caught:
        sdk(http, "qwu_00000000_" + "x" * 43).chat.completions.create(**body)
    assert caught.value.code == "invalid_token"
    assert_openai_error(http.get("/v1/models"), 401, "unauthorized")
    small = sdk(http, tokens["small"])
    small.chat.completions.create(**body)
    with pytest.raises(openai.RateLimitError) as limited:
        small.chat.completions.create(**body)
    assert limited.value.code == "quota_exceeded"
    assert int(limited.value.response.headers["retry-after"]) >= 1
    big = b"{" + b" " * (5 * 1024 * 1024) + b"}"
    response = http.post(
        "/v1/chat/completions",
        content=big,
        headers={"Authorization": f"Bearer {tokens['demo']}", "Content-Type": "application/json"},
    )
    assert_openai_error(response, 413, "request_too_large")
    # the token is checked before the body is read or parsed
    for content in (big, b"not json"):
        refused = http.post(
            "/v1/chat/completions",
            content=content,
            headers={"Authorization": "Bearer qwu_00000000_" + "x" * 43},
        )
        assert_openai_error(refused, 401, "invalid_token")
    assert_openai_error(raw(http, tokens["demo"], {}, data=None), 400, "invalid_value")
    services_of(http.app).answering = False
    with pytest.raises(openai.InternalServerError) as unavailable:
        sdk(http, tokens["demo"]).chat.completions.create(**body)
    assert unavailable.value.status_code == 503
    assert unavailable.value.code == "engine_not_available"


def test_stop_scan_holds_back_a_split_stop_sequence() -> None:
    scan = StopScan(["END"])
    assert scan.push("abcE") == ("ab", False)
    assert scan.push("N") == ("c", False)
    assert scan.push("Dxyz") == ("", True)
    plain = StopScan([])
    assert plain.push("abc") == ("abc", False) and plain.flush() == ""


@pytest.fixture
def image_host() -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1 serving /scene.png, /missing (404), /big."""
    import http.server
    import threading

    image = png((40, 30))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = {"/scene.png": image, "/big": bytes(70 * 1024)}.get(self.path)
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(found or b"")))
            self.end_headers()
            self.wfile.write(found or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_listed_hosts_images_are_fetched(
    tmp_path: Path, tiny_model: Path, tokens: dict[str, str], image_host: str
) -> None:
    settings = tiny_settings(
        tmp_path / "home", max_image_bytes=64 * 1024, openai_image_hosts="127.0.0.1"
    )
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    with TestClient(create_app(settings, ui=False)) as client:
        token = tokens["demo"]
        fetched = raw(client, token, image_message(f"{image_host}/scene.png"))
        assert fetched.status_code == 200, fetched.text
        missing = raw(client, token, image_message(f"{image_host}/missing"))
        assert_openai_error(missing, 400, "image_url_unreadable")
        big = raw(client, token, image_message(f"{image_host}/big"))
        assert_openai_error(big, 413, "image_too_large")
        other = raw(client, token, image_message("http://localhost:1/scene.png"))
        assert_openai_error(other, 400, "image_url_refused")


def test_boxes_come_back_as_an_extension_in_original_pixels(
    http: TestClient, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from qwen_ui.admission.tokens import Geometry, resized
    from tests.engine.support import force_answer

    answer = '```json\n[{"bbox_2d": [0, 0, 28, 28], "label": "red circle", "image": 2}]\n```'
    force_answer(monkeypatch, services_of(http.app).engine, answer)
    client = sdk(http, tokens["demo"])
    # the second image (224 x 112) is resized by the processor (at most 112 x 112 pixels):
    # the box, in the resized image's pixels, comes back scaled to the file's own
    width, height = resized(224, 112, Geometry(14, 2, 2, 3136, 112 * 112))
    assert (width, height) != (224, 112)
    box = [0, 0, round(28 * 224 / width), round(28 * 112 / height)]
    messages: Any = [user("Where is the red circle?", png((112, 56)), png((224, 112)))]
    reply = client.chat.completions.create(model=MODEL, messages=messages)
    message = reply.choices[0].message
    assert message.content == answer  # the model's own words, for stock clients
    expected = [{"image": 2, "label": "red circle", "box": box}]
    assert message.model_extra == {"boxes": expected}
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True))
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(final) == 1 and final[0].choices[0].delta.model_extra["boxes"] == expected  # type: ignore[index]
    others = [c.choices[0].delta.model_extra for c in chunks if c.choices and c not in final]
    assert all("boxes" not in (extra or {}) for extra in others)
    force_answer(monkeypatch, services_of(http.app).engine, "Nothing to locate.")
    plain = client.chat.completions.create(model=MODEL, messages=messages)
    assert plain.choices[0].message.model_extra["boxes"] == []  # type: ignore[index]
