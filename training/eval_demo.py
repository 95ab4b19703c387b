"""Several ``qwen-ui demo eval`` runs in one process, each writing its JSON to a file.

The device scores a checkpoint inside the call that trained it
(``training/train_demo_on_device.sh --eval``): one start of torch for every set, and the
product's own evaluation (:mod:`qwen_ui.cli.demo`) without the rest of the command line,
whose other groups import packages the device lacks.

    python3 -m training.eval_demo OUT_DIR FILE=ARGS [FILE=ARGS ...]

``ARGS`` are ``qwen-ui demo eval`` options as one shell word (``--json`` is added), e.g.
``eval-bf16-n2000-seed0.json="--weights W --device cuda --n 2000"``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import sys
import time
from pathlib import Path

from qwen_ui.cli import demo

log = logging.getLogger(__name__)


def demo_parser() -> argparse.ArgumentParser:
    """``qwen-ui`` with only its ``demo`` group."""
    parser = argparse.ArgumentParser(prog="qwen-ui")
    demo.register(parser.add_subparsers(dest="command", required=True))
    return parser


def parse_run(spec: str) -> tuple[str, list[str]]:
    """``FILE=ARGS`` as the file's name and the ``demo eval`` arguments (with ``--json``)."""
    name, sep, args = spec.partition("=")
    if not sep or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected FILE=ARGS, got {spec!r}")
    return name, ["demo", "eval", *shlex.split(args), "--json"]


def run_one(target: Path, args: argparse.Namespace) -> bool:
    """One evaluation, its JSON into ``target``; False (logged) when it fails."""
    start = time.perf_counter()
    try:
        with target.open("w", encoding="utf-8") as out, contextlib.redirect_stdout(out):
            code = int(args.func(args) or 0)
    except Exception:
        log.exception("%s failed", target.name)
        return False
    log.info("%s: exit %s in %.1f s", target.name, code, time.perf_counter() - start)
    return code == 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="folder for the JSON files")
    p.add_argument("runs", nargs="+", type=parse_run, metavar="FILE=ARGS")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    parser = demo_parser()  # every run's arguments checked before the first one runs
    runs = [(args.out / name, parser.parse_args(run_argv)) for name, run_argv in args.runs]
    results = [run_one(target, run_args) for target, run_args in runs]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
