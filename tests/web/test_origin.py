"""Same-site proof for cookie-authenticated posts (web/origin.py): scheme, host and port."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from qwen_ui.web.origin import (
    from_this_site,
    is_allowed_origin,
    origin_of,
    same_site_request,
    site_origin,
)

HOST = "qwen.example.com"
ALLOWED = ["https://portal.example.com"]


@pytest.mark.parametrize(
    ("url", "scheme", "host", "allowed"),
    [
        ("https://qwen.example.com", "https", HOST, True),
        ("https://qwen.example.com:443", "https", HOST, True),
        ("https://QWEN.example.com", "https", "qwen.example.com:443", True),
        ("http://qwen.example.com", "https", HOST, False),  # another scheme
        ("https://qwen.example.com", "http", HOST, False),
        ("http://qwen.example.com:443", "https", HOST, False),
        ("https://qwen.example.com:80", "http", HOST, False),
        ("http://127.0.0.1:7860", "http", "127.0.0.1:7860", True),
        ("http://127.0.0.1:7861", "http", "127.0.0.1:7860", False),
        ("http://[::1]:7860", "http", "[::1]:7860", True),
        ("https://evil.example", "https", HOST, False),
        ("https://qwen.example.com.evil.example", "https", HOST, False),
        ("null", "https", HOST, False),
        ("javascript:alert(1)", "https", HOST, False),
        ("https://portal.example.com", "https", HOST, True),  # configured
        ("https://portal.example.com", "http", HOST, True),  # configured, whatever the site
        ("http://portal.example.com", "https", HOST, False),
        ("https://qwen.example.com:99999", "https", HOST, False),
        ("https://qwen.example.com", "https", "", False),
        ("https://evil.example", "https", "evil.example/@qwen.example.com", False),
    ],
)
def test_is_allowed_origin(url: str, scheme: str, host: str, allowed: bool) -> None:
    assert is_allowed_origin(url, site_origin(scheme, host), ALLOWED) is allowed


def test_origins_fill_in_the_default_port() -> None:
    assert origin_of("https://Qwen.example.com/x?y") == ("https", HOST, 443)
    assert origin_of("http://qwen.example.com:8080") == ("http", HOST, 8080)
    assert site_origin("wss", HOST) == ("https", HOST, 443)  # a WebSocket's page
    assert origin_of("ftp://qwen.example.com") is None


def test_origin_first_then_referer_else_unproven() -> None:
    def headers(**values: str) -> Headers:
        return Headers({"host": HOST, **{k.replace("_", "-"): v for k, v in values.items()}})

    assert same_site_request(headers(origin="https://qwen.example.com"), (), "https")
    assert not same_site_request(headers(origin="https://qwen.example.com"), (), "http")
    assert not same_site_request(
        headers(origin="https://evil.example", referer="https://qwen.example.com/"), (), "https"
    )
    assert same_site_request(headers(referer="https://qwen.example.com/chat?x=1"), (), "https")
    assert not same_site_request(headers(referer="http://qwen.example.com/chat"), (), "https")
    assert not same_site_request(headers(referer="https://evil.example/"), (), "https")
    assert not same_site_request(headers(), (), "https")


def test_form_posts_from_this_site() -> None:
    assert from_this_site(None, HOST, "https")  # no Origin: the form's CSRF token decides
    assert from_this_site("https://qwen.example.com", HOST, "https")
    for origin in ("http://qwen.example.com", "https://evil.example", "null"):
        assert not from_this_site(origin, HOST, "https"), origin
    assert not from_this_site("https://qwen.example.com", None, "https")
