"""The server key: encrypts OSS secrets at rest (MultiFernet) and keys every HMAC.

Source, in order: ``QWEN_UI_SECRET_KEY`` (comma-separated Fernet keys, newest first — old
keys still decrypt, so keys can be rotated), else the key file (``HOME/keys/server.key``),
created with mode 0600 on first run. Replicas behind one load balancer must share the key.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from qwen_ui.auth.errors import ServerKeyError
from qwen_ui.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerKeys:
    fernet: MultiFernet = field(repr=False)
    hmac_key: bytes = field(repr=False)

    def encrypt(self, plain: str) -> str:
        return self.fernet.encrypt(plain.encode()).decode()

    def decrypt(self, token: str) -> str | None:
        """The plain text, or None for a token no current key can open."""
        try:
            return self.fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            return None

    def mac(self, purpose: str, *parts: str) -> str:
        """HMAC-SHA256 (hex) of ``parts`` for one ``purpose``; parts are length-prefixed."""
        message = purpose.encode() + b"".join(
            len(p.encode()).to_bytes(4, "big") + p.encode() for p in parts
        )
        return hmac.new(self.hmac_key, message, hashlib.sha256).hexdigest()


def keys_from_text(text: str) -> ServerKeys:
    raw = [item.strip() for item in text.split(",") if item.strip()]
    if not raw:
        raise ServerKeyError(problem="no key given")
    try:
        fernets = [Fernet(item.encode()) for item in raw]
    except ValueError as exc:
        raise ServerKeyError(
            problem="each key must be 32 url-safe base64-encoded bytes (Fernet)"
        ) from exc
    first = base64.urlsafe_b64decode(raw[0].encode())
    hmac_key = hashlib.sha256(b"qwen-ui hmac v1\0" + first).digest()
    return ServerKeys(fernet=MultiFernet(fernets), hmac_key=hmac_key)


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(Fernet.generate_key() + b"\n")
    log.info("created server key file %s", path)


def load_key_file(path: Path) -> ServerKeys:
    with contextlib.suppress(FileExistsError):
        _create_key_file(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ServerKeyError(problem=f"{path} is readable by others; run: chmod 600 {path}")
    return keys_from_text(path.read_text(encoding="ascii"))


def load_server_keys(settings: Settings) -> ServerKeys:
    if settings.secret_key is not None:
        return keys_from_text(settings.secret_key.get_secret_value())
    return load_key_file(settings.key_path)
