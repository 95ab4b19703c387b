"""``qwen-ui``: serve, and manage models, tenants and the demo model.

Each sub-command group lives in its own module exposing ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from qwen_ui.errors import QwenUIError

GROUPS = ("serve", "models", "tenants", "demo", "batch", "settings_doc")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qwen-ui", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in GROUPS:
        try:
            module = importlib.import_module(f"qwen_ui.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"qwen_ui.cli.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except QwenUIError as exc:
        print(f"error: {exc.message('en')}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
