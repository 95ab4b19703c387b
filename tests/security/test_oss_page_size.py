"""Point 10 of issue 57: the page size of ``GET /api/v1/oss/objects`` is 1 to 100; any
other ``size`` is a typed 400 ``bad_option`` naming it, never silently another size."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.auth.conftest import ACME
from tests.support.auth_site import AuthSite, log_in, oss_form

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthSite]:
    """A server with OSS tenants of its own (overrides the suite's shared ``site``)."""
    site = AuthSite.start(tmp_path_factory.mktemp("home"))
    yield site
    site.stop()


@pytest.mark.parametrize("size", ["0", "-1", "101", "1e3", "ten", str(2**70)])
async def test_a_page_size_out_of_range_is_bad_option(site: AuthSite, size: str) -> None:
    async with site.client() as browser:
        assert (await log_in(browser, "acme", oss_form(ACME))).is_success
        response = await browser.get("/api/v1/oss/objects", params={"size": size})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "bad_option" and "size" in error["message"]


@pytest.mark.parametrize(("size", "shown"), [("1", 1), ("100", 2), (None, 2)])
async def test_a_page_size_in_range_lists(site: AuthSite, size: str | None, shown: int) -> None:
    """The control: acme's prefix holds one object and one folder."""
    params = {"size": size} if size is not None else {}
    async with site.client() as browser:
        assert (await log_in(browser, "acme", oss_form(ACME))).is_success
        response = await browser.get("/api/v1/oss/objects", params=params)
    assert response.status_code == 200, response.text
    page = response.json()
    assert len(page["objects"]) + len(page["folders"]) == shown
