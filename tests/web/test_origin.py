"""Same-site proof for cookie-authenticated posts (web/origin.py)."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from qwen_ui.web.origin import is_allowed_origin, same_site_request

HOST = "qwen.example.com"


@pytest.mark.parametrize(
    ("url", "host", "allowed"),
    [
        ("https://qwen.example.com", HOST, True),
        ("https://qwen.example.com:443", HOST, True),
        ("http://QWEN.example.com", HOST, True),
        ("http://127.0.0.1:7860", "127.0.0.1:7860", True),
        ("http://127.0.0.1:7861", "127.0.0.1:7860", False),
        ("https://evil.example", HOST, False),
        ("https://qwen.example.com.evil.example", HOST, False),
        ("null", HOST, False),
        ("javascript:alert(1)", HOST, False),
        ("https://portal.example.com", HOST, True),  # configured
        ("https://qwen.example.com:99999", HOST, False),
    ],
)
def test_is_allowed_origin(url: str, host: str, allowed: bool) -> None:
    assert is_allowed_origin(url, host, ["https://portal.example.com"]) is allowed


def test_origin_first_then_referer_else_unproven() -> None:
    def headers(**values: str) -> Headers:
        return Headers({"host": HOST, **{k.replace("_", "-"): v for k, v in values.items()}})

    assert same_site_request(headers(origin="https://qwen.example.com"), ())
    assert not same_site_request(
        headers(origin="https://evil.example", referer="https://qwen.example.com/"), ()
    )
    assert same_site_request(headers(referer="https://qwen.example.com/chat?x=1"), ())
    assert not same_site_request(headers(referer="https://evil.example/"), ())
    assert not same_site_request(headers(), ())
