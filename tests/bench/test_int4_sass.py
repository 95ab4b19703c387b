"""``bench/int4_sass.py`` compiles the engine's int4 kernel for the H200 on this machine
(Triton's own ptxas, no GPU) and counts its instructions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bench.support import load_script


def engine_configs(capsys: pytest.CaptureFixture[str], dequant: str) -> dict[str, Any]:
    argv = ["--block-n", "64", "--top", "80", "--dequant", dequant]
    assert load_script("int4_sass").main(argv) == 0
    configs: dict[str, Any] = json.loads(capsys.readouterr().out)["configs"]
    assert set(configs) == {"n64-s3-whole", "n64-s3-split"}
    return configs


def test_the_kernel_dequantizes_in_bf16_pairs_on_sm90(capsys: pytest.CaptureFixture[str]) -> None:
    for config in engine_configs(capsys, "pairs").values():
        # one subtract and one fused multiply-add per pair, no integer-to-float conversion
        assert config["opcodes"]["HFMA2"] > 0 and config["opcodes"]["HADD2"] > 0
        assert "I2FP" not in config["opcodes"]
        assert config["opcodes"]["HGMMA"] > 0
        assert config["shared_stores"].get("STS.128", 0) > 0


def test_the_kernel_compiles_for_sm90_and_is_counted(capsys: pytest.CaptureFixture[str]) -> None:
    configs = engine_configs(capsys, "float")
    for config in configs.values():
        # Hopper's warpgroup tensor-core product; each weight is dequantized in float32
        assert config["opcodes"]["HGMMA"] > 0 and config["opcodes"]["FFMA"] > 0
        # the dequantized block goes to shared memory 8 weights (16 bytes) a store
        assert config["shared_stores"].get("STS.128", 0) > 0
        assert "STS.U16" not in config["shared_stores"]
        assert config["total"] >= sum(config["opcodes"].values())
        assert 0 < config["registers"] <= 255
    # only the split's partial sums are added atomically
    assert "ATOMG" in configs["n64-s3-split"]["opcodes"]
    assert "ATOMG" not in configs["n64-s3-whole"]["opcodes"]


def test_the_bench_joined_ptx_way_dequantizes_in_bf16_pairs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--block-n", "64", "--top", "80", "--joined", "asm"]
    assert load_script("int4_sass").main(argv) == 0
    for config in json.loads(capsys.readouterr().out)["configs"].values():
        # two weights a pair: one subtract and one fused multiply-add in bf16x2, no
        # integer-to-float conversion
        assert config["opcodes"]["HFMA2"] > 0 and config["opcodes"]["HADD2"] > 0
        assert "I2FP" not in config["opcodes"]
        assert config["opcodes"]["HGMMA"] > 0
