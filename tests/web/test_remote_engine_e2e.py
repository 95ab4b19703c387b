"""Two real qwen-ui processes: the first serves the demo model; the second runs with
``QWEN_UI_ENGINE=openai`` pointed at the first's /v1 with an API token. Both APIs of the
second answer the demo questions right (streaming too, follow-ups from the second's own
conversations), and so does its page in Chromium; its audit log records them; it
survives the first being stopped and restarted: typed 502s and a not-ready /readyz
meanwhile, an instant /healthz throughout, and recovery without a restart."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from qwen_ui.auth.tokens import add_token, new_token
from qwen_ui.demo import scenes
from tests.support.auth import TEST_PASSWORD, add_tenants, local_tenant
from tests.support.browser import chromium
from tests.support.server import ServerProcess
from tests.web.test_chat_browser import answer_text
from tests.web.test_openai_api_e2e import ask, demo_model_id, first_sample, start_demo_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@dataclass
class Pair:
    first: ServerProcess
    second: ServerProcess
    token: str  # an API token of the second's tenant 'demo'
    remote_key: str  # the first's token, the second's QWEN_UI_REMOTE_API_KEY

    def restart_first(self) -> None:
        self.first = ServerProcess(
            self.first.home,
            env={"QWEN_UI_DEVICE": "cpu", "GRADIO_ANALYTICS_ENABLED": "False"},
            port=self.first.port,
        )
        self.first.wait_for("/login", timeout=240)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    first_token, first = start_demo_server(tmp_path_factory.mktemp("first"))
    home = tmp_path_factory.mktemp("second")
    token, record = new_token("e2e")
    add_tenants(home / "tenants.toml", add_token(local_tenant("demo"), record))
    env = {
        "QWEN_UI_ENGINE": "openai",
        "QWEN_UI_REMOTE_BASE_URL": f"{first.url}/v1",
        "QWEN_UI_REMOTE_MODEL": demo_model_id(),
        "QWEN_UI_REMOTE_API_KEY": first_token,
        "QWEN_UI_REMOTE_TIMEOUT_S": "60",
        "QWEN_UI_MODEL_ID": "nobody/not-installed",  # proves nothing is loaded locally
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    second = ServerProcess(home, env=env)
    second.wait_for("/login", timeout=240)
    found = Pair(first, second, token, first_token)
    yield found
    found.second.stop()
    found.first.stop()


def ndjson_ask(
    pair: Pair, sample: scenes.Sample, question: str | None = None, **form: str
) -> list[dict[str, Any]]:
    files = [
        ("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(sample.png_bytes())
    ]
    response = httpx.post(
        f"{pair.second.url}/api/v1/ask",
        data={"question": question or sample.question, **form},
        files=files if question is None else None,
        headers={"Authorization": f"Bearer {pair.token}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line]


def test_api_ask_answers_right_through_the_remote(pair: Pair) -> None:
    sample = next(
        s
        for s in (scenes.with_follow_up(x) for x in scenes.held_out(60, seed=0, kinds=("count",)))
        if s.follow_ups and s.lang == "en"
    )
    events = ndjson_ask(pair, sample)
    stages = [e["stage"] for e in events if e["type"] == "stage"]
    assert stages == ["decoding", "sending", "waiting", "answering"]
    done = events[-1]
    assert done["type"] == "done" and done["answer"] == sample.answer, sample.question
    follow = sample.follow_ups[0]
    later = ndjson_ask(pair, sample, follow.question, conversation_id=done["conversation_id"])
    assert later[-1]["answer"] == follow.answer, follow.question
    audit = (pair.second.home / "logs" / "audit.jsonl").read_text()
    assert audit.count('"outcome": "answered"') + audit.count('"outcome":"answered"') >= 2


def test_openai_api_of_the_second_streams_the_right_answer(pair: Pair) -> None:
    sample = first_sample("multi_count", 3)
    with openai.OpenAI(
        base_url=f"{pair.second.url}/v1", api_key=pair.token, max_retries=0
    ) as client:
        assert [m.id for m in client.models.list().data] == [demo_model_id()]
        stream = client.chat.completions.create(
            model=demo_model_id(), messages=ask(sample), stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == sample.answer, sample.question


def test_health_while_the_remote_is_up(pair: Pair) -> None:
    health = httpx.get(f"{pair.second.url}/healthz", timeout=5).json()
    assert health["remote"]["state"] == "up" and health["model"] == demo_model_id()
    assert httpx.get(f"{pair.second.url}/readyz", timeout=10).status_code == 200


@pytest.mark.browser
def test_page_of_the_second_answers_right(pair: Pair, tmp_path: Path, artifacts: Path) -> None:
    sample = first_sample("count", 1)
    image = tmp_path / "scene.png"
    image.write_bytes(sample.png_bytes()[0])
    with chromium() as browser:
        context = browser.new_context(locale="en-US", viewport={"width": 1200, "height": 1100})
        page = context.new_page()
        page.goto(pair.second.url + "/")
        page.wait_for_url("**/login**")
        page.fill("#tenant", "demo")
        page.check("#m-local")
        page.fill("#user", "demo")
        page.fill("#password", TEST_PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(pair.second.url + "/")
        page.wait_for_selector("#qwen-question textarea")
        page.set_input_files("#qwen-question input[type=file]", [str(image)])
        page.wait_for_function(
            "document.querySelectorAll('#qwen-question img, #qwen-question .thumbnail-item')"
            ".length >= 1",
            timeout=15_000,
        )
        page.fill("#qwen-question textarea", sample.question)
        page.press("#qwen-question textarea", "Enter")
        page.wait_for_selector("#qwen-chat >> text=/Done in/", timeout=120_000)
        page.screenshot(path=str(artifacts / "chat-remote-engine.png"), full_page=True)
        assert answer_text(page).strip() == sample.answer, sample.question
        context.close()


def test_survives_the_remote_stopping_and_restarting(pair: Pair) -> None:
    sample = first_sample("count", 1)
    pair.first.stop()
    with openai.OpenAI(
        base_url=f"{pair.second.url}/v1", api_key=pair.token, max_retries=0
    ) as client:
        with pytest.raises(openai.APIStatusError) as down:
            client.chat.completions.create(model=demo_model_id(), messages=ask(sample))
        assert down.value.status_code == 502 and down.value.code == "remote_unreachable"
        failed = ndjson_ask(pair, sample)[-1]
        assert failed["type"] == "failed" and failed["status"] == 502
        started = time.monotonic()
        health = httpx.get(f"{pair.second.url}/healthz", timeout=5)
        assert time.monotonic() - started < 1.0
        assert health.status_code == 200 and health.json()["remote"]["state"] == "down"
        assert httpx.get(f"{pair.second.url}/readyz", timeout=10).status_code == 503
        pair.restart_first()
        assert httpx.get(f"{pair.second.url}/readyz", timeout=10).status_code == 200
        reply = client.chat.completions.create(model=demo_model_id(), messages=ask(sample))
    assert reply.choices[0].message.content == sample.answer
    logs = pair.second.output() + (pair.second.home / "logs" / "audit.jsonl").read_text()
    assert pair.remote_key not in logs and pair.token not in logs
