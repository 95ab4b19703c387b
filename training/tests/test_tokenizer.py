"""The shipped tokenizer and processor files: round trips, Qwen's tokens and template."""

from __future__ import annotations

from typing import Any

import pytest
from PIL import Image

from qwen_ui.demo import modelcfg, scenes
from qwen_ui.demo.install import weights_dir
from training import tokenizer


@pytest.fixture(scope="module")
def processor() -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(weights_dir("bf16")))


TEXTS = [
    "How many red circles are there?",
    "图中有几个红色的圆形？",
    "哪张图里的星形最多？ the first image 第一张图",
    "Unseen words still work: ünïcödé, 你好世界, 12345!",
]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(processor: Any, text: str) -> None:
    tok = processor.tokenizer
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text


def test_grammar_is_compact(processor: Any) -> None:
    for sample in scenes.held_out(32):
        assert len(processor.tokenizer(sample.question)["input_ids"]) <= 12


def test_special_token_ids(processor: Any) -> None:
    tok = processor.tokenizer
    added = list(tokenizer.SPECIAL_TOKENS + tokenizer.NON_SPECIAL_ADDED)
    ids = dict(zip(added, tok.convert_tokens_to_ids(added), strict=True))
    assert sorted(ids.values()) == list(range(tokenizer.BPE_VOCAB, tokenizer.BPE_VOCAB + 22))
    assert ids["<|im_end|>"] == modelcfg.IM_END_ID
    assert ids["<|endoftext|>"] == modelcfg.ENDOFTEXT_ID
    assert ids["<|im_start|>"] == modelcfg.IM_START_ID
    assert tok.convert_tokens_to_ids("<|image_pad|>") == modelcfg.IMAGE_PAD_ID
    assert tok.convert_tokens_to_ids("<|video_pad|>") == modelcfg.VIDEO_PAD_ID
    assert tok.convert_tokens_to_ids("<|vision_start|>") == modelcfg.VISION_START_ID
    assert tok.convert_tokens_to_ids("<|vision_end|>") == modelcfg.VISION_END_ID
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert len(tok) <= modelcfg.VOCAB_SIZE
    assert tok("<|im_start|>user\n")["input_ids"][0] == modelcfg.IM_START_ID


def test_chat_template_is_qwen25_vl(processor: Any) -> None:
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "image"},
                {"type": "text", "text": "Which image has more stars?"},
            ],
        }
    ]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>"
        "Which image has more stars?<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    ("size", "tokens"), [((336, 336), 144), ((480, 480), 144), ((160, 160), 36), ((480, 200), 119)]
)
def test_visual_tokens_per_image(processor: Any, size: tuple[int, int], tokens: int) -> None:
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]}]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    out = processor(text=[text], images=[Image.new("RGB", size)], return_tensors="pt")
    pads = int((out["input_ids"] == modelcfg.IMAGE_PAD_ID).sum())
    assert pads == int(out["image_grid_thw"].prod()) // 4 == tokens


def test_rebuilt_tokenizer_matches_shipped(processor: Any) -> None:
    rebuilt = tokenizer.build_tokenizer()
    assert rebuilt.get_vocab() == processor.tokenizer.get_vocab()
