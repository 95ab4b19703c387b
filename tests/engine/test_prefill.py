"""The compiled pieces of a long prefill (``qwen_ui.engine.prefill``), run here through
Inductor's CPU code: the same weights and norms as the eager functions, installed on the
language model only, and the same prefill logits and greedy tokens."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from qwen_ui.engine import prefill
from qwen_ui.engine.awq import Int4Linear, dequantize_for_kernel
from qwen_ui.engine.generate import Generation, SamplingOptions, run
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn
from qwen_ui.engine.prefill import compile_prefill, rms_norm
from qwen_ui.engine.status import EngineStatus
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID
from tests.engine.support import build_family_model, prefill_logits, write_awq_checkpoint

ROWS = 16
SCENES = [Image.new("RGB", (100, 80), (255, 0, 0)), Image.new("RGB", (60, 120), (0, 0, 255))]


def load(store: ModelStore) -> Loaded:
    spec = ModelSpec(TINY_ID, "awq", "cpu", 3136, 112 * 112, ROWS, "batched", True)
    return Pipelines(store, spec, EngineStatus()).load()


@pytest.fixture(scope="module")
def loaded(tiny_store: ModelStore) -> Loaded:
    return load(tiny_store)


@pytest.fixture(scope="module")
def compiled(tiny_store: ModelStore) -> Loaded:
    """The same model, loaded again (the fused forwards hold their own modules, so a deep
    copy would still call the original's), with the compiled pieces."""
    fast = load(tiny_store)
    compile_prefill(fast.language.model)
    return fast


def norms(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("RMSNorm")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_the_stock_modules(loaded: Loaded, dtype: torch.dtype) -> None:
    _, module = norms(loaded.language.model.model.language_model)[0]
    x = torch.randn(1, 7, module.weight.shape[0], dtype=dtype)
    stock = copy.deepcopy(module).to(dtype)
    assert torch.equal(rms_norm(x, stock.weight, stock.variance_epsilon), stock(x))


def test_installed_on_the_language_model_only(loaded: Loaded, compiled: Loaded) -> None:
    model = compiled.language.model
    text = {n for n, m in norms(model) if "forward" in vars(m)}
    assert text and text == {n for n, _ in norms(model) if ".language_model." in n}
    mlps = [m for m in model.modules() if hasattr(m, "gate_up_proj")]
    attentions = [m for m in model.modules() if hasattr(m, "qkv_proj")]
    assert mlps and attentions
    assert all("gated" in vars(m) for m in mlps) and all("rotary" in vars(m) for m in attentions)
    assert not any("forward" in vars(m) for _, m in norms(loaded.language.model))


def test_dequantize_is_exact_and_shared(compiled: Loaded) -> None:
    """The compiled dequantize gives the eager function's weights bit for bit, and every
    prefill layer shares the one function."""
    layers = [m for m in compiled.language.model.modules() if isinstance(m, Int4Linear)]
    assert len({id(m.dequantize) for m in layers}) == 1
    assert layers[0].dequantize is not dequantize_for_kernel
    for layer in layers[:2]:  # two shapes: qkv_proj and o_proj
        eager = dequantize_for_kernel(
            layer.awq_qweight, layer.scales_and_zeros, layer.group_size, torch.float32
        )
        assert torch.equal(layer.dequantized_weight(torch.float32), eager)


@pytest.mark.parametrize("count", [1, 2])
def test_prefill_logits_and_tokens_match_the_eager_pieces(
    loaded: Loaded, compiled: Loaded, count: int
) -> None:
    reference = prefill_logits(loaded, SCENES[:count])
    torch._dynamo.reset()
    fast = prefill_logits(compiled, SCENES[:count])
    # dequantize (two layer shapes at least), norm, rotary, gated activation
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 5
    torch.testing.assert_close(fast, reference, rtol=1e-4, atol=1e-4)
    assert greedy(compiled, count) == greedy(loaded, count)


def greedy(loaded: Loaded, count: int) -> list[int]:
    embeddings = [loaded.vision.encode(i) for i in SCENES[:count]]
    prompt = loaded.language.build_prompt([Turn("How many squares?", count)], embeddings)
    tokens: list[int] = []
    generation = Generation(loaded.language.model, prompt, SamplingOptions(12))
    run(generation, [], tokens.append, bool)
    return tokens


def test_qwen3_head_norms_compile_for_prompts_only(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Qwen3-VL: its per-head q/k norms (inputs ``[batch, rows, heads, head_dim]``) take the
    compiled norm for a prompt and the eager one for a decode step's single row; the
    compiled prefill gives the eager one's logits and tokens."""
    root = tmp_path_factory.mktemp("qwen3")
    store = ModelStore(root / "store")
    plain = build_family_model("qwen3_vl", root / "plain")
    store.install(write_awq_checkpoint(plain, root / "awq"), "test/qwen3_vl", "awq")
    spec = ModelSpec("test/qwen3_vl", "awq", "cpu", 3136, 128 * 128, ROWS, "batched", True)
    eager, fast = (Pipelines(store, spec, EngineStatus()).load() for _ in range(2))
    q_norm = fast.language.model.model.language_model.layers[0].self_attn.q_norm
    calls: list[int] = []

    def spy(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        calls.append(int(hidden.shape[1]))
        return rms_norm(hidden, weight, eps)

    forward = prefill._norm_forward(q_norm, spy)
    heads, dim = 2, q_norm.weight.shape[0]
    forward(torch.randn(1, 1, heads, dim))  # a decode step: eager
    forward(torch.randn(1, 9, heads, dim))
    forward(torch.randn(1, 1, dim))  # the [batch, rows, hidden] form alike
    forward(torch.randn(1, 9, dim))
    assert calls == [9, 9]
    compile_prefill(fast.language.model)
    torch._dynamo.reset()
    reference, compiled = (prefill_logits(m, SCENES) for m in (eager, fast))
    torch.testing.assert_close(compiled, reference, rtol=1e-4, atol=1e-4)
    assert greedy(fast, 2) == greedy(eager, 2)
