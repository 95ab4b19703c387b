"""``qwen-ui tenants …`` and the first-run demo tenant."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.passwords import verify_password
from qwen_ui.cli import main
from qwen_ui.cli.tenants import first_run_demo_tenant
from qwen_ui.server import create_app
from qwen_ui.settings import Settings


def run(home: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["tenants", "--home", str(home), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_add_local_prints_the_password_once(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(home, capsys, "add-local", "school", "alice")
    assert code == 0
    password = out.rsplit(": ", 1)[1].strip()
    stored = tenants_file.load(home / "tenants.toml").tenants["school"].users["alice"]
    assert password not in (home / "tenants.toml").read_text()
    assert verify_password(password, stored)
    code, _, err = run(home, capsys, "add-local", "school", "alice")
    assert code == 2 and "passwd" in err
    code, out, _ = run(home, capsys, "passwd", "school", "alice")
    new = out.rsplit(": ", 1)[1].strip()
    stored = tenants_file.load(home / "tenants.toml").tenants["school"].users["alice"]
    assert (
        new != password and verify_password(new, stored) and not verify_password(password, stored)
    )


def test_add_oss_list_token_revoke(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(
        home,
        capsys,
        "add-oss",
        "acme",
        "--region",
        "cn-hangzhou",
        "--endpoint",
        "https://oss-cn-hangzhou.aliyuncs.com",
        "--bucket",
        "acme-img",
        "--prefix",
        "vqa/",
        "--allow-key-id",
        "STS.*",
    )
    assert code == 0
    code, out, _ = run(home, capsys, "token", "acme", "--label", "ci")
    token = out.strip().splitlines()[-1]
    token_id = re.search(r"token id ([0-9a-f]{8})", out).group(1)  # type: ignore[union-attr]
    assert token.startswith(f"qwu_{token_id}_") and token not in (home / "tenants.toml").read_text()
    _, listing, _ = run(home, capsys, "list")
    assert "acme" in listing and token_id in listing and token not in listing
    assert run(home, capsys, "revoke-token", "acme", token_id)[0] == 0
    assert token_id not in run(home, capsys, "list")[1]
    assert run(home, capsys, "revoke-token", "acme", token_id)[0] == 2


def test_remove_user_and_tenant(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(home, capsys, "add-local", "school", "alice")
    run(home, capsys, "add-local", "school", "bob")
    run(home, capsys, "token", "school")
    assert run(home, capsys, "remove-user", "school", "alice")[0] == 0
    school = tenants_file.load(home / "tenants.toml").tenants["school"]
    assert list(school.users) == ["bob"] and len(school.tokens) == 1
    assert run(home, capsys, "remove-user", "school", "alice")[0] == 2
    run(home, capsys, "add-local", "other", "carol")
    assert run(home, capsys, "remove-tenant", "school")[0] == 0
    assert list(tenants_file.load(home / "tenants.toml").tenants) == ["other"]
    assert run(home, capsys, "remove-tenant", "school")[0] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--endpoint", "http://oss-cn-hangzhou.aliyuncs.com", "--prefix", "vqa/"], "https"),
        (["--endpoint", "https://oss-cn-hangzhou.aliyuncs.com", "--prefix", "../"], "prefix"),
    ],
)
def test_add_oss_refuses_bad_input(
    home: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = run(
        home, capsys, "add-oss", "acme", "--region", "cn-hangzhou", "--bucket", "acme-img", *args
    )
    assert code == 2 and message in err
    assert not (home / "tenants.toml").exists()


def test_first_serve_creates_the_demo_tenant(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(home=home)
    first_run_demo_tenant(settings)
    out = capsys.readouterr().out
    password = out.rsplit(": ", 1)[1].strip()
    first_run_demo_tenant(settings)
    assert capsys.readouterr().out == ""  # printed once only
    with TestClient(create_app(settings), follow_redirects=False) as client:
        page = client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        assert 'id="m-local" name="method" value="local" checked' in page.text
        response = client.post(
            "/login",
            data={
                "csrf": csrf,
                "tenant": "demo",
                "method": "local",
                "user": "demo",
                "password": password,
            },
        )
        assert response.status_code == 303
