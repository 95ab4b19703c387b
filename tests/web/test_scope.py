"""The scope a model declares in its facts file, shown beside the examples: the shipped
demo model declares one (installed or not yet), other models only when they do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qwen_ui.demo.examples import SCOPE
from qwen_ui.demo.install import REVISIONS, weights_dir
from qwen_ui.engine.facts import DECLARED as MODEL_FACTS
from qwen_ui.settings import Settings
from qwen_ui.store import ModelStore
from qwen_ui.web.scope import declared_scope

OTHER = "acme/other-vl"


def _install(home: Path, facts: str | None) -> Settings:
    model = home / "src"
    model.mkdir()
    (model / "config.json").write_text("{}")
    if facts is not None:
        (model / MODEL_FACTS).write_text(facts, encoding="utf-8")
    settings = Settings(home=home, model_id=OTHER, model_revision="main")
    ModelStore(settings.model_path).install(model, OTHER, "main")
    return settings


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_shipped_demo_model_declares_its_scope(revision: str) -> None:
    facts = json.loads((weights_dir(revision) / MODEL_FACTS).read_text("utf-8"))
    assert facts["scope"] == SCOPE
    assert facts["answers_without_images"] is False


def test_demo_scope_is_read_before_the_demo_is_installed(home: Path) -> None:
    settings = Settings(home=home)
    assert settings.is_demo_model
    assert not ModelStore(settings.model_path).is_installed(
        settings.model_id, settings.model_revision
    )
    assert declared_scope(settings) == SCOPE


def test_an_installed_model_declares_its_scope(home: Path) -> None:
    scope = {"en": "Reads gauges.", "zh": "读取仪表。"}
    settings = _install(home, json.dumps({"scope": scope}, ensure_ascii=False))
    assert declared_scope(settings) == scope


@pytest.mark.parametrize(
    "facts",
    [
        None,  # no facts file (production Qwen models)
        "{}",
        '{"answers_without_images": true}',
        '{"scope": "only English"}',
        '{"scope": {"en": "Reads gauges."}}',  # one language is not enough
        '{"scope": {"en": "Reads gauges.", "zh": "  "}}',
        "not json",
    ],
)
def test_no_scope_unless_declared_in_both_languages(home: Path, facts: str | None) -> None:
    assert declared_scope(_install(home, facts)) is None


def test_a_model_that_is_not_installed_declares_nothing(home: Path) -> None:
    assert declared_scope(Settings(home=home, model_id=OTHER)) is None


def test_a_remote_engine_declares_nothing(home: Path) -> None:
    settings = Settings(
        home=home,
        engine="openai",
        remote_base_url="http://127.0.0.1:9/v1",
        remote_model="qwen-vl-max",
    )
    assert declared_scope(settings) is None
