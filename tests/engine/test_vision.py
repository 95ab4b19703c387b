"""The batched vision attention gives the stock towers' outputs (Qwen2-VL, 2.5-VL, 3-VL)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from qwen_ui.demo import modelcfg
from qwen_ui.engine import vision
from tests.engine.support import QWEN2_VL_VISION, QWEN3_VL_VISION

# two images of different sizes: unequal windows and images, so the padded path is used
GRIDS = [(1, 16, 20), (1, 10, 6)]


def qwen2_5_vl() -> Any:
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    config = Qwen2_5_VLConfig(**modelcfg.config_dict()).vision_config  # window + full blocks
    return Qwen2_5_VisionTransformerPretrainedModel._from_config(config)


def qwen2_vl() -> Any:
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )

    config = Qwen2VLConfig(vision_config=dict(QWEN2_VL_VISION)).vision_config
    return Qwen2VisionTransformerPretrainedModel._from_config(config)


def qwen3_vl() -> Any:
    from transformers import Qwen3VLConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    config = Qwen3VLConfig(vision_config=dict(QWEN3_VL_VISION)).vision_config
    return Qwen3VLVisionModel._from_config(config)


def run(tower: Any) -> list[torch.Tensor]:
    config = tower.config
    width = config.in_channels * config.temporal_patch_size * config.patch_size**2
    grid = torch.tensor(GRIDS)
    torch.manual_seed(1)
    pixels = torch.randn(int(grid.prod(-1).sum()), width)
    with torch.no_grad():
        return tensors(tower(pixels, grid_thw=grid))


def tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    items = out.values() if hasattr(out, "values") else out
    return [t for item in items if item is not None for t in tensors(item)]


@pytest.mark.parametrize("build", [qwen2_5_vl, qwen2_vl, qwen3_vl])
def test_batched_attention_matches_the_stock_loop(build: Any) -> None:
    torch.manual_seed(0)
    tower = build().float().eval()
    model = SimpleNamespace(model=SimpleNamespace(visual=tower), config=tower.config)
    stock = run(tower)
    assert vision.install(model) == len(tower.blocks)
    batched = run(tower)
    assert len(batched) == len(stock) >= 2
    for a, b in zip(stock, batched, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (a - b).abs().max()
    vision.uninstall(model)
    assert all("forward" not in block.attn.__dict__ for block in tower.blocks)


def test_flash_attention_is_left_alone() -> None:
    tower = qwen2_vl()
    tower.config._attn_implementation = "flash_attention_2"
    model = SimpleNamespace(model=SimpleNamespace(visual=tower), config=tower.config)
    assert vision.install(model) == 0


def test_layout_groups_chunks_by_length() -> None:
    layout = vision.Layout.of(torch.tensor([0, 4, 6, 10, 10, 12]))
    assert [g.tolist() for g in layout.groups] == [[[4, 5], [10, 11]], [[0, 1, 2, 3], [6, 7, 8, 9]]]
    one = vision.Layout.of(torch.tensor([0, 5]))
    assert [g.tolist() for g in one.groups] == [[[0, 1, 2, 3, 4]]]


def test_layouts_are_reused_per_tensor() -> None:
    layouts = vision.Layouts(size=2)
    a, b = torch.tensor([0, 4]), torch.tensor([0, 4])
    assert layouts.get(a) is layouts.get(a)
    assert layouts.get(b) is not layouts.get(a)


def test_a_layout_built_ahead_is_used_for_its_tensor() -> None:
    """A caller that builds a layout on the host (the training data workers) puts it for
    the tensor it moved; the blocks then find it instead of building one (no host sync)."""
    layouts = vision.Layouts()
    host = torch.tensor([0, 4, 6])
    ahead = vision.Layout.of(host).to(torch.device("cpu"))
    moved = host.clone()
    layouts.put(moved, ahead)
    assert layouts.get(moved) is ahead
    assert [g.tolist() for g in ahead.groups] == [[[4, 5]], [[0, 1, 2, 3]]]


def unaligned_qwen2_5_vl() -> Any:
    """A Qwen2.5-VL tower whose MLPs are 100 wide (as the real ones' 3,420, not a multiple
    of 8)."""
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    config = Qwen2_5_VLConfig(**modelcfg.config_dict()).vision_config
    config.intermediate_size = 100
    return Qwen2_5_VisionTransformerPretrainedModel._from_config(config)


def test_padded_mlps_give_the_stock_output() -> None:
    torch.manual_seed(0)
    tower = unaligned_qwen2_5_vl().float().eval()
    model = SimpleNamespace(model=SimpleNamespace(visual=tower), config=tower.config)
    stock = run(tower)
    assert vision.pad_mlps(model) == len(tower.blocks)
    mlp = tower.blocks[0].mlp
    assert (mlp.gate_proj.out_features, mlp.up_proj.out_features) == (104, 104)
    assert mlp.down_proj.in_features == 104
    assert not mlp.gate_proj.weight[100:].any() and not mlp.down_proj.weight[:, 100:].any()
    assert not mlp.up_proj.bias[100:].any()
    padded = run(tower)
    for a, b in zip(stock, padded, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (a - b).abs().max()
    assert vision.pad_mlps(model) == 0  # already aligned


@pytest.mark.parametrize("build", [qwen2_5_vl, qwen2_vl, qwen3_vl])
def test_aligned_mlps_are_left_alone(build: Any) -> None:
    tower = build()
    model = SimpleNamespace(model=SimpleNamespace(visual=tower), config=tower.config)
    before = [dict(block.mlp.named_parameters()) for block in tower.blocks]
    assert vision.pad_mlps(model) == 0
    after = [dict(block.mlp.named_parameters()) for block in tower.blocks]
    for a, b in zip(before, after, strict=True):
        assert a.keys() == b.keys() and all(a[k] is b[k] for k in a)


def test_the_rotary_kernel_serves_cuda_inference_only() -> None:
    """The kernel has no backward: with autograd on (training) the stock rotary runs."""
    on_cuda = SimpleNamespace(is_cuda=True)
    with torch.no_grad():
        assert vision.kernel_rotary_applies(on_cuda)  # type: ignore[arg-type]
        assert not vision.kernel_rotary_applies(torch.zeros(1))
    with torch.inference_mode():
        assert vision.kernel_rotary_applies(on_cuda)  # type: ignore[arg-type]
    with torch.enable_grad():
        assert not vision.kernel_rotary_applies(on_cuda)  # type: ignore[arg-type]
