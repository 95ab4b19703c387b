"""The decode budget: counted before decoding, waits in order, refuses what never fits."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from qwen_ui.engine import images
from qwen_ui.engine.decoding import DecodeBudget
from qwen_ui.engine.errors import DecodeBusy, ImageDecodeBudget
from qwen_ui.engine.shapes import Geometry

LIMITS = images.ImageLimits(max_bytes=20_000_000, max_images=2, max_pixels=50_000_000)
GEOMETRY = Geometry(14, 2, 2, 3136, 1_003_520)
MiB = 1024 * 1024


def big_png(width: int = 2400, height: int = 1800) -> images.CheckedImage:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (30, 90, 200)).save(buffer, "PNG")
    return images.check(buffer.getvalue(), 2, LIMITS, GEOMETRY)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_pixels_are_decoded_while_their_cost_is_held() -> None:
    checked = big_png()
    cost = checked.decode_cost()
    budget = DecodeBudget(cost, timeout_s=5)
    image = await budget.pixels(checked)
    assert image.size == checked.target and checked.decoded
    assert budget.max_in_use == cost and budget.in_use == 0
    assert await budget.pixels(checked) is image  # not decoded again, nothing held


async def test_an_image_that_could_never_fit_is_refused_before_decoding() -> None:
    checked = big_png()
    budget = DecodeBudget(checked.decode_cost() - 1, timeout_s=5)
    with pytest.raises(ImageDecodeBudget) as err:
        await budget.check(checked)
    with pytest.raises(ImageDecodeBudget):
        await budget.pixels(checked)
    assert not checked.decoded and budget.in_use == 0
    assert err.value.status == 413 and err.value.code == "image_decode_budget"
    assert "Image 2 needs about" in err.value.message("en")
    assert "第 2 张图片解码约需" in err.value.message("zh")


async def test_a_decode_that_does_not_fit_beside_others_waits_its_turn() -> None:
    budget = DecodeBudget(100 * MiB, timeout_s=5)
    order: list[str] = []
    release_first = asyncio.Event()

    async def first() -> None:
        async with budget.hold(60 * MiB, 1):
            order.append("first in")
            await release_first.wait()
        order.append("first out")

    async def second() -> None:
        async with budget.hold(60 * MiB, 1):
            order.append("second in")

    tasks = [asyncio.create_task(first())]
    await settle()
    tasks.append(asyncio.create_task(second()))
    await settle()
    assert order == ["first in"] and budget.waiting == 1 and budget.in_use == 60 * MiB
    release_first.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "first out", "second in"]
    assert budget.max_in_use == 60 * MiB and budget.in_use == 0


async def test_a_small_decode_does_not_overtake_a_waiting_big_one() -> None:
    budget = DecodeBudget(100 * MiB, timeout_s=5)
    granted: list[str] = []
    held = asyncio.Event()

    async def hold(name: str, nbytes: int) -> None:
        async with budget.hold(nbytes, 1):
            granted.append(name)
            await held.wait()

    tasks = [asyncio.create_task(hold("running", 50 * MiB))]
    await settle()
    tasks.append(asyncio.create_task(hold("big", 80 * MiB)))
    await settle()
    tasks.append(asyncio.create_task(hold("small", 10 * MiB)))  # would fit now
    await settle()
    assert granted == ["running"] and budget.waiting == 2
    held.set()
    await asyncio.gather(*tasks)
    assert granted == ["running", "big", "small"]


async def test_a_wait_is_bounded_by_a_busy_error() -> None:
    budget = DecodeBudget(100 * MiB, timeout_s=0.05)
    async with budget.hold(90 * MiB, 1):
        with pytest.raises(DecodeBusy) as err:
            async with budget.hold(20 * MiB, 1):
                pass
        assert budget.waiting == 0 and budget.in_use == 90 * MiB
    assert err.value.status == 503 and err.value.retry_after is not None
    assert budget.in_use == 0


async def test_a_waiter_that_goes_away_leaves_the_line() -> None:
    budget = DecodeBudget(100 * MiB, timeout_s=5)
    async with budget.hold(90 * MiB, 1):
        gone = asyncio.create_task(budget.hold(50 * MiB, 1).__aenter__())
        await settle()
        assert budget.waiting == 1
        gone.cancel()
        await settle()
        assert budget.waiting == 0
    async with budget.hold(100 * MiB, 1):
        assert budget.in_use == 100 * MiB
    assert budget.in_use == 0
