"""``bench/bench_decode.py`` runs end to end on the CPU with the tiny architecture: engine,
web path (uvicorn, API token, streaming client) and stock ``generate`` in one process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_decode.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_decode", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_decode"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_tiny_cpu_dry_run(tmp_path: Path) -> None:
    bench = load_bench()
    args = bench.parse(
        [
            "--arch", "tiny", "--device", "cpu", "--web", "--reps", "1", "--warmup", "0",
            "--new-tokens", "12", "--workdir", str(tmp_path),
        ]
    )  # fmt: skip
    result = bench.run_all(args)
    engine, stock, web = result["engine"], result["stock_generate_bf16"], result["web"]
    assert result["copy_bandwidth_gb_s"] > 0
    for figures in (engine, stock):
        assert figures["ttft_ms_1_image"] > 0 and figures["ttft_ms_3_images"] > 0
        assert figures["decode"]["tokens"] >= 1 and figures["bound_tok_s"] > 0
        assert figures["weights_gib"] > 0 and figures["peak_gib"] > 0
    assert stock["decode"]["tokens"] == 12  # min_new_tokens: no early stop
    assert engine["cached_hits"] == [1]  # the cached-image TTFT really hit the cache
    assert web["client_tok_s"] is None or web["client_tok_s"] > 0
    assert web["runs"][0]["tokens"] >= 1
