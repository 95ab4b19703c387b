"""The tenants file: model, TOML round trip, https rule, live reload."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.errors import TenantsFileError
from qwen_ui.auth.tenants import OSSConfig, Tenant, TenantRegistry, TenantsFile
from tests.support.auth import local_tenant

OSS_TOML = """
[tenants.acme]
name = "Acme"
kind = "oss"
[tenants.acme.oss]
region = "cn-hangzhou"
endpoint = "{endpoint}"
bucket = "acme-img"
prefix = "vqa/"
[tenants.acme.limits]
concurrent_requests = 3
questions_per_day = 50
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    write(path, OSS_TOML.format(endpoint="https://oss-cn-hangzhou.aliyuncs.com"))
    loaded = tenants_file.load(path)
    acme = loaded.tenants["acme"]
    assert acme.oss is not None and acme.oss.bucket == "acme-img"
    assert acme.limits.questions_per_day == 50
    tenants_file.save(path, tenants_file.with_tenant(loaded, local_tenant("school", ("alice",))))
    again = tenants_file.load(path)
    assert again.tenants["acme"] == acme
    assert again.tenants["school"].users["alice"].startswith("scrypt$")
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("endpoint", "insecure", "ok"),
    [
        ("https://oss-cn-hangzhou.aliyuncs.com", False, True),
        ("http://oss-cn-hangzhou.aliyuncs.com", False, False),
        ("http://oss-cn-hangzhou.aliyuncs.com", True, False),  # only loopback, even then
        ("http://127.0.0.1:9000", False, False),
        ("http://127.0.0.1:9000", True, True),
        ("http://localhost:9000", True, True),
    ],
)
def test_https_required(tmp_path: Path, endpoint: str, insecure: bool, ok: bool) -> None:
    path = write(tmp_path / "t.toml", OSS_TOML.format(endpoint=endpoint))
    if ok:
        assert tenants_file.load(path, allow_insecure=insecure).tenants["acme"]
    else:
        with pytest.raises(TenantsFileError, match="https"):
            tenants_file.load(path, allow_insecure=insecure)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[tenants.Bad_ID]\nkind = 'local'\n", "tenants.Bad_ID.id"),
        ("[tenants.a]\nkind = 'oss'\n", "oss tenant needs"),
        ("[tenants.a]\nkind = 'local'\nsurprise = 1\n", "surprise"),
        ("not toml [", "Tenants file"),
    ],
)
def test_errors_name_the_problem(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(TenantsFileError) as caught:
        tenants_file.load(write(tmp_path / "t.toml", text))
    assert fragment in caught.value.message("en")


@pytest.mark.parametrize("prefix", ["../", "a/../", "./", "/abs/", "a\\b/", "%2e%2e/", "noslash"])
def test_bad_prefixes(prefix: str) -> None:
    with pytest.raises(ValueError):
        OSSConfig(region="r", endpoint="https://e", bucket="bkt", prefix=prefix)


def test_registry_reloads_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    tenants_file.save(path, TenantsFile(tenants={"a": local_tenant("a", ("u",))}))
    registry = TenantRegistry(path)
    assert registry.get("a") is not None and registry.get("b") is None
    tenants_file.save(path, TenantsFile(tenants={"b": local_tenant("b", ("u",))}))
    os.utime(path, ns=(1, 1))
    assert registry.get("b") is not None and registry.get("a") is None


def test_registry_sees_a_same_size_file_saved_in_the_same_tick(tmp_path: Path) -> None:
    """A new password hash has the old one's size, and a coarse clock may give the new
    file the old one's mtime: a saved file is a new inode, so it is read again."""
    path = tmp_path / "tenants.toml"
    old = Tenant(id="a", kind="local", users={"u": "scrypt$" + "x" * 40})
    new = old.model_copy(update={"users": {"u": "scrypt$" + "y" * 40}})
    tenants_file.save(path, TenantsFile(tenants={"a": old}))
    registry = TenantRegistry(path)
    assert registry.get("a") == old
    before = path.stat()
    tenants_file.save(path, TenantsFile(tenants={"a": new}))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert registry.get("a") == new


def test_registry_keeps_the_last_good_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tenants.toml"
    tenants_file.save(path, TenantsFile(tenants={"a": local_tenant("a", ("u",))}))
    registry = TenantRegistry(path)
    write(path, "broken [")
    assert registry.get("a") is not None
    assert "keeping the previous tenants" in caplog.text


def test_missing_file_means_no_tenants(tmp_path: Path) -> None:
    assert TenantRegistry(tmp_path / "none.toml").all() == []


def test_kind_rules() -> None:
    with pytest.raises(ValueError):
        Tenant(
            id="a",
            kind="local",
            oss=OSSConfig(region="r", endpoint="https://e", bucket="bkt", prefix="p/"),
        )
