"""What the web layer records with an answered turn."""

from __future__ import annotations

import hashlib

from qwen_ui.engine.events import Done, Stage
from qwen_ui.settings import Settings
from qwen_ui.web.turn_record import boxes_on_files, model_of, served_model, stage_entry


def done(**extra: object) -> Done:
    return Done("a", "c", 1, 1, 1, 0, "stop", {"total": 0.1}, **extra)  # type: ignore[arg-type]


def test_boxes_name_their_image_by_sha256() -> None:
    images = [b"one", b"two"]
    boxes = [
        {"image": 2, "label": "star", "box": [1, 2, 3, 4]},
        {"image": 3, "label": "lost", "box": [1, 2, 3, 4]},  # no such image: left out
    ]
    assert boxes_on_files(boxes, images) == [
        {"sha256": hashlib.sha256(b"two").hexdigest(), "label": "star", "box": [1, 2, 3, 4]}
    ]


def test_a_stage_keeps_its_facts_not_its_progress() -> None:
    assert stage_entry(Stage.at("encoding", 2, 3, cached=True)) == {
        "stage": "encoding", "index": 2, "total": 3, "cached": True,
    }  # fmt: skip
    assert stage_entry(Stage.at("answering", prompt_tokens=40)) == {"stage": "answering"}


def test_the_model_is_the_configured_one_unless_the_event_names_it() -> None:
    local = Settings(model_id="Qwen/X", model_revision="awq")
    assert served_model(local) == "Qwen/X@awq" and model_of(done(), local) == "Qwen/X@awq"
    remote = Settings(engine="openai", remote_model="qwen-vl-max", remote_base_url="http://h/v1")
    assert model_of(done(), remote) == "qwen-vl-max"
