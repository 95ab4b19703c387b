"""``bench/bench_decode.py`` runs end to end on the CPU with the tiny architecture: engine,
web path (uvicorn, API token, streaming client) and stock ``generate`` in one process."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

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


@pytest.mark.slow
def test_qwen3_beside_qwen25_in_one_run(tmp_path: Path) -> None:
    """The Qwen3-VL architecture (DeepStack, 16-px patches) runs through the same phases as
    Qwen2.5-VL's in one invocation, and the comparison sets them side by side."""
    bench = load_bench()
    args = bench.parse(
        [
            "--arch", "tiny,qwen3-tiny", "--device", "cpu", "--reps", "1", "--warmup", "0",
            "--new-tokens", "8", "--workdir", str(tmp_path),
        ]
    )  # fmt: skip
    result = bench.run_all(args)
    runs = {run["arch"]: run for run in result["runs"]}
    assert sorted(runs) == ["qwen3-tiny-l2-d3", "tiny-l2-d2"]
    config = json.loads((tmp_path / "qwen3-tiny-l2-d3" / "config.json").read_text())
    assert config["model_type"] == "qwen3_vl"
    assert config["vision_config"]["patch_size"] == 16
    assert config["quantization_config"]["version"] == "gemm"
    for run in runs.values():
        engine, stock = run["engine"], run["stock_generate_bf16"]
        assert engine["ttft_ms_1_image"] > 0 and engine["ttft_ms_3_images"] > 0
        assert engine["cached_hits"] == [1]
        assert stock["decode"]["tokens"] == 8
    for arch, row in result["comparison"].items():
        assert row["engine_tok_s"] is None or row["engine_tok_s"] > 0, arch
        assert row["stock_tok_s"] > 0
    assert result["comparison"]["tiny-l2-d2"]["gb_read_per_s_vs_first"] in (1.0, None)


def test_an_unknown_architecture_is_refused() -> None:
    bench = load_bench()
    with pytest.raises(SystemExit):
        bench.parse(["--arch", "tiny,qwen9"])
    assert bench.parse(["--arch", "qwen3-8b"]).arch == ["qwen3-8b"]


def test_decode_bytes_leave_out_what_one_row_does_not_read() -> None:
    bench = load_bench()

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("packed", torch.zeros(100, dtype=torch.uint8))
            self.register_buffer("awq_qweight", torch.zeros(10, dtype=torch.uint8))
            self.register_buffer("rows_words", torch.zeros(20, dtype=torch.uint8))
            self.register_buffer("dense", torch.zeros(40, dtype=torch.uint8))

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(8, 4)  # float32: 16 bytes a row
            self.layer = Layer()
            self.head = torch.nn.Linear(4, 8, bias=False)  # 128 bytes

        def get_input_embeddings(self) -> torch.nn.Embedding:
            return self.embed

        def get_output_embeddings(self) -> torch.nn.Linear:
            return self.head

    # the packed weight, one embedding row and the head; not the copies
    assert bench.decode_bytes(Model()) == 100 + 16 + 128
