"""``qwen-ui models activate|reload|served``: switch the models of a running server.

They call the server's admin routes (``/admin/models...``) with ``QWEN_UI_ADMIN_TOKEN`` as
a Bearer token, read from the environment (never from the command line, where other
users of the host could read it in the process list). The server is ``--url``, else
``http://QWEN_UI_HOST:QWEN_UI_PORT`` (a wildcard host means this host's loopback).
Exit codes: 0 done, 1 the server refused (its message is printed), 2 no token or no
server.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from qwen_ui.settings import Settings

WILDCARD_HOSTS = {"0.0.0.0", "::", ""}  # noqa: S104 (names, nothing binds here)


def register(cmds: Any) -> None:
    """Add the switching commands to ``qwen-ui models``."""
    p = cmds.add_parser(
        "activate",
        help="make MODEL@REV the default of a running server (no restart)",
        description="Make OWNER/NAME@REV the default model of a running server; another "
        "revision of the same model is replaced. Running requests finish on the model they "
        "started on. Needs QWEN_UI_ADMIN_TOKEN in the environment. " + _EXITS,
    )
    p.add_argument("model", metavar="OWNER/NAME@REV")
    _server_flags(p)
    p.set_defaults(func=cmd_activate)

    p = cmds.add_parser(
        "reload",
        help="re-read the served model list and store refs (what SIGHUP does)",
        description="Re-read QWEN_UI_SETTINGS_FILE's model list and every store ref on a "
        "running server. " + _EXITS,
    )
    _server_flags(p)
    p.set_defaults(func=cmd_reload)

    p = cmds.add_parser("served", help="the models a running server offers, and their state")
    _server_flags(p)
    p.set_defaults(func=cmd_served)


_EXITS = "Exit codes: 0 done, 1 refused by the server, 2 no token or server unreachable."


def _server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="server base URL (default http://QWEN_UI_HOST:QWEN_UI_PORT)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="default 30")


def cmd_activate(args: argparse.Namespace) -> int:
    return _call(args, "POST", "/admin/models/activate", {"model": args.model})


def cmd_reload(args: argparse.Namespace) -> int:
    return _call(args, "POST", "/admin/models/reload", None)


def cmd_served(args: argparse.Namespace) -> int:
    return _call(args, "GET", "/admin/models", None)


def base_url(settings: Settings, url: str | None) -> str:
    if url:
        return url.rstrip("/")
    host = "127.0.0.1" if settings.host in WILDCARD_HOSTS else settings.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}{settings.root_path}"


def _call(args: argparse.Namespace, method: str, path: str, body: Any) -> int:
    import httpx  # here: every qwen-ui command builds this parser, `serve` must start fast

    settings = Settings()
    if settings.admin_token is None:
        print("error: set QWEN_UI_ADMIN_TOKEN to the server's admin token", file=sys.stderr)
        return 2
    headers = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
    url = base_url(settings, args.url) + path
    try:
        response = httpx.request(method, url, json=body, headers=headers, timeout=args.timeout)
    except httpx.HTTPError as exc:
        print(f"error: {url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    try:
        payload = response.json()
    except ValueError:
        payload = {"error": {"message": response.text[:500]}}
    if response.status_code != 200:
        message = payload.get("error", {}).get("message", f"HTTP {response.status_code}")
        print(f"error: {message}", file=sys.stderr)
        return 1
    print(_summary(payload))
    return 0


def _summary(payload: dict[str, Any]) -> str:
    if "retired" in payload:
        lines = [f"default: {payload['default']}", f"offered: {', '.join(payload['models'])}"]
        if payload["retired"]:
            lines.append(f"retired (finishing their requests): {', '.join(payload['retired'])}")
        if payload["moved"]:
            lines.append(f"ref moved, new snapshot served: {', '.join(payload['moved'])}")
        return "\n".join(lines)
    return json.dumps(payload, indent=2)
