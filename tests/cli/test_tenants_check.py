"""``qwen-ui tenants check TENANT`` against our signature-verifying OSS server: every
outcome names OSS's error code, the secret never comes from or goes to the command line."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_ui.cli import main
from qwen_ui.logs import quiet_oss2_logging
from tests.auth.conftest import ACME, ACME_NO_RIGHTS, ACME_STS, Keys, make_oss, oss_tenant
from tests.conftest import free_port
from tests.support.auth import add_tenants
from tests.support.oss_server import FakeOSS


@pytest.fixture
def oss() -> Iterator[FakeOSS]:
    server = make_oss()
    yield server
    server.stop()


@pytest.fixture
def world(home: Path, oss: FakeOSS, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QWEN_UI_ALLOW_INSECURE_OSS_ENDPOINTS", "true")
    monkeypatch.setenv("QWEN_UI_OSS_TIMEOUT_S", "2")
    wrong_region = oss_tenant("far", oss.endpoint, "acme/", [])
    no_bucket = oss_tenant("nobucket", oss.endpoint, "acme/", [])
    add_tenants(
        home / "tenants.toml",
        oss_tenant("acme", oss.endpoint, "acme/", []),
        wrong_region.model_copy(
            update={"oss": wrong_region.oss.model_copy(update={"region": "cn-elsewhere"})}  # type: ignore[union-attr]
        ),
        no_bucket.model_copy(
            update={"oss": no_bucket.oss.model_copy(update={"bucket": "no-such-bucket"})}  # type: ignore[union-attr]
        ),
        oss_tenant("gone", f"http://127.0.0.1:{free_port()}", "acme/", []),
    )
    return home


def check(
    home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tenant: str,
    keys: Keys,
    *flags: str,
) -> tuple[int, str]:
    """Run the command with the key id as a flag and the secret (and token) piped in."""
    lines = [keys.secret, *([keys.sts_token or ""] if "--sts" in flags else [])]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    argv = ["tenants", "--home", str(home), "check", tenant, "--key-id", keys.key_id, *flags]
    assert keys.secret not in " ".join(argv)
    code = main(argv)
    out, err = capsys.readouterr()
    assert keys.secret not in out + err
    return code, out + err


WRONG_SECRET = Keys(ACME.key_id, "not-the-secret-0000000000000")
UNKNOWN = Keys("LTAIunknownKey000001", "whatever-secret-000000000000")


@pytest.mark.parametrize(
    ("tenant", "keys", "code", "advice"),
    [
        ("acme", WRONG_SECRET, "SignatureDoesNotMatch", "check the region (cn-test)"),
        ("far", ACME, "SignatureDoesNotMatch", "check the region (cn-elsewhere)"),
        ("acme", UNKNOWN, "InvalidAccessKeyId", "OSS does not know this AccessKey id"),
        ("acme", ACME_NO_RIGHTS, "AccessDenied", "lacks oss:ListObjects on prefix 'acme/'"),
        ("nobucket", ACME, "NoSuchBucket", "bucket no-such-bucket does not exist"),
        ("gone", ACME, "Unreachable", "could not reach http://127.0.0.1:"),
    ],
)
def test_failures_name_the_oss_error_code(
    world: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tenant: str,
    keys: Keys,
    code: str,
    advice: str,
) -> None:
    quiet_oss2_logging()
    status, out = check(world, capsys, monkeypatch, tenant, keys)
    assert status == 1
    assert f"FAILED {code}" in out
    assert advice in out


def test_a_working_key_passes(
    world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, out = check(world, capsys, monkeypatch, "acme", ACME)
    assert status == 0
    assert f"tenant acme: OK, key {ACME.key_id} can list bucket shared-bucket" in out


def test_sts_keys_and_an_expired_token(
    world: Path,
    oss: FakeOSS,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert check(world, capsys, monkeypatch, "acme", ACME_STS, "--sts")[0] == 0
    oss.keys[ACME_STS.key_id].expires_at = oss.now() - 1
    status, out = check(world, capsys, monkeypatch, "acme", ACME_STS, "--sts")
    assert (status, "FAILED SecurityTokenExpired" in out) == (1, True)
    assert ACME_STS.sts_token not in out  # type: ignore[operator]


def test_a_skewed_clock_is_named(
    world: Path,
    oss: FakeOSS,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    oss.clock_offset = 3600
    status, out = check(world, capsys, monkeypatch, "acme", ACME)
    assert status == 1
    assert "FAILED RequestTimeTooSkewed" in out and "fix the clock" in out


def test_secret_from_an_environment_variable(
    world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_SECRET", ACME.secret)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    argv = ["check", "acme", "--key-id", ACME.key_id, "--secret-env", "ACME_SECRET"]
    assert main(["tenants", "--home", str(world), *argv]) == 0
    assert "OK" in capsys.readouterr().out


def test_unknown_and_local_tenants_are_errors(
    world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert check(world, capsys, monkeypatch, "nobody", ACME)[0] == 2
    code = main(["tenants", "--home", str(world), "add-local", "school", "alice"])
    capsys.readouterr()
    assert code == 0
    status, out = check(world, capsys, monkeypatch, "school", ACME)
    assert status == 2 and "not an OSS tenant" in out
