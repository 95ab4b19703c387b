"""Qwen3-VL (DeepStack, interleaved mrope, per-head q/k norms, 16-px patches) through every
decode path the engine has on the CPU gives transformers' ``generate`` tokens: the float
checkpoint against itself, the AutoAWQ GEMM checkpoint (int4 kernels, fused projections)
against a float model holding the weights the checkpoint's int4 values stand for. One and
three images and a follow-up with history; the eager decode, the static cache, and the
static cache after the padded, staged prefill of ``prefill_graphs`` (its DeepStack features
added densely, :mod:`qwen_ui.engine.qwen3`; the graph capture itself is CUDA's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from safetensors import safe_open
from transformers import AutoModelForImageTextToText

from qwen_ui.engine import awq_format
from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.batching import Batch, Sequence
from qwen_ui.engine.generate import CachePool, Generation, Prompt, SamplingOptions, run
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn, messages
from qwen_ui.engine.prefill_graphs import PrefillGraphs
from qwen_ui.engine.status import EngineStatus
from qwen_ui.store import ModelStore
from tests.engine.support import GROUP, build_family_model, write_awq_checkpoint

MODEL = "test/qwen3_vl"
NEW_TOKENS = 24
CASES = [
    ([Turn("What shape is in the picture?", 1)], 1),
    ([Turn("What shapes are in the pictures?", 3)], 3),
    ([Turn("How many squares are there?", 2, "three"), Turn("Which picture?", 1)], 3),
]
CASE_IDS = ["1-image", "3-images", "history"]
PATHS = ["eager", "static", "prefill-graphs"]


def images(count: int) -> list[Image.Image]:
    """Fixed images (no random noise: both sides must see the same pixels)."""
    noise = Image.linear_gradient("L").resize((90, 90)).convert("RGB")
    return [
        Image.new("RGB", (100, 80), (255, 0, 0)),
        Image.new("RGB", (60, 120), (0, 0, 255)),
        noise,
    ][:count]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qwen3")
    plain = build_family_model("qwen3_vl", root / "plain")
    return {"plain": plain, "awq": write_awq_checkpoint(plain, root / "awq")}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, checkpoints: dict[str, Path]) -> ModelStore:
    store = ModelStore(tmp_path_factory.mktemp("store"))
    for revision, path in checkpoints.items():
        store.install(path, MODEL, revision)
    return store


@pytest.fixture(scope="module", params=["plain", "plain-bf16", "awq", "awq-dequantized-prefill"])
def pair(
    request: pytest.FixtureRequest, store: ModelStore, checkpoints: dict[str, Path]
) -> tuple[Loaded, Any]:
    """The engine's pipelines on one revision, and transformers' model to compare with.
    ``plain-bf16``: the float checkpoint computed in bf16 (as on CUDA; the engine's CPU
    default is float32). ``awq-dequantized-prefill``: prompts of more than 16 tokens (all of
    them here) run each int4 layer on a weight dequantized for the call
    (``prefill_dequant_rows``)."""
    revision, _, variant = str(request.param).partition("-")
    rows = 16 if variant == "dequantized-prefill" else 0
    spec = ModelSpec(MODEL, revision, "cpu", 3136, 128 * 128, prefill_dequant_rows=rows)
    loaded = Pipelines(store, spec, EngineStatus()).load()
    if rows:
        model = loaded.language.model
        assert all(m.prefill_rows == rows for m in model.modules() if isinstance(m, Int4Linear))
    if variant == "bf16":
        loaded.language.model.to(torch.bfloat16)
    if revision == "plain":
        return loaded, loaded.language.model
    return loaded, dequantized_reference(checkpoints["plain"], checkpoints["awq"])


def dequantized_reference(plain: Path, awq: Path) -> Any:
    """A stock float32 Qwen3-VL model holding the AWQ checkpoint's tensors: each int4
    linear dequantized with AutoAWQ's own formula, everything else as stored (fp16)."""
    model = AutoModelForImageTextToText.from_pretrained(plain, dtype=torch.float32)
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(awq / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
        for key in keys:
            prefix, _, leaf = key.rpartition(".")
            if leaf == "qweight":
                triple = (handle.get_tensor(f"{prefix}.{s}") for s in awq_format.QUANT_SUFFIXES)
                weight = awq_format.dequantize(*triple, GROUP)
                state[awq_format.to_module_key(f"{prefix}.weight")] = weight
            elif leaf not in ("qzeros", "scales"):
                state[awq_format.to_module_key(key)] = handle.get_tensor(key).float()
    model.load_state_dict(state, strict=True)
    return model.eval()


def engine_tokens(loaded: Loaded, prompt: Prompt, path: str) -> tuple[list[int], Generation]:
    model = loaded.language.model
    options = SamplingOptions(NEW_TOKENS)
    if path == "eager":
        generation = Generation(model, prompt, options)
    else:
        graphs = PrefillGraphs(model, 1024, record=False) if path == "prefill-graphs" else None
        generation = Generation(model, prompt, options, "static", CachePool(model), None, graphs)
    tokens: list[int] = []
    run(generation, loaded.language.stop_ids, tokens.append, lambda: False)
    return tokens, generation


def generate_tokens(
    loaded: Loaded, reference: Any, turns: list[Turn], count: int
) -> tuple[list[int], list[float]]:
    """transformers' own processor and ``generate``, greedy, cut at the first stop token;
    and at each step the margin of its top logit over the next one."""
    processor = loaded.language.processor
    text = processor.apply_chat_template(
        messages(turns), tokenize=False, add_generation_prompt=True
    )
    inputs = processor(
        text=[text],
        images=images(count),
        return_tensors="pt",
        images_kwargs={"size": loaded.vision.size},
    )
    with torch.inference_mode():
        out = reference.generate(
            **inputs,
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    tokens = [int(t) for t in out.sequences[0, inputs["input_ids"].shape[1] :]]
    margins = [float(d[0] - d[1]) for d in (torch.topk(s.float()[0], 2).values for s in out.logits)]
    stops = set(loaded.language.stop_ids)
    first_stop = next((i for i, t in enumerate(tokens) if t in stops), len(tokens))
    return tokens[:first_stop], margins


def near_tie(model: Any) -> float:
    """How far apart two logits may be and still go either way between two of the
    engine's paths: nothing in float32 (the paths agree exactly); in bf16 a few rounding
    steps of these logits (magnitudes under 8: steps of 1/32), as a padded prefill or a
    static cache's masked attention sum in another order."""
    return 0.0 if next(model.parameters()).dtype == torch.float32 else 0.1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("turns", "count"), CASES, ids=CASE_IDS)
def test_tokens_match_generate(
    pair: tuple[Loaded, Any], turns: list[Turn], count: int, path: str
) -> None:
    loaded, reference = pair
    embeddings = [loaded.vision.encode(i) for i in images(count)]
    assert all(e.deepstack is not None for e in embeddings)
    prompt = loaded.language.build_prompt(turns, embeddings)
    ours, generation = engine_tokens(loaded, prompt, path)
    theirs, margins = generate_tokens(loaded, reference, turns, count)
    assert len(theirs) >= 8  # long enough to mean something
    parted = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    if parted is None:
        assert ours == theirs
    else:  # only at a step where generate itself was all but undecided (bf16)
        assert margins[parted] < near_tie(reference), (parted, margins[parted], ours, theirs)
    if path == "prefill-graphs":  # the prompt took the staged prefill, DeepStack and all
        assert generation.graphs is not None and generation.graphs.buckets


def test_images_encoded_together_are_encoded_as_alone(pair: tuple[Loaded, Any]) -> None:
    """One pass of the tower over three images (of different sizes) gives each image the
    features and deepstack features it gets alone."""
    vision = pair[0].vision
    together = vision.encode_many(images(3))
    for image, joint in zip(images(3), together, strict=True):
        alone = vision.encode(image)
        assert joint.grid_thw == alone.grid_thw
        assert joint.deepstack is not None and alone.deepstack is not None
        assert joint.deepstack.shape == alone.deepstack.shape
        torch.testing.assert_close(joint.features, alone.features, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(joint.deepstack, alone.deepstack, rtol=1e-5, atol=1e-5)
    assert len({e.grid_thw for e in together}) > 1


def test_the_awq_revision_runs_on_fused_int4_layers(store: ModelStore) -> None:
    spec = ModelSpec(MODEL, "awq", "cpu", 3136, 128 * 128)
    model = Pipelines(store, spec, EngineStatus()).load().language.model
    int4 = [n for n, m in model.named_modules() if isinstance(m, Int4Linear)]
    layers = model.config.get_text_config().num_hidden_layers
    assert len(int4) == 4 * layers
    assert {n.rsplit(".", 1)[-1] for n in int4} == {
        "qkv_proj",
        "o_proj",
        "gate_up_proj",
        "down_proj",
    }
    assert not any(isinstance(m, Int4Linear) for m in model.model.visual.modules())


def test_the_staged_prefill_adds_the_deepstack_features(pair: tuple[Loaded, Any]) -> None:
    """The staged prefill's logits are the eager prefill's, and they depend on the DeepStack
    features (without them the logits change: the dense addition is not a no-op)."""
    loaded, _ = pair
    model = loaded.language.model
    prompt = loaded.language.build_prompt(
        [Turn("What shape is it?", 1)], [loaded.vision.encode(images(1)[0])]
    )
    graphs = PrefillGraphs(model, 1024, record=False)
    assert graphs.fits(prompt) and graphs.deepstack == len(prompt.deepstack[0]) > 0
    stripped = Prompt(
        prompt.input_ids,
        prompt.mm_token_type_ids,
        prompt.image_grid_thw,
        prompt.image_features,
        [torch.zeros_like(d) for d in prompt.deepstack],
    )
    logits = {}
    for name, p, g in (
        ("eager", prompt, None),
        ("staged", prompt, graphs),
        ("zero", stripped, graphs),
    ):
        generation = Generation(model, p, SamplingOptions(1), "static", CachePool(model), None, g)
        with torch.inference_mode():
            logits[name] = generation._prefill()
    exact = near_tie(model) == 0
    tolerance = 1e-4 if exact else 0.05  # bf16: a few rounding steps of these logits
    torch.testing.assert_close(logits["staged"], logits["eager"], atol=tolerance, rtol=0)
    if exact:  # (in bf16 the tiny model's DeepStack effect is within a few rounding steps)
        assert (logits["zero"] - logits["eager"]).abs().max() > 10 * tolerance


@pytest.mark.parametrize(("revision", "chunk"), [("plain", 0), ("awq", 0), ("plain", 16)])
def test_a_batch_gives_each_prompt_the_tokens_it_gets_alone(
    store: ModelStore, revision: str, chunk: int
) -> None:
    """Continuous batching (the engine's default path) on Qwen3-VL: prompts with and
    without images, prefilled together with their DeepStack features (in chunks of
    ``chunk`` columns too), entering together and one after another, each get the greedy
    tokens of the single-request loop (itself pinned to ``generate`` above)."""
    loaded = Pipelines(
        store, ModelSpec(MODEL, revision, "cpu", 3136, 128 * 128), EngineStatus()
    ).load()
    model, stops = loaded.language.model, frozenset(loaded.language.stop_ids)
    prompts = [
        loaded.language.build_prompt(turns, [loaded.vision.encode(i) for i in images(count)])
        for turns, count in [*CASES, ([Turn("Describe a square.", 0)], 0)]
    ]
    got: dict[int, list[int]] = {i: [] for i in range(len(prompts))}

    def make(entrants: list[int]) -> list[Sequence]:
        return [
            Sequence(
                prompts[i],
                SamplingOptions(NEW_TOKENS),
                stops,
                got[i].append,
                lambda _outcome: None,
                reraise,
                lambda: False,
            )
            for i in entrants
        ]

    batch: Batch[int] = Batch(8, make, lambda: model, prefill_tokens=chunk)
    for i in (0, 3, 1):
        batch.enter(i)
    batch.step()
    batch.step()
    batch.enter(2)  # joins a running batch
    steps = 0
    while batch.busy and steps < 1000:
        batch.step()
        steps += 1
    for i, prompt in enumerate(prompts):
        alone, _ = engine_tokens(loaded, prompt, "eager")
        assert got[i] == alone and len(alone) > 0, i


def reraise(error: BaseException) -> None:
    raise error
