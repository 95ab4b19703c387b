"""The one error hierarchy: the store's fetch and manifest errors are typed errors too."""

from __future__ import annotations

import pytest

from qwen_ui.errors import FetchError, ManifestError, QwenUIError, StoreError
from qwen_ui.store import fetch
from qwen_ui.store.manifest import FileEntry, Manifest


def test_fetch_error_is_typed_and_keeps_the_cli_message() -> None:
    error = FetchError("cannot reach ModelScope at https://hub.example", fetch.EXIT_UNREACHABLE)
    assert isinstance(error, QwenUIError)
    assert str(error) == "cannot reach ModelScope at https://hub.example"  # what the CLI prints
    assert error.exit_code == fetch.EXIT_UNREACHABLE
    body = error.to_dict("zh")["error"]
    assert body["status"] == 502 and body["code"] == "fetch_failed"
    assert body["message"].startswith("模型下载失败：")


def test_unreadable_manifest_is_a_typed_store_error() -> None:
    with pytest.raises(ManifestError) as caught:
        Manifest.from_bytes(b"not json")
    assert isinstance(caught.value, StoreError)
    body = caught.value.to_dict("en")["error"]
    assert body["status"] == 400 and body["code"] == "manifest_invalid"
    assert body["message"].startswith("The model manifest is not valid: unreadable manifest")
    assert caught.value.message("zh").startswith("模型清单无效：")


@pytest.mark.parametrize("path", ["../escape", "/abs", "a\\b", ""])
def test_bad_manifest_paths_are_refused(path: str) -> None:
    with pytest.raises(ManifestError, match="bad path in manifest"):
        Manifest.of([FileEntry(path, 1, "0" * 64)])


def test_unknown_manifest_format_names_the_format() -> None:
    with pytest.raises(ManifestError, match="unknown manifest format 'v0'"):
        Manifest.from_bytes(b'{"format": "v0", "files": []}')
