"""Qwen2-VL and Qwen3-VL (deepstack) load through the same pipelines, and the own decode
loop (with cached embeddings) matches transformers' ``generate`` token for token."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from qwen_ui.engine.cache import Embedding
from qwen_ui.engine.generate import Generation, SamplingOptions, run
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn, messages
from qwen_ui.engine.status import EngineStatus
from qwen_ui.store import ModelStore
from tests.engine.support import build_family_model

SIZE = {"shortest_edge": 3136, "longest_edge": 128 * 128}


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen3_vl"])
def loaded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    family = str(request.param)
    path = build_family_model(family, tmp_path_factory.mktemp(family) / "model")
    store = ModelStore(tmp_path_factory.mktemp("store"))
    store.install(path, f"test/{family}", "main")
    spec = ModelSpec(f"test/{family}", "main", "cpu", 3136, 128 * 128)
    return Pipelines(store, spec, EngineStatus()).load()


def test_decode_loop_matches_generate(loaded: Loaded, tmp_path: Path) -> None:
    images = [
        Image.new("RGB", (100, 70), (250, 0, 0)),
        Image.effect_noise((64, 96), 40).convert("RGB"),
    ]
    turns = [Turn("What shape is in the picture?", 2)]
    embeddings = [loaded.vision.encode(img) for img in images]
    if loaded.language.model.config.model_type == "qwen3_vl":
        assert all(e.deepstack is not None for e in embeddings)
    # through the cache's byte form, as a Redis hit would
    embeddings = [Embedding.from_bytes(e.to_bytes()) for e in embeddings]
    prompt = loaded.language.build_prompt(turns, embeddings)
    ours: list[int] = []
    run(
        Generation(loaded.language.model, prompt, SamplingOptions(16)),
        loaded.language.stop_ids,
        ours.append,
        lambda: False,
    )
    processor = loaded.language.processor
    text = processor.apply_chat_template(
        messages(turns), tokenize=False, add_generation_prompt=True
    )
    inputs = processor(
        text=[text], images=images, return_tensors="pt", images_kwargs={"size": SIZE}
    )
    assert inputs["input_ids"].tolist() == prompt.input_ids.tolist()
    out = loaded.language.model.generate(**inputs, max_new_tokens=16, do_sample=False)
    theirs = [int(t) for t in out[0, prompt.length :] if int(t) not in loaded.language.stop_ids]
    assert ours == theirs and len(ours) > 0


def test_a_batch_decodes_each_prompt_as_it_is_decoded_alone(loaded: Loaded) -> None:
    """Continuous batching with the other families: the prompts (with and without
    images, Qwen3-VL's with their DeepStack features) prefilled together, after the
    images are encoded in one call."""
    from qwen_ui.engine.batching import Batch, Sequence
    from qwen_ui.engine.generate import Outcome

    images = [Image.new("RGB", (100, 70), (250, 0, 0)), Image.effect_noise((64, 96), 40)]
    embeddings = loaded.vision.encode_many([i.convert("RGB") for i in images])
    asks = [
        ([Turn("What shape is in the picture?", 2)], embeddings),
        ([Turn("Describe the image.", 1)], embeddings[1:]),
        ([Turn("How many squares are there?", 0)], []),
    ]
    prompts = [loaded.language.build_prompt(t, e) for t, e in asks]
    stops = frozenset(loaded.language.stop_ids)
    ends: dict[int, Outcome] = {}

    def sequence(i: int) -> Sequence:
        return Sequence(
            prompts[i],
            SamplingOptions(12),
            stops,
            lambda _t: None,
            lambda outcome: ends.__setitem__(i, outcome),
            lambda error: pytest.fail(repr(error)),
            lambda: False,
        )

    model = loaded.language.model
    batch: Batch[int] = Batch(4, lambda ids: [sequence(i) for i in ids], lambda: model)  # type: ignore[type-var]
    for i in range(len(prompts)):
        batch.enter(i)
    while batch.busy:
        batch.step()
    for i, prompt in enumerate(prompts):
        tokens: list[int] = []
        generation = Generation(model, prompt, SamplingOptions(12))
        run(generation, loaded.language.stop_ids, tokens.append, lambda: False)
        assert ends[i].tokens == tokens, i
