"""Is a cookie-authenticated request from this site? (cross-site request forgery)

A browser attaches the session cookie to requests that another site's page makes, so a
state-changing request (POST, PUT, PATCH, DELETE) that authenticates with the cookie must
prove it comes from our own pages: its ``Origin`` (or, when a browser left that out, its
``Referer``) is this site's origin or one of the configured ``cors_origins``. Requests
with an API bearer token carry no ambient credentials and are not checked here.

An origin is scheme, host and port: ``http://host`` is not ``https://host``. This site's
origin is the request's scheme (``scope["scheme"]``: ProxyHeadersMiddleware takes it from
``X-Forwarded-Proto`` of trusted proxies only, ``QWEN_UI_FORWARDED_ALLOW_IPS``) with its
``Host`` header.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = {"http": 80, "https": 443}
WEB_SCHEMES = {"ws": "http", "wss": "https"}  # a WebSocket's page is http(s)

Origin = tuple[str, str, int]  # scheme, host (lowercased), port


def origin_of(url: str) -> Origin | None:
    """The origin of an absolute http(s) URL (an Origin or Referer), the scheme's default
    port filled in; None for anything else (``null``, other schemes, a bad port)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def site_origin(scheme: str, host: str) -> Origin | None:
    """This site's origin: the request's ``scheme`` and its ``Host`` header."""
    scheme = WEB_SCHEMES.get(scheme, scheme)
    host = host.strip()
    if not host or any(c in host for c in "/\\@?#"):
        return None
    return origin_of(f"{scheme}://{host}")


def is_allowed_origin(url: str, site: Origin | None, allowed: Collection[str]) -> bool:
    """``url`` (an Origin or Referer) is this ``site``'s origin or an allowed origin."""
    found = origin_of(url)
    if found is None:
        return False
    if found == site:
        return True
    return any(origin_of(origin) == found for origin in allowed)


def same_site_request(headers: Headers, allowed: Collection[str], scheme: str) -> bool:
    """The Origin header, else the Referer, points at this site (or an allowed origin);
    ``scheme`` is the request's. Neither present: not proven (a browser sends Origin on
    every cross-site post)."""
    site = site_origin(scheme, headers.get("host", ""))
    origin = headers.get("origin")
    if origin is not None:
        return is_allowed_origin(origin, site, allowed)
    referer = headers.get("referer")
    return referer is not None and is_allowed_origin(referer, site, allowed)


def from_this_site(origin: str | None, host: str | None, scheme: str) -> bool:
    """A form post's ``Origin`` is this site's (the login and logout forms); a post
    without one passes here (their CSRF token is checked as well)."""
    if origin is None:
        return True
    found = origin_of(origin)
    return found is not None and found == site_origin(scheme, host or "")
