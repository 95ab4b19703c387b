"""Is a cookie-authenticated request from this site? (cross-site request forgery)

A browser attaches the session cookie to requests that another site's page makes, so a
state-changing request (POST, PUT, PATCH, DELETE) that authenticates with the cookie must
prove it comes from our own pages: its ``Origin`` (or, when a browser left that out, its
``Referer``) names this host or one of the configured ``cors_origins``. Requests with an
API bearer token carry no ambient credentials and are not checked here.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = {"http": "80", "https": "443"}


def _netloc(url: str) -> str | None:
    """``host[:port]`` of an absolute http(s) URL, lowercased, default ports dropped."""
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        return None
    if port is None or str(port) == DEFAULT_PORTS[parts.scheme]:
        return host
    return f"{host}:{port}"


def _host(value: str) -> str:
    """The Host header in the form :func:`_netloc` gives (either default port dropped)."""
    host = value.strip().lower()
    for port in DEFAULT_PORTS.values():
        host = host.removesuffix(f":{port}")
    return host


def is_allowed_origin(url: str, host: str, allowed: Collection[str]) -> bool:
    """``url`` (an Origin or Referer) names this host or an allowed origin."""
    netloc = _netloc(url)
    if netloc is None:
        return False
    if netloc == _host(host):
        return True
    return any(_netloc(origin) == netloc for origin in allowed)


def same_site_request(headers: Headers, allowed: Collection[str]) -> bool:
    """The Origin header, else the Referer, points at this site (or an allowed origin).
    Neither present: not proven (a browser sends Origin on every cross-site post)."""
    host = headers.get("host", "")
    origin = headers.get("origin")
    if origin is not None:
        return is_allowed_origin(origin, host, allowed)
    referer = headers.get("referer")
    return referer is not None and is_allowed_origin(referer, host, allowed)
