"""OSS objects: key validation, browsing and fetching with the session's own keys, and
tenant isolation (A cannot read B's objects, whatever key it crafts)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from qwen_ui.auth.errors import ObjectKeyRejected, ObjectTooLarge
from qwen_ui.auth.oss_client import OSSConnector
from qwen_ui.auth.oss_objects import TenantObjects, key_problem, validate_folder
from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig
from tests.auth.conftest import (
    ACME,
    ACME_OBJECTS,
    BETA,
    BUCKET,
    REGION,
    SecretWatch,
    local_fields,
    oss_fields,
    session_cookie,
    submit,
)
from tests.support.oss_server import FakeOSS

CRAFTED = [
    "beta/secret-plan.png",
    "acme/../beta/secret-plan.png",
    "acme/%2e%2e/beta/secret-plan.png",
    "acme/%2e%2e%2fbeta/secret-plan.png",
    "acme%2f..%2fbeta/secret-plan.png",
    "/beta/secret-plan.png",
    "/acme/../beta/secret-plan.png",
    "acme/./cat.png",
    "acme//cat.png",
    "acme\\..\\beta\\secret-plan.png",
    "oss://beta-private/beta/other.png",
    "https://beta-private.oss.example/beta/other.png",
    "acme/\x00cat.png",
    "",
]


@pytest.mark.parametrize("key", CRAFTED)
def test_crafted_keys_are_rejected(key: str) -> None:
    assert key_problem("acme/", key) is not None


@pytest.mark.parametrize(
    "key", ["acme/cat.png", "acme/photos/dog.jpg", "acme/a b+c&d.png", "acme/中文.png"]
)
def test_plain_keys_pass(key: str) -> None:
    assert key_problem("acme/", key) is None


def test_folders_stay_inside_the_prefix() -> None:
    assert validate_folder("acme/", "") == "acme/"
    assert validate_folder("acme/", "photos") == "acme/photos/"
    for folder in ("..", "../beta", "photos/../..", "%2e%2e"):
        with pytest.raises(ObjectKeyRejected):
            validate_folder("acme/", folder)


def _objects(
    oss: FakeOSS, keys: OSSCredentials, prefix: str, max_bytes: int = 1 << 20
) -> TenantObjects:
    config = OSSConfig(region=REGION, endpoint=oss.endpoint, bucket=BUCKET, prefix=prefix)
    return TenantObjects(OSSConnector(timeout_s=2), config, keys, max_bytes)


async def test_pages_through_the_prefix(oss: FakeOSS) -> None:
    objects = _objects(oss, OSSCredentials(ACME.key_id, ACME.secret), "acme/")
    first = await objects.list(size=1)
    assert [o.name for o in first.objects] == ["cat.png"]
    assert first.next_cursor is not None
    second = await objects.list(cursor=first.next_cursor, size=1)
    assert second.folders == ["photos/"] and second.next_cursor is None
    inside = await objects.list("photos")
    assert sorted(o.name for o in inside.objects) == ["photos/big.jpg", "photos/dog.jpg"]


async def test_fetch_and_size_limit(oss: FakeOSS) -> None:
    objects = _objects(oss, OSSCredentials(ACME.key_id, ACME.secret), "acme/", max_bytes=1024)
    assert await objects.fetch("acme/cat.png") == ACME_OBJECTS["acme/cat.png"]
    with pytest.raises(ObjectTooLarge):
        await objects.fetch("acme/photos/big.jpg")


async def test_ram_is_the_boundary_even_past_our_checks(oss: FakeOSS) -> None:
    """A tenants file with a wrong prefix still cannot read another prefix: OSS refuses."""
    from qwen_ui.auth.errors import ObjectAccessDenied

    objects = _objects(oss, OSSCredentials(ACME.key_id, ACME.secret), "beta/")
    with pytest.raises(ObjectAccessDenied):
        await objects.fetch("beta/secret-plan.png")


# --- over HTTP, as a tenant ---------------------------------------------------------------


def _login_acme(web: TestClient, watch: SecretWatch) -> None:
    assert submit(web, "acme", oss_fields(ACME)).status_code == 303
    watch.add(session_cookie(web))


def test_browse_and_fetch_over_http(web: TestClient, secret_watch: SecretWatch) -> None:
    _login_acme(web, secret_watch)
    page = web.get("/api/v1/oss/objects", params={"size": 10}).json()
    assert page["folders"] == ["photos/"]
    assert [o["key"] for o in page["objects"]] == ["acme/cat.png"]
    got = web.get("/api/v1/oss/object", params={"key": "acme/cat.png"})
    assert got.status_code == 200 and got.content == ACME_OBJECTS["acme/cat.png"]
    assert got.headers["x-content-type-options"] == "nosniff"


def test_tenant_a_cannot_read_b_over_http(
    web: TestClient, oss: FakeOSS, secret_watch: SecretWatch
) -> None:
    _login_acme(web, secret_watch)
    before = len(oss.calls())
    for key in CRAFTED[:-1]:
        response = web.get("/api/v1/oss/object", params={"key": key})
        assert response.status_code == 400, key
        assert response.json()["error"]["code"] == "object_key_rejected", key
        assert b"beta only" not in response.content
    assert len(oss.calls()) == before, "a rejected key reached OSS"


def test_no_bucket_or_endpoint_from_the_user(
    web: TestClient, oss: FakeOSS, secret_watch: SecretWatch
) -> None:
    _login_acme(web, secret_watch)
    response = web.get(
        "/api/v1/oss/object",
        params={"key": "acme/cat.png", "bucket": "beta-private", "endpoint": "http://evil"},
    )
    assert response.status_code == 200  # extra parameters are ignored
    assert {call.path.split("/")[1] for call in oss.calls(ACME.key_id)} == {BUCKET}


def test_folder_escape_over_http(web: TestClient, secret_watch: SecretWatch) -> None:
    _login_acme(web, secret_watch)
    for folder in ("../beta", "%2e%2e%2fbeta", "/beta"):
        response = web.get("/api/v1/oss/objects", params={"folder": folder})
        assert response.status_code == 400, folder


def test_local_tenant_has_no_object_storage(web: TestClient, secret_watch: SecretWatch) -> None:
    submit(web, "school", local_fields("alice"))
    secret_watch.add(session_cookie(web))
    assert web.get("/api/v1/oss/objects").status_code == 404


def test_disabled_key_ends_the_session(
    web: TestClient, oss: FakeOSS, secret_watch: SecretWatch
) -> None:
    _login_acme(web, secret_watch)
    del oss.keys[ACME.key_id]  # the key is deleted in RAM
    response = web.get("/api/v1/oss/object", params={"key": "acme/cat.png"})
    assert response.status_code == 401
    assert web.get("/api/v1/me").status_code == 401


def test_oss_down_while_browsing_is_503(
    web: TestClient, oss: FakeOSS, secret_watch: SecretWatch
) -> None:
    _login_acme(web, secret_watch)
    oss.stop()
    response = web.get("/api/v1/oss/objects")
    assert response.status_code == 503
    assert web.get("/api/v1/me").status_code == 200


def test_beta_reads_its_own(web: TestClient, secret_watch: SecretWatch) -> None:
    submit(web, "beta", oss_fields(BETA))
    secret_watch.add(session_cookie(web))
    got = web.get("/api/v1/oss/object", params={"key": "beta/secret-plan.png"})
    assert got.status_code == 200
    assert web.get("/api/v1/oss/object", params={"key": "acme/cat.png"}).status_code == 400
