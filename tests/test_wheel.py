"""The built wheel works on its own: installed into a fresh virtual environment, its
``qwen-ui serve`` starts from a folder outside the checkout and serves the page.

The wheel is built offline from a copy of the sources (``pip wheel --no-deps
--no-build-isolation``, with the test environment's setuptools). The fresh environment gets
the wheel alone (``--no-deps``); the project's dependencies come from the test environment
through a ``.pth`` file listing its site-packages, which Python appends after the fresh
environment's own (so the wheel's ``qwen_ui`` is the one imported, never the checkout's).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess, log_in_with_form

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("qwen_ui", "pyproject.toml", "README.md")


def build_wheel(work: Path) -> Path:
    """The wheel of a clean copy of the sources (no caches, no build folders in the tree)."""
    src = work / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=ignore)
        else:
            shutil.copy(source, src / name)
    dist = work / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    args = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist)]
    subprocess.run([*pip, *args, str(src)], check=True, cwd=work, timeout=300)
    (wheel,) = dist.glob("qwen_ui-*.whl")
    return wheel


def install(wheel: Path, env_dir: Path) -> Path:
    """A fresh virtual environment holding ``wheel``; returns its ``bin`` folder."""
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "test_env_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    install_args = ["--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    subprocess.run([*pip, *install_args], check=True, timeout=300)
    return env_dir / "bin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    return install(build_wheel(work), work / "venv")


@pytest.fixture(scope="module")
def server(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    outside = tmp_path_factory.mktemp("elsewhere")  # cwd: nothing of the checkout around
    home = tmp_path_factory.mktemp("home")
    env: dict[str, str | None] = {"PYTHONPATH": None, "QWEN_UI_THEMES_DIR": None}
    process = ServerProcess(home, env=env, command=[str(installed / "qwen-ui")], cwd=outside)
    yield process
    process.stop()


def test_the_wheel_imports_its_own_package(installed: Path, tmp_path: Path) -> None:
    code = "import qwen_ui, qwen_ui.settings as s; print(qwen_ui.__file__, s.Settings().themes_dir)"
    result = subprocess.run(
        [str(installed / "python"), "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "QWEN_UI_HOME": str(tmp_path / "home")},
    )
    package, themes = result.stdout.split()
    assert Path(package).is_relative_to(installed.parent)
    assert (Path(themes) / "qwen" / "theme.py").is_file()
    assert Path(themes).is_relative_to(installed.parent)


def test_installed_qwen_ui_serve_loads_the_page(server: ServerProcess) -> None:
    server.wait_for("/login", timeout=600)  # a cold start: nothing compiled yet
    with httpx.Client(base_url=server.url, follow_redirects=False) as client:
        assert client.get("/login").status_code == 200
        log_in_with_form(client, "demo", "demo", server.demo_password())
        assert client.get("/", headers={"Accept": "text/html"}).status_code == 200
        config = client.get("/config")
        assert config.status_code == 200
        assert config.json()["title"]
