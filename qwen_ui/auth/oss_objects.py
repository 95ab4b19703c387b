"""Browse a tenant's OSS prefix and fetch objects with the session's own credentials.

RAM enforces the boundary (the keys can read only their prefix); on top of that every key
a user names is checked here first: inside the tenant's prefix, no ``.``/``..`` segments,
no URL-encoded escapes, no backslashes, control characters, absolute paths or URLs. The
bucket and endpoint always come from the tenants file. Objects larger than the upload
limit are refused without reading them whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn

import anyio.to_thread
import oss2
import oss2.exceptions

from qwen_ui.auth.errors import (
    ObjectAccessDenied,
    ObjectKeyRejected,
    ObjectNotFound,
    ObjectTooLarge,
    OSSUnavailable,
    SessionExpired,
)
from qwen_ui.auth.oss_client import OSSConnector, Outcome, classify
from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig

MAX_KEY_BYTES = 1023
MAX_PAGE = 100
CHUNK = 64 * 1024
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_CURSOR = re.compile(r"^[A-Za-z0-9+/=_.%~-]{1,2048}$")


def key_problem(prefix: str, key: str) -> str | None:
    """Why ``key`` may not be used under ``prefix`` (None: it may)."""
    checks = [
        (not key, "empty"),
        (len(key.encode()) > MAX_KEY_BYTES, "too long"),
        (any(ord(c) < 32 or ord(c) == 127 for c in key), "control characters"),
        ("\\" in key, "backslash"),
        (_ESCAPE.search(key) is not None, "URL-encoded characters"),
        (key.startswith("/"), "absolute path"),
        ("://" in key, "a URL"),
        ("//" in key, "empty path segment"),
        (any(part in {".", ".."} for part in key.split("/")), "'.' or '..' segment"),
        (not key.startswith(prefix), "outside your folder"),
    ]
    return next((reason for failed, reason in checks if failed), None)


def validate_key(prefix: str, key: str) -> str:
    reason = key_problem(prefix, key)
    if reason is not None:
        raise ObjectKeyRejected(reason=reason)
    return key


def validate_folder(prefix: str, folder: str) -> str:
    """A folder inside the prefix, given relative to it ('' is the prefix itself)."""
    if not folder:
        return prefix
    full = prefix + (folder if folder.endswith("/") else folder + "/")
    return validate_key(prefix, full)


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    name: str
    size: int
    last_modified: int


@dataclass(frozen=True)
class ObjectPage:
    folder: str
    folders: list[str]
    objects: list[ObjectInfo]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "folders": self.folders,
            "objects": [vars(item) for item in self.objects],
            "next_cursor": self.next_cursor,
        }


def _raise_for(exc: oss2.exceptions.OssError) -> NoReturn:
    outcome = classify(exc, for_object=True)
    if outcome is Outcome.UNAVAILABLE:
        raise OSSUnavailable() from None
    if outcome is Outcome.NOT_FOUND:
        raise ObjectNotFound() from None
    if outcome is Outcome.DENIED:
        raise ObjectAccessDenied() from None
    raise SessionExpired() from None


@dataclass(frozen=True)
class TenantObjects:
    """One tenant's prefix, seen through one session's credentials."""

    connector: OSSConnector
    config: OSSConfig
    credentials: OSSCredentials
    max_bytes: int

    def _bucket(self) -> oss2.Bucket:
        return self.connector.bucket(self.config, self.credentials)

    async def list(self, folder: str = "", cursor: str | None = None, size: int = 50) -> ObjectPage:
        prefix = self.config.prefix
        where = validate_folder(prefix, folder)
        if cursor is not None and not _CURSOR.match(cursor):
            raise ObjectKeyRejected(reason="bad page cursor")
        call = partial(
            self._bucket().list_objects_v2,
            prefix=where,
            delimiter="/",
            continuation_token=cursor or "",
            max_keys=max(1, min(size, MAX_PAGE)),
        )
        try:
            result = await anyio.to_thread.run_sync(call)
        except oss2.exceptions.OssError as exc:
            _raise_for(exc)
        objects = [
            ObjectInfo(o.key, o.key[len(prefix) :], int(o.size), int(o.last_modified))
            for o in result.object_list
            if key_problem(prefix, o.key) is None and o.key != where
        ]
        folders = [p[len(prefix) :] for p in result.prefix_list if key_problem(prefix, p) is None]
        next_cursor = result.next_continuation_token if result.is_truncated else None
        return ObjectPage(where[len(prefix) :], folders, objects, next_cursor or None)

    async def fetch(self, key: str) -> bytes:
        """The object's bytes, at most ``max_bytes`` of them (else ObjectTooLarge)."""
        validate_key(self.config.prefix, key)
        return await anyio.to_thread.run_sync(self._fetch_blocking, key)

    def _fetch_blocking(self, key: str) -> bytes:
        try:
            result = self._bucket().get_object(key)
        except oss2.exceptions.OssError as exc:
            _raise_for(exc)
        try:
            if result.content_length is not None and result.content_length > self.max_bytes:
                raise ObjectTooLarge(limit=self.max_bytes)
            return self._read_capped(result)
        finally:
            result.resp.response.close()

    def _read_capped(self, result: Any) -> bytes:
        chunks, total = [], 0
        while chunk := result.read(CHUNK):
            total += len(chunk)
            if total > self.max_bytes:
                raise ObjectTooLarge(limit=self.max_bytes)
            chunks.append(chunk)
        return b"".join(chunks)
