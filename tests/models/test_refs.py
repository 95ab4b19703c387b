"""``OWNER/NAME@REV`` references and the QWEN_UI_MODELS setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from qwen_ui.models.refs import ModelRef, parse_list
from qwen_ui.settings import Settings


def test_parse_and_print() -> None:
    ref = ModelRef.parse(" Qwen/Qwen2.5-VL-7B-Instruct-AWQ@master ")
    assert (ref.model_id, ref.revision) == ("Qwen/Qwen2.5-VL-7B-Instruct-AWQ", "master")
    assert str(ref) == "Qwen/Qwen2.5-VL-7B-Instruct-AWQ@master"
    for bad in ("Qwen/x", "x@y", "Qwen/x@", "/x@y", "Qwen/x@a b", "a/b/c@d"):
        with pytest.raises(ValueError):
            ModelRef.parse(bad)
    assert parse_list("a/b@1, c/d@2,a/b@1,") == [ModelRef("a/b", "1"), ModelRef("c/d", "2")]


def test_models_setting_sets_the_default(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, models=" a/b@1 , c/d@2, a/b@1")
    assert settings.models == "a/b@1,c/d@2"
    assert settings.model_refs == ("a/b@1", "c/d@2")
    assert (settings.model_id, settings.model_revision) == ("a/b", "1")
    one = Settings(home=tmp_path, model_id="x/y", model_revision="awq")
    assert one.model_refs == ("x/y@awq",)


def test_a_bad_models_setting_names_the_entry(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="'c/d' is not OWNER/NAME@REV"):
        Settings(home=tmp_path, models="a/b@1,c/d")
