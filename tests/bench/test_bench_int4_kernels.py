"""``bench/bench_int4_kernels.py`` times the engine's int4 kernels on CUDA; here, what it
builds and how it reads the engine's choice."""

from __future__ import annotations

import torch

from qwen_ui.engine import triton_int4
from tests.bench.support import load_script


def test_the_engine_choice_takes_torch_below_the_crossover() -> None:
    bench = load_script("bench_int4_kernels")
    timed = triton_int4.Timed(
        torch_ms=(2.0, 2.1, 3.0, 4.9, 8.2),
        tiled_ms=(2.7, 2.7, 2.7, 2.8, 2.9),
        vec_ms=(2.5, 2.9),
    )
    assert bench._chosen(timed) == [2.0, 2.1, 2.7, 2.8, 2.9]
    never = triton_int4.Timed(timed.torch_ms, (9.0,) * 5, ())
    assert bench._chosen(never) == list(timed.torch_ms)


def test_random_layers_have_the_shape_asked_for() -> None:
    bench = load_script("bench_int4_kernels")
    layer = bench.random_layer(256, 128, torch.device("cpu"))
    assert (layer.in_features, layer.out_features) == (256, 128)
    out = layer(torch.randn(2, 256))
    assert out.shape == (2, 128) and bool(torch.isfinite(out).all())
