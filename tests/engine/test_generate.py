from __future__ import annotations

from typing import Any

import pytest
import torch
from PIL import Image

from qwen_ui.engine.detokenize import TextStream
from qwen_ui.engine.generate import Generation, Pending, SamplingOptions, run
from qwen_ui.engine.pipelines import Loaded, Turn, messages
from tests.engine.conftest import scene_images

SIZE = {"shortest_edge": 3136, "longest_edge": 112 * 112}


def ours(loaded: Loaded, turns: list[Turn], images: list[Image.Image], **opts: Any) -> list[int]:
    embeddings = [loaded.vision.encode(img) for img in images]
    prompt = loaded.language.build_prompt(turns, embeddings)
    tokens: list[int] = []
    options = SamplingOptions(opts.pop("max_new_tokens", 24), **opts)
    run(
        Generation(loaded.language.model, prompt, options),
        loaded.language.stop_ids,
        tokens.append,
        lambda: False,
    )
    return tokens


def hf_generate(loaded: Loaded, turns: list[Turn], images: list[Image.Image]) -> list[int]:
    processor = loaded.language.processor
    text = processor.apply_chat_template(
        messages(turns), tokenize=False, add_generation_prompt=True
    )
    inputs = processor(
        text=[text], images=images, return_tensors="pt", images_kwargs={"size": SIZE}
    )
    out = loaded.language.model.generate(**inputs, max_new_tokens=24, do_sample=False)
    return [
        int(t)
        for t in out[0, inputs["input_ids"].shape[1] :]
        if int(t) not in loaded.language.stop_ids
    ]


@pytest.mark.parametrize("count", [1, 3])
def test_greedy_tokens_match_hf_generate(loaded: Loaded, count: int) -> None:
    images = scene_images()[:count]
    turns = [Turn("What shape is in the picture?", count)]
    assert ours(loaded, turns, images) == hf_generate(loaded, turns, images)


def test_history_prompt_matches_hf_generate(loaded: Loaded) -> None:
    images = scene_images()
    turns = [Turn("How many squares are there?", 2, "three"), Turn("Which picture?", 1)]
    assert ours(loaded, turns, images) == hf_generate(loaded, turns, images)


def test_shared_rope_deltas_are_neither_read_nor_written(loaded: Loaded) -> None:
    model = loaded.language.model
    turns = [Turn("Describe the image.", 1)]
    expected = ours(loaded, turns, scene_images()[:1])
    sentinel = torch.tensor([[12345]])
    model.model.rope_deltas = sentinel
    assert ours(loaded, turns, scene_images()[:1]) == expected
    assert model.model.rope_deltas is sentinel
    model.model.rope_deltas = None


def test_sampling_is_reproducible_with_a_seed(loaded: Loaded) -> None:
    turns = [Turn("Describe the image.", 1)]
    img = scene_images()[:1]
    a = ours(loaded, turns, img, temperature=1.5, top_p=0.9, seed=7)
    b = ours(loaded, turns, img, temperature=1.5, top_p=0.9, seed=7)
    assert a == b and len(a) > 0


def test_cancellation_stops_within_one_step(loaded: Loaded) -> None:
    embeddings = [loaded.vision.encode(scene_images()[0])]
    prompt = loaded.language.build_prompt([Turn("Describe", 1)], embeddings)
    generation = Generation(loaded.language.model, prompt, SamplingOptions(50))
    tokens: list[int] = []
    outcome = run(generation, [], tokens.append, lambda: len(tokens) >= 3)
    assert outcome.finish_reason == "cancelled"
    assert len(tokens) == 3
    assert generation.cache is None  # the request's KV cache is released


def test_token_cap_ends_with_length(loaded: Loaded) -> None:
    embeddings = [loaded.vision.encode(scene_images()[0])]
    prompt = loaded.language.build_prompt([Turn("Describe", 1)], embeddings)
    tokens: list[int] = []
    outcome = run(
        Generation(loaded.language.model, prompt, SamplingOptions(5)),
        [],
        tokens.append,
        lambda: False,
    )
    assert outcome.finish_reason == "length" and len(tokens) == 5


