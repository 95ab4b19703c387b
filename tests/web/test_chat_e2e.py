"""The chat over a real ``qwen-ui serve`` process: gradio_client and the HTTP API.

The tiny random model is installed in the server's store and configured through the
environment, as an operator would; answers are meaningless, the mechanics are not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gradio_client import Client, handle_file

from tests.engine.conftest import png
from tests.support.server import ServerProcess, log_in_with_form, tiny_model_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # paced: at a fast machine's speed 24 tokens fit in one of the page's frames
    process = tiny_model_server(tmp_path_factory, max_new_tokens=24, paced=True)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def session(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, follow_redirects=False, timeout=60) as client:
        log_in_with_form(client, "demo", "demo", server.demo_password())
        client.headers["origin"] = server.url  # as the page's own requests do
        yield client


# The stage titles of a first question with three images, in order.
THREE_IMAGE_STAGES = [
    "Decoding image 1/3",
    "Decoding image 2/3",
    "Decoding image 3/3",
    "Loading the model",
    "Encoding image 1/3",
    "Encoding image 2/3",
    "Encoding image 3/3",
    "Answering",
]


def cookie_header(client: httpx.Client) -> str:
    return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def images(folder: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = folder / f"scene{i}.png"
        path.write_bytes(png((48 + 16 * i, 64), (60 * i, 120, 220 - 60 * i)))
        paths.append(str(path))
    return paths


def chat_client(server: ServerProcess, session: httpx.Client, folder: Path) -> Client:
    """gradio_client on the served UI with the logged-in session's cookie, sending the
    page's Origin as a browser does (cookie-authenticated posts must name it)."""
    return Client(
        server.url,
        headers={"Cookie": cookie_header(session), "Origin": server.url},
        verbose=False,
        download_files=str(folder / "dl"),
        analytics_enabled=False,
    )


def follow(job: Any) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """A chat job's stage titles (repeats collapsed), the reply's text at every update, and
    the final chat messages."""
    titles: list[str] = []
    answers: list[str] = []
    for update in job:
        chat = update[0]
        stage = next(m for m in reversed(chat) if m.get("metadata"))
        title = stage["metadata"]["title"]
        if not titles or titles[-1] != title:
            titles.append(title)
        # the answer's message joins the chat with its first text
        answers.append("" if chat[-1] is stage else text_of(chat[-1]))
    return titles, answers, job.outputs()[-1][0]


def test_three_images_stream_stages_in_order_then_the_answer(
    server: ServerProcess, session: httpx.Client, tmp_path: Path
) -> None:
    client = chat_client(server, session, tmp_path)
    message = {"text": "How many circles?", "files": [handle_file(p) for p in images(tmp_path, 3)]}
    titles, answers, final = follow(
        client.submit(message, [], None, "en", "", api_name="/on_submit")
    )
    stages = [t for t in titles if not t.startswith(("Working", "Done"))]
    assert stages == THREE_IMAGE_STAGES
    assert titles[-1].startswith("Done in")
    assert final[-2]["metadata"]["status"] == "done"
    assert text_of(final[-1]) and text_of(final[-1]) == answers[-1]
    assert len({a for a in answers if a}) > 1  # streamed, not delivered at once
    client.close()


def test_api_streams_and_a_vanished_client_cancels(
    server: ServerProcess, session: httpx.Client, tmp_path: Path
) -> None:
    files = [
        ("images", (Path(p).name, Path(p).read_bytes(), "image/png")) for p in images(tmp_path, 2)
    ]
    data = {"question": "What shape?", "max_new_tokens": "2000"}
    with session.stream("POST", "/api/v1/ask", data=data, files=files) as response:
        assert response.status_code == 200
        seen = []
        for line in response.iter_lines():
            seen.append(json.loads(line))
            if sum(1 for e in seen if e["type"] == "token") >= 3:
                break  # leave mid-answer: the connection closes
    assert [e["type"] for e in seen][:2] == ["stage", "stage"]
    deadline = time.monotonic() + 20
    cancelled = 0.0
    while time.monotonic() < deadline and cancelled < 1:
        text = session.get("/metrics").text
        for line in text.splitlines():
            if line.startswith('qwen_ui_engine_requests_total{outcome="cancelled"}'):
                cancelled = float(line.split()[-1])
        time.sleep(0.1)
    assert cancelled >= 1, "the engine never saw the client leave"
    # and the next question is answered
    again = session.post(
        "/api/v1/ask", data={"question": "And?"}, files=[("images", ("a.png", png(), "image/png"))]
    )
    last = json.loads(again.text.strip().splitlines()[-1])
    assert last["type"] == "done"
