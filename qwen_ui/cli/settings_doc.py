"""``qwen-ui settings-doc``: print the README configuration table."""

from __future__ import annotations

import argparse
from typing import Any

from qwen_ui.settings import markdown_table


def register(sub: Any) -> None:
    parser = sub.add_parser("settings-doc", help="print the configuration table (Markdown)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(markdown_table())
    return 0
