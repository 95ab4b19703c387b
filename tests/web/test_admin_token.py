"""The admin token check: only ``Bearer <token>`` with the exact token, never when unset."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from starlette.datastructures import Headers

from qwen_ui.models.errors import AdminUnauthorized
from qwen_ui.web.admin_token import admin_token_matches, check_admin_token

TOKEN = SecretStr("admin-token-unit-9c2e")


@pytest.mark.parametrize(
    "header",
    [
        "",
        "Bearer",
        "Bearer ",
        "Bearer admin-token-unit-9c2",
        "Bearer admin-token-unit-9c2ex",
        "Basic admin-token-unit-9c2e",
        "admin-token-unit-9c2e",
        "Bearer admin-tokén-unit-9c2e",
    ],
)
def test_anything_but_the_exact_bearer_token_is_refused(header: str) -> None:
    assert not admin_token_matches(header, TOKEN)
    with pytest.raises(AdminUnauthorized):
        check_admin_token(Headers({"authorization": header}), TOKEN)


def test_the_token_is_accepted_in_any_scheme_case() -> None:
    for header in ("Bearer admin-token-unit-9c2e", "bearer admin-token-unit-9c2e"):
        assert admin_token_matches(header, TOKEN)
        check_admin_token(Headers({"authorization": header}), TOKEN)


def test_an_unset_token_refuses_everything() -> None:
    assert not admin_token_matches("Bearer ", None)
    assert not admin_token_matches("Bearer None", None)
    with pytest.raises(AdminUnauthorized):
        check_admin_token(Headers({}), None)
