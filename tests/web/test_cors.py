"""The CORS policy (web/cors.py): closed by default, open only to configured origins."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from qwen_ui.server import create_app
from qwen_ui.settings import Settings

PORTAL = "https://portal.example.com"


def _preflight(client: TestClient, origin: str) -> dict[str, str]:
    headers = {
        "Host": "qwen.example.com",
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
    }
    return dict(client.options("/api/v1/ask", headers=headers).headers)


def test_configured_origin_is_allowed_with_credentials(home: Path) -> None:
    settings = Settings(home=home, cors_origins=f"{PORTAL}/, https://other.example.com")
    assert settings.cors_origin_list == (PORTAL, "https://other.example.com")
    with TestClient(create_app(settings, ui=False)) as client:
        allowed = _preflight(client, PORTAL)
        assert allowed["access-control-allow-origin"] == PORTAL
        assert allowed["access-control-allow-credentials"] == "true"
        assert "access-control-allow-origin" not in _preflight(client, "https://evil.example")


def test_no_origin_is_allowed_by_default(home: Path) -> None:
    with TestClient(create_app(Settings(home=home), ui=False)) as client:
        assert "access-control-allow-origin" not in _preflight(client, PORTAL)
