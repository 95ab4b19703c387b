"""``scripts/cache_model.sh``, run through bash with the store under a temp dir; ModelScope
is a closed loopback port or a small stand-in server on 127.0.0.1 (tests/store/
fake_modelscope.py) that the real ModelScope SDK downloads from."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen_ui.store import ModelStore
from qwen_ui.store.fetch import parse_listing
from tests.store.fake_modelscope import FakeModelScope
from tests.store.support import REPO, make_model, model_files

SCRIPT = REPO / "scripts" / "cache_model.sh"
MODEL = "Qwen/Tiny-VL"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    return {
        **keep,
        "HOME": str(tmp_path / "user"),  # the ModelScope SDK writes ~/.modelscope
        "QWEN_UI_HOME": str(tmp_path / "home"),
        "QWEN_UI_MODEL_DIR": str(tmp_path / "essd" / "models"),
        "QWEN_UI_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
    }


def script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends


def test_from_dir(tmp_path: Path, env: dict[str, str]) -> None:
    src = make_model(tmp_path / "src")
    result = script(env, "--from-dir", str(src), MODEL, "v1")
    assert result.returncode == 0, result.stderr
    store = ModelStore(env["QWEN_UI_MODEL_DIR"])
    snap = store.verify(MODEL, "v1", full=True)
    assert f"installed {MODEL}@v1 -> snapshot {snap.short_id}" in result.stdout
    assert f"model store: {store.root}" in result.stdout
    again = script(env, "--from-dir", str(src), MODEL, "v1")
    assert again.returncode == 0 and "already installed" in again.stdout


def test_store_defaults_to_qwen_ui_home(tmp_path: Path, env: dict[str, str]) -> None:
    del env["QWEN_UI_MODEL_DIR"]
    result = script(env, "--from-dir", str(make_model(tmp_path / "src")), MODEL)
    assert result.returncode == 0, result.stderr
    assert ModelStore(Path(env["QWEN_UI_HOME"]) / "models").is_installed(MODEL, "master")


def test_unreachable_modelscope_fails_fast_and_plainly(env: dict[str, str]) -> None:
    port = closed_port()
    env["MODELSCOPE_ENDPOINT"] = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    result = script(env)
    elapsed = time.monotonic() - started
    assert result.returncode == 3
    assert f"cannot reach ModelScope at http://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert elapsed < 10
    assert not (Path(env["QWEN_UI_MODEL_DIR"]) / "staging").exists()


def test_endpoint_flag_and_deprecated_domain_variable(env: dict[str, str]) -> None:
    port = closed_port()
    result = script(env, "--endpoint", f"http://127.0.0.1:{port}", "--timeout", "2")
    assert result.returncode == 3
    assert f"cannot reach ModelScope at http://127.0.0.1:{port}" in result.stderr
    env["MODELSCOPE_DOMAIN"] = f"127.0.0.1:{port}"  # bare host: https:// is assumed
    result = script(env)
    assert f"cannot reach ModelScope at https://127.0.0.1:{port}" in result.stderr


def test_download_install_and_rerun(env: dict[str, str]) -> None:
    files = model_files(seed=5)
    with FakeModelScope(MODEL, files) as hub:
        env["MODELSCOPE_ENDPOINT"] = hub.url
        result = script(env, MODEL)
        assert result.returncode == 0, result.stdout + result.stderr
        assert sorted(hub.downloads) == sorted(files)
        store = ModelStore(env["QWEN_UI_MODEL_DIR"])
        snap = store.verify(MODEL, "master", full=True)
        for rel, data in files.items():
            assert (snap.path / rel).read_bytes() == data
        assert "free space in" in result.stdout
        assert not store.layout.staging_dir(MODEL, "master").exists()

        hub.downloads.clear()
        again = script(env, MODEL)
        assert again.returncode == 0, again.stderr
        assert "already installed and identical to ModelScope" in again.stdout
        assert hub.downloads == []
        assert again.stdout.strip().endswith(str(snap.path))


def test_force_repairs_a_damaged_snapshot(env: dict[str, str]) -> None:
    files = model_files(seed=7)
    with FakeModelScope(MODEL, files) as hub:
        env["MODELSCOPE_ENDPOINT"] = hub.url
        assert script(env, MODEL).returncode == 0
        store = ModelStore(env["QWEN_UI_MODEL_DIR"])
        victim = store.resolve(MODEL, "master").path / "tokenizer.json"
        os.chmod(victim, 0o644)
        victim.write_bytes(victim.read_bytes().upper())  # same size: only --full sees it
        verify = subprocess.run(
            [sys.executable, "-m", "qwen_ui.cli", "models", "verify", "--full"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert verify.returncode == 1
        assert f"repair: scripts/cache_model.sh --force {MODEL} master" in verify.stderr
        assert "already installed" in script(env, MODEL).stdout  # sizes and hashes listed match
        result = script(env, "--force", MODEL)
        assert result.returncode == 0, result.stderr
        assert "replaced a damaged copy" in result.stdout
    assert store.verify(MODEL, "master", full=True)


def test_rerun_resumes_from_staging(env: dict[str, str]) -> None:
    files = model_files(seed=6)
    store = ModelStore(env["QWEN_UI_MODEL_DIR"])
    staging = store.layout.staging_dir(MODEL, "master")
    done = "model-00001-of-00002.safetensors"
    make_model(staging, {done: files[done]})  # left by an interrupted run
    with FakeModelScope(MODEL, files) as hub:
        env["MODELSCOPE_ENDPOINT"] = hub.url
        result = script(env, MODEL, "--keep-staging")
        assert result.returncode == 0, result.stdout + result.stderr
        assert done not in hub.downloads
        assert sorted(hub.downloads) == sorted(set(files) - {done})
        assert "already downloaded" in result.stdout
    assert store.verify(MODEL, "master", full=True)
    assert staging.exists()


def test_not_enough_space(env: dict[str, str]) -> None:
    with FakeModelScope(MODEL, {"config.json": b"{}"}) as hub:
        real = hub.listing
        hub.listing = lambda: {  # type: ignore[method-assign]
            **real(),
            "Data": {
                "Files": [{"Path": "huge.bin", "Type": "blob", "Size": 2**60, "Sha256": "0" * 64}]
            },
        }
        env["MODELSCOPE_ENDPOINT"] = hub.url
        result = script(env, MODEL)
        assert result.returncode == 5
        assert "not enough free space" in result.stderr
        assert hub.downloads == []


def test_unknown_model(env: dict[str, str]) -> None:
    with FakeModelScope("Qwen/Other", {"config.json": b"{}"}) as hub:
        env["MODELSCOPE_ENDPOINT"] = hub.url
        result = script(env, MODEL, "v9")
        assert result.returncode == 4
        assert f"has no model {MODEL} with revision v9" in result.stderr


def test_bad_arguments(env: dict[str, str]) -> None:
    assert script(env, "--bogus").returncode == 2
    assert script(env, "a/b", "c", "d").returncode == 2
    help_text = script(env, "--help")
    assert help_text.returncode == 0 and "QWEN_UI_MODEL_DIR" in help_text.stdout


def test_parse_listing_shapes() -> None:
    body = (
        b'{"Code":200,"Data":{"Files":[{"Path":"a","Type":"blob","Size":3,"Sha256":"x"},'
        b'{"Path":"d","Type":"tree","Size":0}]},"Success":true}'
    )
    [entry] = parse_listing(body, "e", "o/m", "r") or []
    assert (entry.path, entry.size, entry.sha256) == ("a", 3, "x")
    assert parse_listing(b"<html>", "e", "o/m", "r") is None
    assert parse_listing(b'{"Data":{"Files":[{"Path":"a"}]}}', "e", "o/m", "r") is None


def test_failed_download_says_rerun(env: dict[str, str]) -> None:
    files = model_files(seed=8)
    with FakeModelScope(MODEL, files) as hub:
        hub.missing = {"tokenizer.json"}  # listed, but the download answers 404
        env["MODELSCOPE_ENDPOINT"] = hub.url
        started = time.monotonic()
        result = script(env, MODEL)
        assert result.returncode == 6, result.stdout + result.stderr
        assert f"the download from ModelScope at {hub.url} failed" in result.stderr
        assert "Re-run the same command to resume" in result.stderr
        assert "Traceback" not in result.stderr
        assert time.monotonic() - started < 60
        store = ModelStore(env["QWEN_UI_MODEL_DIR"])
        assert not store.is_installed(MODEL, "master")
        hub.missing = set()
        hub.downloads.clear()
        result = script(env, MODEL)
        assert result.returncode == 0, result.stderr
        assert hub.downloads == ["tokenizer.json"]  # the rest was kept from the first run
    assert store.verify(MODEL, "master", full=True)


FP8 = b'{"model_type": "qwen3_vl", "quantization_config": {"quant_method": "fp8"}}'


def test_a_layout_the_engine_cannot_run_is_refused_before_the_download(
    tmp_path: Path, env: dict[str, str]
) -> None:
    files = {**model_files(seed=9), "config.json": FP8}
    with FakeModelScope(MODEL, files) as hub:
        env["MODELSCOPE_ENDPOINT"] = hub.url
        result = script(env, MODEL)
        assert result.returncode == 7, result.stdout + result.stderr
        assert "FP8 weights are not supported by the local engine" in result.stderr
        assert hub.downloads == ["config.json"]  # no weights
    store = ModelStore(env["QWEN_UI_MODEL_DIR"])
    assert not store.is_installed(MODEL, "master")
    src = str(make_model(tmp_path / "src", files))
    refused = script(env, "--from-dir", src, MODEL)
    assert refused.returncode == 2 and "FP8 weights" in refused.stderr
    assert not store.is_installed(MODEL, "master")
    forced = script(env, "--skip-layout-check", "--from-dir", src, MODEL)
    assert forced.returncode == 0, forced.stderr
    assert store.is_installed(MODEL, "master")


def test_the_checked_config_is_not_downloaded_twice(env: dict[str, str]) -> None:
    files = model_files(seed=10)
    with FakeModelScope(MODEL, files) as hub:
        env["MODELSCOPE_ENDPOINT"] = hub.url
        result = script(env, MODEL)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "checkpoint layout: Qwen2.5-VL, unquantized" in result.stdout
        assert sorted(hub.downloads) == sorted(files)  # config.json once, by the check
