"""CSRF tokens and the Origin check."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from qwen_ui.auth import csrf
from qwen_ui.auth.errors import CsrfFailed
from qwen_ui.auth.keys import keys_from_text


def test_token_bound_to_its_nonce() -> None:
    keys = keys_from_text(Fernet.generate_key().decode())
    nonce = csrf.new_nonce()
    csrf.check(keys, nonce, csrf.token_for(keys, nonce))
    for binding, submitted in [
        (nonce, "x"),
        (csrf.new_nonce(), csrf.token_for(keys, nonce)),
        (None, "x"),
        (nonce, None),
    ]:
        with pytest.raises(CsrfFailed):
            csrf.check(keys, binding, submitted)
