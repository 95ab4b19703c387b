"""Password hashes (scrypt) and generated passwords.

Format: ``scrypt$<log2 n>$<r>$<p>$<salt b64>$<hash b64>``; parameters travel with the hash
so they can be raised later without invalidating stored ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

LOG2_N, R, P = 14, 8, 1
DKLEN = 32
_ALPHABET = "abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=1 << log2_n, r=r, p=p, dklen=DKLEN, maxmem=64 * 1024**2
    )


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, LOG2_N, R, P)
    return f"scrypt${LOG2_N}${R}${P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, encoded: str | None) -> bool:
    """Constant work whether or not a hash exists (unknown users cost the same)."""
    parsed = _parse(encoded) if encoded else None
    if parsed is None:
        _scrypt(password, b"\0" * 16, LOG2_N, R, P)
        return False
    log2_n, r, p, salt, expected = parsed
    return hmac.compare_digest(_scrypt(password, salt, log2_n, r, p), expected)


def _parse(encoded: str) -> tuple[int, int, int, bytes, bytes] | None:
    parts = encoded.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        return None
    try:
        log2_n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        return log2_n, r, p, _unb64(parts[4]), _unb64(parts[5])
    except ValueError:
        return None


def is_password_hash(encoded: str) -> bool:
    return _parse(encoded) is not None


def generate_password(length: int = 20) -> str:
    """A password for a person to type: no look-alike characters."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))
