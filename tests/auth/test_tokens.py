"""API tokens: shown once, stored hashed, bound to one tenant, revocable while serving."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.tokens import TOKEN_RE, add_token, hash_token, new_token, revoke_token
from qwen_ui.settings import Settings
from tests.auth.conftest import (
    BUCKET,
    REGION,
    SecretWatch,
    local_fields,
    session_cookie,
    submit,
)
from tests.support.oss_server import FakeOSS


def issue(settings: Settings, tenant_id: str) -> tuple[str, str]:
    current = tenants_file.load(settings.tenants_path, allow_insecure=True)
    token, record = new_token("test")
    tenant = add_token(current.tenants[tenant_id], record)
    tenants_file.save(settings.tenants_path, tenants_file.with_tenant(current, tenant))
    return token, record.id


def revoke(settings: Settings, tenant_id: str, token_id: str) -> None:
    current = tenants_file.load(settings.tenants_path, allow_insecure=True)
    tenant = revoke_token(current.tenants[tenant_id], token_id)
    assert tenant is not None
    tenants_file.save(settings.tenants_path, tenants_file.with_tenant(current, tenant))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_token_shape_and_stored_hash(auth_settings: Settings, secret_watch: SecretWatch) -> None:
    token, token_id = issue(auth_settings, "acme")
    secret_watch.add(token)
    assert TOKEN_RE.match(token)
    stored = Path(auth_settings.tenants_path).read_text()
    assert token not in stored and hash_token(token) in stored and token_id in stored


def test_token_identifies_its_own_tenant_and_its_storage(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch, oss: FakeOSS
) -> None:
    acme_token, acme_id = issue(auth_settings, "acme")
    beta_token, _ = issue(auth_settings, "beta")
    school_token, _ = issue(auth_settings, "school")
    secret_watch.add(acme_token, beta_token, school_token)
    me = web.get("/api/v1/me", headers=bearer(acme_token)).json()
    storage = {"region": REGION, "endpoint": oss.endpoint, "bucket": BUCKET, "prefix": "acme/"}
    assert me == {"tenant": "acme", "user": f"token:{acme_id}", "method": "token", "oss": storage}
    beta = web.get("/api/v1/me", headers=bearer(beta_token)).json()
    assert beta["tenant"] == "beta" and beta["oss"]["prefix"] == "beta/"
    assert "oss" not in web.get("/api/v1/me", headers=bearer(school_token)).json()


def test_forged_and_foreign_tokens_are_refused(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    acme_token, acme_id = issue(auth_settings, "acme")
    beta_token, _ = issue(auth_settings, "beta")
    secret_watch.add(acme_token, beta_token)
    # B's secret under A's id, A's id with a made-up secret, garbage, another scheme
    spliced = f"qwu_{acme_id}_{beta_token.split('_', 2)[2]}"
    forged = f"qwu_{acme_id}_{'A' * 43}"
    for token in (spliced, forged, "not-a-token", ""):
        response = web.get("/api/v1/me", headers=bearer(token))
        assert response.status_code == 401, token
        assert response.json()["error"]["code"] == "invalid_token"
    basic = web.get("/api/v1/me", headers={"Authorization": "Basic YWxpY2U6eA=="})
    assert basic.status_code == 401


def test_a_bad_token_wins_over_a_good_cookie(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    submit(web, "school", local_fields("alice"))
    secret_watch.add(session_cookie(web))
    assert web.get("/api/v1/me").status_code == 200
    assert web.get("/api/v1/me", headers=bearer("qwu_00000000_" + "B" * 43)).status_code == 401


def test_revoked_token_stops_working_without_restart(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    token, token_id = issue(auth_settings, "acme")
    secret_watch.add(token)
    assert web.get("/api/v1/me", headers=bearer(token)).status_code == 200
    revoke(auth_settings, "acme", token_id)
    assert web.get("/api/v1/me", headers=bearer(token)).status_code == 401


def test_token_cannot_browse_oss(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    token, _ = issue(auth_settings, "acme")
    secret_watch.add(token)
    assert web.get("/api/v1/oss/objects", headers=bearer(token)).status_code == 401
