"""Per-tenant limits: questions per day (state store, both backends) and concurrency."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import QuotaExceeded, TenantBusy
from qwen_ui.auth.principal import Principal
from qwen_ui.auth.quotas import TenantQuotas
from qwen_ui.auth.tenants import Limits, TenantRegistry, TenantsFile
from qwen_ui.errors import Unauthorized
from qwen_ui.state import State
from tests.support.auth import local_tenant

ALICE = Principal("school", "alice")
OTHER = Principal("other", "bob")


def quotas(state: State, tmp_path: Path, per_day: int = 2, concurrent: int = 1) -> TenantQuotas:
    limits = Limits(concurrent_requests=concurrent, questions_per_day=per_day)
    tenants = {
        "school": local_tenant("school", ("alice",)).model_copy(update={"limits": limits}),
        "other": local_tenant("other", ("bob",)).model_copy(update={"limits": limits}),
    }
    path = tmp_path / "tenants.toml"
    tenants_file.save(path, TenantsFile(tenants=tenants))
    clock = Clock(offset=-(Clock()() % 86400) + 3600)  # 01:00 UTC today
    return TenantQuotas(state.namespace("quota"), TenantRegistry(path), clock)


async def test_questions_per_day(state: State, tmp_path: Path) -> None:
    q = quotas(state, tmp_path)
    assert [await q.count_question(ALICE) for _ in range(2)] == [1, 2]
    with pytest.raises(QuotaExceeded) as caught:
        await q.count_question(ALICE)
    assert caught.value.retry_after == pytest.approx(23 * 3600, abs=5)
    assert await q.count_question(OTHER) == 1  # another tenant's count is its own
    q.clock.advance(86400)
    assert await q.count_question(ALICE) == 1


async def test_concurrent_requests(state: State, tmp_path: Path) -> None:
    q = quotas(state, tmp_path, per_day=0)
    async with q.question(ALICE):
        with pytest.raises(TenantBusy):
            async with q.question(ALICE):
                pass
        async with q.question(OTHER):
            pass
    async with q.question(ALICE):  # the slot came back
        pass
    assert q._running == {}


async def test_slot_released_when_over_quota(state: State, tmp_path: Path) -> None:
    q = quotas(state, tmp_path, per_day=1)
    async with q.question(ALICE):
        pass
    with pytest.raises(QuotaExceeded):
        async with q.question(ALICE):
            pass
    assert q._running == {}


async def test_unknown_tenant(state: State, tmp_path: Path) -> None:
    with pytest.raises(Unauthorized):
        await quotas(state, tmp_path).count_question(Principal("gone", "x"))
