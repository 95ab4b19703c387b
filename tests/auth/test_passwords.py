"""scrypt password hashes."""

from __future__ import annotations

import time

from qwen_ui.auth.passwords import (
    generate_password,
    hash_password,
    is_password_hash,
    verify_password,
)


def test_hash_and_verify() -> None:
    encoded = hash_password("s3cret pass")
    assert encoded.startswith("scrypt$14$8$1$") and is_password_hash(encoded)
    assert "s3cret" not in encoded
    assert verify_password("s3cret pass", encoded)
    assert not verify_password("s3cret pas", encoded)
    assert hash_password("s3cret pass") != encoded  # salted


def test_unknown_user_costs_the_same() -> None:
    encoded = hash_password("x")
    start = time.perf_counter()
    verify_password("guess", encoded)
    known = time.perf_counter() - start
    start = time.perf_counter()
    assert not verify_password("guess", None)
    unknown = time.perf_counter() - start
    assert unknown > known / 3


def test_malformed_hash_never_verifies() -> None:
    for bad in ("", "plain", "scrypt$x$8$1$a$b", "md5$1$2$3$4$5"):
        assert not verify_password("plain", bad)


def test_generated_passwords() -> None:
    words = {generate_password() for _ in range(20)}
    assert len(words) == 20
    assert all(len(w) == 20 and not set(w) & set("0O1lI") for w in words)
