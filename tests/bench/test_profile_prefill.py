"""``bench/profile_prefill.py`` runs on the CPU with the tiny architecture: the phases of one
uncached question add up, and the prefill's projections go through the int4 kernel, or
(``--prefill-dequant-rows``) are dequantized and multiplied in floating point."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.support import run_main


@pytest.mark.slow
@pytest.mark.parametrize(("rows", "int4_per_layer"), [(0, 4), (16, 0)])
def test_prefill_phases_and_kernels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: int, int4_per_layer: int
) -> None:
    argv = ["--device", "cpu", "--arch", "tiny", "--reps", "1", "--workdir", str(tmp_path)]
    result = run_main("profile_prefill", [*argv, "--prefill-dequant-rows", str(rows)], capsys)
    phases = result["phases_ms"]
    assert isinstance(phases, dict) and phases["image_tokens"] > 0
    parts = phases["processor_ms"] + phases["vision_ms"] + phases["prompt_ms"]
    assert phases["total_ms"] == pytest.approx(parts + phases["prefill_ms"], abs=0.05)
    layers = int(str(result["arch"]).split("-l")[1].split("-")[0])
    kernels = result["cached_image_prefill"]
    assert isinstance(kernels, dict)
    categories = kernels["by_category"]
    int4 = categories.get("int4 matmul", {"calls_per_step": 0})["calls_per_step"]
    assert int4 == int4_per_layer * layers
    assert (rows > 0) == ("dequantize" in categories)


@pytest.mark.slow
def test_newcomers_phases_and_joint_prefill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--newcomers 1,2``: the phases of that many one-image questions joining together
    add up, and two prompts are prefilled in one pass (as many int4 matmuls as one)."""
    argv = ["--device", "cpu", "--arch", "tiny", "--reps", "1", "--workdir", str(tmp_path)]
    result = run_main("profile_prefill", [*argv, "--newcomers", "1,2"], capsys)
    joined = result["newcomers"]
    assert isinstance(joined, dict) and set(joined) == {"1", "2"}
    for entry in joined.values():
        for phases in (entry["phases_ms"], entry["first_phases_ms"]):  # first join apart
            parts = phases["processor_ms"] + phases["vision_ms"] + phases["prompt_ms"]
            assert phases["total_ms"] == pytest.approx(parts + phases["prefill_ms"], abs=0.05)
        phases = entry["phases_ms"]
        assert phases["prompt_tokens"] > result["phases_ms"]["image_tokens"]
    one, two = (
        joined[k]["prefill_profile"]["by_category"]["int4 matmul"]["calls_per_step"]
        for k in ("1", "2")
    )
    assert one == two > 0
