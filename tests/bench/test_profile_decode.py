"""``bench/profile_decode.py`` runs on the CPU with the tiny architecture and attributes a
decode step's int4 matmuls: four per decoder layer with fused projections, seven without."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.support import run_main


@pytest.mark.slow
@pytest.mark.parametrize(("fuse", "per_layer"), [("--fuse", 4), ("--no-fuse", 7)])
def test_int4_calls_per_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fuse: str, per_layer: int
) -> None:
    argv = ["--device", "cpu", "--arch", "tiny", "--steps", "2", "--warmup", "1", fuse]
    result = run_main("profile_decode", [*argv, "--workdir", str(tmp_path)], capsys)
    layers = int(str(result["arch"]).split("-l")[1].split("-")[0])
    categories = result["by_category"]
    assert isinstance(categories, dict)
    assert categories["int4 matmul"]["calls_per_step"] == per_layer * layers
    assert (
        float(str(result["wall_ms_per_step"])) > 0 and float(str(result["bound_ms_per_step"])) > 0
    )
