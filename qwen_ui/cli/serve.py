"""``qwen-ui serve``: one flag per setting, derived from the declarations."""

from __future__ import annotations

import argparse
from typing import Any

from qwen_ui import logs
from qwen_ui.settings import Settings, field_rows


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "serve",
        help="serve the web app",
        description="Serve qwen-ui. Every flag also reads from its QWEN_UI_* environment "
        "variable; a flag wins over the environment.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for row in field_rows():
        _add_flag(parser, row)
    parser.set_defaults(func=run)


def _add_flag(parser: argparse.ArgumentParser, row: dict[str, Any]) -> None:
    text = row["description"]
    extra = [f"env {row['env']}", f"type {row['type']}"]
    if row["default"]:
        extra.append(f"default {row['default']}")
    if row["bounds"]:
        extra.append(row["bounds"])
    help_text = f"{text} [{'; '.join(extra)}]".replace("%", "%%")
    dest = row["name"]
    if row["type"] in ("bool", "bool | auto"):  # 'auto' is the default, or the env's
        parser.add_argument(
            row["flag"],
            dest=dest,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=help_text,
        )
    else:
        parser.add_argument(
            row["flag"], dest=dest, default=None, metavar=row["name"].upper(), help=help_text
        )


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {
        row["name"]: getattr(args, row["name"])
        for row in field_rows()
        if getattr(args, row["name"], None) is not None
    }
    return Settings(**overrides)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from qwen_ui.boot import DeferredApp
    from qwen_ui.cli.tenants import first_run_demo_tenant

    settings = settings_from_args(args)
    logs.configure(settings.log_level)
    first_run_demo_tenant(settings)
    uvicorn.run(
        DeferredApp(settings, lambda: _build_app(settings)),
        host=settings.host,
        port=settings.port,
        proxy_headers=False,
        log_level=settings.log_level,
        timeout_graceful_shutdown=10,
    )
    return 0


def _build_app(settings: Settings) -> Any:
    """Runs in a worker thread while /healthz already answers (see qwen_ui.boot). On the
    embedded default model, the app's start-up installs the shipped demo on first run."""
    from qwen_ui.server import create_app

    app = create_app(settings, install_demo=True)
    logs.one_line_each()  # the libraries the app imported are there now
    return app
