"""``qwen-ui batch``: one question per row of a CSV or JSONL file, answers as JSON lines.

Rows run through the local engine (this process, the configured model: the ``QWEN_UI_*``
settings) or against a running server (``--server URL --token T``). Rows already in the
output are skipped, so an interrupted run is resumed by running it again. ``oss://KEY``
images are read here with the RAM keys of OSS_ACCESS_KEY_ID, OSS_ACCESS_KEY_SECRET (and
OSS_SESSION_TOKEN), from the bucket of the server's tenant or of ``--tenant``. See the
README's "Batch questions" section for the formats.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen_ui.batch.output import Output, done_keys, drop_failed
from qwen_ui.batch.rows import read_rows
from qwen_ui.errors import BadRequest

if TYPE_CHECKING:  # the engine (torch) is imported when a batch runs, not for `--help`
    from qwen_ui.auth.tenants import OSSConfig
    from qwen_ui.batch.askers import Asker, ServerOptions
    from qwen_ui.batch.oss import OssImages
    from qwen_ui.batch.rows import Row
    from qwen_ui.batch.runner import Progress, Summary
    from qwen_ui.settings import Settings

LOCAL_TENANT = "batch"  # the local engine's tenant id (its embedding cache namespace)


class BatchUsage(BadRequest):
    code = "batch_usage"
    en = "qwen-ui batch: {problem}"
    zh = "qwen-ui batch：{problem}"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "batch",
        help="answer one question per row of a CSV or JSONL file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", type=Path, help="rows: .csv, or JSON lines (.jsonl)")
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="JSON lines out (appended; resumable)"
    )
    parser.add_argument("--server", metavar="URL", help="ask a running server instead")
    parser.add_argument("--token", help="the server's API token (qwen-ui tenants token)")
    parser.add_argument(
        "--token-file", type=Path, help="read the token from this file (keeps it out of ps)"
    )
    parser.add_argument(
        "--tenant",
        help="local runs: the OSS tenant (tenants file) whose bucket oss:// rows are in",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="rows in flight (default 4)")
    parser.add_argument("--limit", type=int, help="run at most this many rows now")
    parser.add_argument("--lang", choices=("en", "zh"), default="en", help="error language")
    parser.add_argument("--max-new-tokens", type=int, help="answer length cap per row")
    parser.add_argument("--retries", type=int, default=2, help="retries of a busy server")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="drop the failed rows from the output first, so they run again",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.concurrency < 1 or (args.limit is not None and args.limit < 0):
        raise BatchUsage(problem="--concurrency must be at least 1 and --limit at least 0")
    if args.server and args.tenant:
        raise BatchUsage(problem="--tenant is for local runs; a server's rows use the token's")
    from qwen_ui.batch.runner import Progress

    rows = read_rows(args.input)
    if args.retry_failed:  # the summary counts them with this run's rows
        drop_failed(args.output)
    done = done_keys(args.output)
    todo = sum(1 for row in rows if row.key not in done)
    if args.limit is not None:
        todo = min(todo, args.limit)
    progress = Progress(todo, enabled=not args.no_progress)
    summary = asyncio.run(_run(args, rows, done, progress))
    print(summary.line(), flush=True)
    return 0 if summary.failed == 0 else 1


async def _run(
    args: argparse.Namespace, rows: list[Row], done: set[str], progress: Progress
) -> Summary:
    from qwen_ui.batch.askers import ServerAsker
    from qwen_ui.settings import Settings

    with Output(args.output) as output:
        if args.server:
            options = _server_options(args)
            async with ServerAsker.client_for(options) as client:
                asker = ServerAsker(options, client)
                me = await asker.check_token()
                oss = await _oss(args, rows, done, me)
                return await _batch(args, rows, asker, output, done, progress, oss)
        settings = Settings()
        oss = await _oss(args, rows, done, None, settings)
        return await _local(args, rows, output, done, progress, settings, oss)


async def _oss(
    args: argparse.Namespace,
    rows: list[Row],
    done: set[str],
    me: dict[str, Any] | None,
    settings: Settings | None = None,
) -> OssImages | None:
    """The reader of the rows' ``oss://`` images, its keys checked (None: no row needs
    one), in the bucket ``me`` (the server's ``/api/v1/me``) names, or else ``--tenant``'s;
    raises before any row runs when the keys or the bucket are missing or refused."""
    from qwen_ui.batch.errors import OssCredentialsMissing
    from qwen_ui.batch.oss import OssImages, credentials_from_env, location_from_me, needs_oss
    from qwen_ui.settings import Settings

    if not needs_oss(rows, done):
        return None
    credentials = credentials_from_env(os.environ)
    if credentials is None:
        raise OssCredentialsMissing()
    settings = settings or Settings()
    allow_insecure = settings.allow_insecure_oss_endpoints
    config = location_from_me(me, allow_insecure) if me is not None else _tenant_oss(args, settings)
    oss = OssImages.open(config, credentials, settings.oss_timeout_s, settings.max_image_bytes)
    await oss.check()
    return oss


def _tenant_oss(args: argparse.Namespace, settings: Settings) -> OSSConfig:
    """The OSS location of ``--tenant`` in the tenants file (local runs)."""
    from qwen_ui.auth import tenants as tenants_file
    from qwen_ui.batch.errors import OssTenantMissing

    if not args.tenant:
        raise OssTenantMissing(problem="no --tenant says whose bucket they are in")
    try:  # a malformed file, or an http:// endpoint, raises its own error
        tenants = tenants_file.load(settings.tenants_path, settings.allow_insecure_oss_endpoints)
    except OSError as exc:
        problem = f"the tenants file {settings.tenants_path} cannot be read"
        raise OssTenantMissing(problem=problem) from exc
    tenant = tenants.tenants.get(args.tenant)
    if tenant is None or tenant.oss is None:
        raise OssTenantMissing(problem=f"the tenants file has no OSS tenant {args.tenant!r}")
    return tenant.oss


async def _local(
    args: argparse.Namespace,
    rows: list[Row],
    output: Output,
    done: set[str],
    progress: Progress,
    settings: Settings,
    oss: OssImages | None,
) -> Summary:
    from qwen_ui.batch.askers import LocalAsker
    from qwen_ui.demo.install import DemoInstallingStore
    from qwen_ui.engine.engine import AskOptions, Engine
    from qwen_ui.state import MemoryState

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("qwen_ui").setLevel(logging.WARNING)  # per-row news is in the output
    store = DemoInstallingStore(settings.model_path)
    engine = Engine(settings, store, MemoryState())
    engine.start()
    try:
        # the model must be there before the rows start (the demo installs itself here)
        await asyncio.to_thread(engine.pipelines.snapshot)
        options = AskOptions(max_new_tokens=args.max_new_tokens)
        asker = LocalAsker(engine, options, args.lang, LOCAL_TENANT)
        return await _batch(args, rows, asker, output, done, progress, oss)
    finally:
        await engine.close()


async def _batch(
    args: argparse.Namespace,
    rows: list[Row],
    asker: Asker,
    output: Output,
    done: set[str],
    progress: Progress,
    oss: OssImages | None,
) -> Summary:
    from qwen_ui.batch.runner import run_batch

    return await run_batch(
        rows, asker, output, done, args.concurrency, args.limit, progress, args.lang, oss
    )


def _server_options(args: argparse.Namespace) -> ServerOptions:
    from qwen_ui.batch.askers import ServerOptions

    token = args.token
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise BatchUsage(problem=f"cannot read --token-file {args.token_file}") from exc
    if not token:
        raise BatchUsage(problem="--server needs --token or --token-file")
    return ServerOptions(
        args.server, token, args.lang, args.max_new_tokens, args.retries, args.timeout
    )
