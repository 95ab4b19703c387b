"""``qwen-ui tenants …``: manage the tenants file (TOML under QWEN_UI_HOME).

Passwords and API tokens are generated, printed once, and stored only as hashes.
A running server picks the changes up without a restart: a new password, a removed user
or a removed tenant ends the old credential's sessions (and a removed tenant's API
tokens) at its next request. ``check`` tests an OSS tenant's endpoint, region, bucket and
prefix with a key whose secret is read from a prompt, stdin or an environment variable,
never from the command line.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.bootstrap import DEMO_TENANT, DEMO_USER, ensure_demo_tenant
from qwen_ui.auth.errors import TenantsFileError
from qwen_ui.auth.oss_check import check_tenant
from qwen_ui.auth.oss_client import OSSConnector
from qwen_ui.auth.passwords import generate_password, hash_password
from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import Limits, OSSConfig, Tenant, TenantsFile
from qwen_ui.auth.tokens import add_token, new_token, revoke_token
from qwen_ui.settings import Settings


def register(sub: Any) -> None:
    parser = sub.add_parser("tenants", help="manage tenants, users and API tokens")
    parser.add_argument("--home", type=Path, default=None, help="instance home (QWEN_UI_HOME)")
    parser.add_argument("--tenants-file", type=Path, default=None, help="tenants file path")
    commands = parser.add_subparsers(dest="tenants_command", required=True)
    _add_oss_parser(commands)
    _add_check_parser(commands)
    add_local = commands.add_parser("add-local", help="add a user (and its local tenant)")
    add_local.add_argument("tenant")
    add_local.add_argument("user")
    add_local.add_argument("--name", default="", help="tenant display name")
    add_local.set_defaults(func=_wrap(add_local_user))
    passwd = commands.add_parser("passwd", help="give a local user a new generated password")
    passwd.add_argument("tenant")
    passwd.add_argument("user")
    passwd.set_defaults(func=_wrap(change_password))
    remove_user = commands.add_parser("remove-user", help="remove a local user")
    remove_user.add_argument("tenant")
    remove_user.add_argument("user")
    remove_user.set_defaults(func=_wrap(remove_local_user))
    remove = commands.add_parser("remove-tenant", help="remove a tenant, its users and tokens")
    remove.add_argument("tenant")
    remove.set_defaults(func=_wrap(remove_tenant))
    listing = commands.add_parser("list", help="list tenants, users and token ids")
    listing.set_defaults(func=_wrap(list_tenants))
    token = commands.add_parser("token", help="create an API token (printed once)")
    token.add_argument("tenant")
    token.add_argument("--label", default="", help="what the token is for")
    token.set_defaults(func=_wrap(create_token))
    revoke = commands.add_parser("revoke-token", help="revoke an API token by its id")
    revoke.add_argument("tenant")
    revoke.add_argument("token_id")
    revoke.set_defaults(func=_wrap(remove_token))


def _add_oss_parser(commands: Any) -> None:
    add_oss = commands.add_parser(
        "add-oss", help="add or update a tenant that logs in with OSS keys"
    )
    add_oss.add_argument("tenant")
    add_oss.add_argument("--name", default="")
    add_oss.add_argument("--region", required=True, help="e.g. cn-hangzhou")
    add_oss.add_argument("--endpoint", required=True, help="https://oss-<region>.aliyuncs.com")
    add_oss.add_argument("--bucket", required=True)
    add_oss.add_argument("--prefix", required=True, help="the tenant's folder, ending in /")
    add_oss.add_argument(
        "--allow-key-id",
        action="append",
        default=[],
        help="allowed AccessKey id (repeatable; "
        "'STS.*' allows temporary keys); none given: any key that can list the prefix",
    )
    add_oss.add_argument("--concurrent-requests", type=int, default=2)
    add_oss.add_argument("--questions-per-day", type=int, default=1000)
    add_oss.set_defaults(func=_wrap(add_oss_tenant))


def _add_check_parser(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="test an OSS tenant's endpoint and region with a key",
        description="List one object under the tenant's prefix with the given key and name "
        "OSS's error code on failure (exit status 1). The key id comes from --key-id or a "
        "prompt; the secret (and with --sts the STS token) from --secret-env, a prompt, or, "
        "when stdin is not a terminal, stdin: key id (unless --key-id), secret, STS token, "
        "one per line.",
    )
    check.add_argument("tenant")
    check.add_argument("--key-id", default=None, help="AccessKey id (LTAI... or STS....)")
    check.add_argument("--sts", action="store_true", help="temporary key: read an STS token")
    check.add_argument(
        "--secret-env", default=None, metavar="NAME", help="read the secret from env var NAME"
    )
    check.set_defaults(func=_wrap(check_oss_tenant))


Command = Callable[[argparse.Namespace, Settings], int]


def _wrap(command: Command) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        overrides: dict[str, Any] = {}
        if args.home is not None:
            overrides["home"] = args.home
        if args.tenants_file is not None:
            overrides["tenants_file"] = args.tenants_file
        return command(args, Settings(**overrides))

    return run


def _load(settings: Settings) -> TenantsFile:
    return tenants_file.load(settings.tenants_path, settings.allow_insecure_oss_endpoints)


def _save(settings: Settings, tenants: TenantsFile) -> None:
    try:
        tenants_file.check_endpoints(tenants, settings.allow_insecure_oss_endpoints)
    except ValueError as exc:
        raise TenantsFileError(path=str(settings.tenants_path), problem=str(exc)) from exc
    tenants_file.save(settings.tenants_path, tenants)


def _tenant(tenants: TenantsFile, settings: Settings, tenant_id: str) -> Tenant:
    tenant = tenants.tenants.get(tenant_id)
    if tenant is None:
        raise TenantsFileError(path=str(settings.tenants_path), problem=f"no tenant {tenant_id!r}")
    return tenant


def _validated(settings: Settings, **fields: Any) -> Tenant:
    try:
        return Tenant.model_validate(fields)
    except ValueError as exc:
        raise TenantsFileError(path=str(settings.tenants_path), problem=_first_error(exc)) from exc


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return str(exc)


def add_oss_tenant(args: argparse.Namespace, settings: Settings) -> int:
    tenants = _load(settings)
    old = tenants.tenants.get(args.tenant)
    try:
        oss = OSSConfig(
            region=args.region,
            endpoint=args.endpoint,
            bucket=args.bucket,
            prefix=args.prefix,
            allowed_key_ids=args.allow_key_id,
        )
        limits = Limits(
            concurrent_requests=args.concurrent_requests, questions_per_day=args.questions_per_day
        )
    except ValueError as exc:
        raise TenantsFileError(path=str(settings.tenants_path), problem=_first_error(exc)) from exc
    tenant = _validated(
        settings,
        id=args.tenant,
        name=args.name,
        kind="oss",
        oss=oss,
        limits=limits,
        tokens=old.tokens if old else [],
    )
    _save(settings, tenants_file.with_tenant(tenants, tenant))
    print(f"tenant {tenant.id}: OSS {oss.endpoint} bucket {oss.bucket} prefix {oss.prefix!r}")
    return 0


def add_local_user(args: argparse.Namespace, settings: Settings) -> int:
    tenants = _load(settings)
    old = tenants.tenants.get(args.tenant)
    if old is not None and old.kind != "local":
        raise TenantsFileError(
            path=str(settings.tenants_path), problem=f"{old.id} is an OSS tenant"
        )
    if old is not None and args.user in old.users:
        raise TenantsFileError(
            path=str(settings.tenants_path),
            problem=f"{args.user} exists; use: qwen-ui tenants passwd {old.id} {args.user}",
        )
    password = generate_password()
    users = {**(old.users if old else {}), args.user: hash_password(password)}
    base = old.model_dump() if old else {"id": args.tenant, "name": args.name, "kind": "local"}
    tenant = _validated(settings, **{**base, "users": users})
    _save(settings, tenants_file.with_tenant(tenants, tenant))
    print(f"tenant {tenant.id}, user {args.user}, password (shown once): {password}")
    return 0


def change_password(args: argparse.Namespace, settings: Settings) -> int:
    tenants, tenant = _with_user(args, settings)
    password = generate_password()
    _save_users(settings, tenants, tenant, {**tenant.users, args.user: hash_password(password)})
    print(f"tenant {tenant.id}, user {args.user}, new password (shown once): {password}")
    return 0


def remove_local_user(args: argparse.Namespace, settings: Settings) -> int:
    tenants, tenant = _with_user(args, settings)
    users = {name: hashed for name, hashed in tenant.users.items() if name != args.user}
    _save_users(settings, tenants, tenant, users)
    print(f"tenant {tenant.id}: user {args.user} removed")
    return 0


def _with_user(args: argparse.Namespace, settings: Settings) -> tuple[TenantsFile, Tenant]:
    """The tenants file and ``args.tenant``, which must have the local user ``args.user``."""
    tenants = _load(settings)
    tenant = _tenant(tenants, settings, args.tenant)
    if args.user not in tenant.users:
        raise TenantsFileError(path=str(settings.tenants_path), problem=f"no user {args.user!r}")
    return tenants, tenant


def _save_users(
    settings: Settings, tenants: TenantsFile, tenant: Tenant, users: dict[str, str]
) -> None:
    _save(settings, tenants_file.with_tenant(tenants, tenant.model_copy(update={"users": users})))


def remove_tenant(args: argparse.Namespace, settings: Settings) -> int:
    tenants = _load(settings)
    tenant = _tenant(tenants, settings, args.tenant)
    kept = {tid: found for tid, found in tenants.tenants.items() if tid != tenant.id}
    _save(settings, TenantsFile(tenants=kept))
    print(f"tenant {tenant.id} removed, with its users and API tokens")
    return 0


def list_tenants(args: argparse.Namespace, settings: Settings) -> int:
    tenants = _load(settings)
    if not tenants.tenants:
        print(f"no tenants in {settings.tenants_path}")
    for tenant in tenants.tenants.values():
        if tenant.oss is not None:
            where = f"oss {tenant.oss.bucket}/{tenant.oss.prefix} ({tenant.oss.region})"
        else:
            where = "local users: " + (", ".join(sorted(tenant.users)) or "none")
        tokens = ", ".join(record.id for record in tenant.tokens) or "none"
        print(f"{tenant.id}\t{tenant.display_name}\t{where}\ttokens: {tokens}")
    return 0


def create_token(args: argparse.Namespace, settings: Settings) -> int:
    tenants = _load(settings)
    tenant = _tenant(tenants, settings, args.tenant)
    token, record = new_token(args.label)
    _save(settings, tenants_file.with_tenant(tenants, add_token(tenant, record)))
    print(f"tenant {tenant.id}, token id {record.id} (shown once):\n{token}")
    return 0


def remove_token(args: argparse.Namespace, settings: Settings) -> int:
    tenants = _load(settings)
    tenant = _tenant(tenants, settings, args.tenant)
    updated = revoke_token(tenant, args.token_id)
    if updated is None:
        raise TenantsFileError(
            path=str(settings.tenants_path), problem=f"no token {args.token_id!r}"
        )
    _save(settings, tenants_file.with_tenant(tenants, updated))
    print(f"tenant {tenant.id}: token {args.token_id} revoked")
    return 0


def _ask(prompt: str, hidden: bool) -> str:
    """One line from the terminal (hidden for secrets) or from piped stdin."""
    if sys.stdin.isatty():
        return (getpass.getpass(prompt) if hidden else input(prompt)).strip()
    return sys.stdin.readline().strip()


def _check_credentials(args: argparse.Namespace) -> OSSCredentials:
    key_id = args.key_id or _ask("AccessKey id: ", hidden=False)
    if args.secret_env:
        secret = os.environ.get(args.secret_env, "").strip()
    else:
        secret = _ask("AccessKey secret: ", hidden=True)
    token = _ask("STS token: ", hidden=True) if args.sts else None
    return OSSCredentials(key_id=key_id, secret=secret, sts_token=token or None)


def check_oss_tenant(args: argparse.Namespace, settings: Settings) -> int:
    tenant = _tenant(_load(settings), settings, args.tenant)
    if tenant.oss is None:
        raise TenantsFileError(
            path=str(settings.tenants_path), problem=f"{tenant.id} is not an OSS tenant"
        )
    credentials = _check_credentials(args)
    if not credentials.key_id or not credentials.secret:
        print("error: an AccessKey id and secret are needed", file=sys.stderr)
        return 2
    oss = tenant.oss
    result = check_tenant(OSSConnector(timeout_s=settings.oss_timeout_s), oss, credentials)
    where = f"bucket {oss.bucket}, prefix {oss.prefix!r}, region {oss.region}, {oss.endpoint}"
    if result.ok:
        print(f"tenant {tenant.id}: OK, key {credentials.key_id} can list {where}")
        return 0
    seen = f"HTTP {result.status}" + (
        f", request id {result.request_id}" if result.request_id else ""
    )
    print(f"tenant {tenant.id}: FAILED {result.code} ({seen}): {result.advice}")
    print(f"  checked {where}")
    return 1


def first_run_demo_tenant(settings: Settings) -> None:
    """Called by ``qwen-ui serve``: with no tenants file, create the demo tenant and print
    its password once."""
    password = ensure_demo_tenant(settings)
    if password is not None:
        print(
            f"First run: created tenant {DEMO_TENANT!r} in {settings.tenants_path}.\n"
            f"Log in with tenant {DEMO_TENANT}, user {DEMO_USER}, password (shown once): "
            f"{password}",
            flush=True,
        )