def test_text_stream_never_splits_characters(loaded: Loaded) -> None:
    tokenizer = loaded.language.tokenizer
    text = "图片里有什么形状？一个红色的圆。 Three blue squares."
    ids = tokenizer(text)["input_ids"]
    stream = TextStream(loaded.language.decode)
    deltas = [stream.push(i) for i in ids]
    assert "".join(deltas) == text == stream.text()
    assert all("\ufffd" not in d for d in deltas)


def test_pixel_bounds_take_the_tighter_of_settings_and_model() -> None:
    from types import SimpleNamespace

    from qwen_ui.engine.pipelines import pixel_bounds

    demo = SimpleNamespace(size={"shortest_edge": 3136, "longest_edge": 112_896})
    assert pixel_bounds(demo, 3136, 1_003_520) == (3136, 112_896)
    official = SimpleNamespace(size={"shortest_edge": 3136, "longest_edge": 12_845_056})
    assert pixel_bounds(official, 6272, 1_003_520) == (6272, 1_003_520)
    assert pixel_bounds(SimpleNamespace(size=None), 100, 200) == (100, 200)


def _traced(generation: Generation, order: list[str]) -> Generation:
    real = generation.advance

    def advance(token: Pending | int) -> Pending:
        order.append("launch")
        return real(token)

    generation.advance = advance  # type: ignore[method-assign]
    return generation


def _reference(loaded: Loaded, prompt: Any, n: int) -> list[int]:
    reference = Generation(loaded.language.model, prompt, SamplingOptions(n))
    expected = [reference.prefill()]
    for _ in range(n - 1):
        expected.append(reference.step(expected[-1]))
    return expected


def test_next_step_launches_before_a_token_is_reported(loaded: Loaded) -> None:
    """Ahead (an asynchronous device), the step after the one the host waits for is already
    queued, fed its token on the device (from the second token on; the first is reported
    at once), and no step is launched past the cap; the tokens are those of the
    one-step-at-a-time path."""
    embeddings = [loaded.vision.encode(scene_images()[0])]
    prompt = loaded.language.build_prompt([Turn("Describe", 1)], embeddings)
    generation = Generation(loaded.language.model, prompt, SamplingOptions(3))
    assert not generation.ahead  # the CPU computes as it is called
    generation.ahead = True
    order: list[str] = []
    outcome = run(_traced(generation, order), [], lambda _t: order.append("token"), lambda: False)
    assert outcome.finish_reason == "length"
    assert order == ["token", "launch", "launch", "token", "token"]
    assert outcome.tokens == _reference(loaded, prompt, 3)


def test_on_the_cpu_each_token_is_reported_before_the_next_step(loaded: Loaded) -> None:
    embeddings = [loaded.vision.encode(scene_images()[0])]
    prompt = loaded.language.build_prompt([Turn("Describe", 1)], embeddings)
    generation = Generation(loaded.language.model, prompt, SamplingOptions(3))
    order: list[str] = []
    outcome = run(_traced(generation, order), [], lambda _t: order.append("token"), lambda: False)
    assert order == ["token", "launch", "token", "launch", "token"]
    assert outcome.tokens == _reference(loaded, prompt, 3)


def test_the_step_queued_past_a_stop_token_is_not_reported(loaded: Loaded) -> None:
    embeddings = [loaded.vision.encode(scene_images()[0])]
    prompt = loaded.language.build_prompt([Turn("Describe", 1)], embeddings)
    expected = _reference(loaded, prompt, 4)
    generation = Generation(loaded.language.model, prompt, SamplingOptions(8))
    generation.ahead = True
    order: list[str] = []
    reported: list[int] = []
    stop = expected.index(expected[2])
    outcome = run(_traced(generation, order), [expected[2]], reported.append, lambda: False)
    assert outcome.finish_reason == "stop"
    assert outcome.tokens == reported == expected[:stop]
    assert order.count("launch") == (stop + 1 if stop else 0)  # one queued past the stop, unread
    assert generation.cache is None
