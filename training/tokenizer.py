"""The demo model's tokenizer: byte-level BPE trained on the scene grammar, Qwen's tokens.

The BPE is trained with the ``tokenizers`` library on questions and answers of the grammar
in both languages (with Qwen2's pre-tokenizer regex), then wrapped as transformers'
``Qwen2Tokenizer`` with the Qwen2.5-VL added tokens after the learned vocabulary and the
Qwen2.5-VL chat template. The constructor registers eos ``<|im_end|>`` (id 1000) and pad
``<|endoftext|>`` (1001) first; the others follow in Qwen's order (``<|im_start|>`` 1002 ...
``<|file_sep|>`` 1021). ``modelcfg`` holds these ids. :func:`build_processor` adds the
image processor and saves the standard Hugging Face files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from qwen_ui.demo import scenes

QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2.5-VL's added tokens, in the order of the official tokenizer (151643...).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
NON_SPECIAL_ADDED = (
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
BPE_VOCAB = 1000
SYSTEM_PROMPT = "You are a helpful assistant."
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus(n: int = 20000) -> Iterator[str]:
    """Training text: chat scaffolding plus ``n`` questions and answers of the grammar."""
    for _ in range(50):
        yield f"system\n{SYSTEM_PROMPT}\nuser\nassistant\nPicture 1: Video 1: "
    for seed in range(n):
        item = scenes.sample(seed)
        yield item.question
        yield item.answer


def train_bpe(vocab_size: int = BPE_VOCAB) -> Tokenizer:
    """A byte-level BPE with Qwen2's pre-tokenizer regex, trained on :func:`corpus`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def build_tokenizer(vocab_size: int = BPE_VOCAB) -> Any:
    """The trained BPE as a transformers ``Qwen2Tokenizer`` with Qwen's added tokens."""
    from transformers import AddedToken, Qwen2Tokenizer

    state = json.loads(train_bpe(vocab_size).to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    tok = Qwen2Tokenizer(
        vocab=state["vocab"],
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",  # noqa: S106
        pad_token="<|endoftext|>",  # noqa: S106
    )
    tok.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS], special_tokens=True
    )
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED])
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = 32768
    return tok


def build_processor(min_pixels: int, max_pixels: int, vocab_size: int = BPE_VOCAB) -> Any:
    """The full ``Qwen2_5_VLProcessor``: trained tokenizer + image and video processors."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size),
        tokenizer=build_tokenizer(vocab_size),
        video_processor=Qwen2VLVideoProcessor(size=size),
        chat_template=CHAT_TEMPLATE,
    )


def save_processor(out_dir: Path, min_pixels: int, max_pixels: int) -> None:
    """Write the tokenizer, chat template and processor files (plus the classic
    ``preprocessor_config.json`` and ``chat_template.json`` the official repos carry)."""
    processor = build_processor(min_pixels, max_pixels)
    processor.save_pretrained(str(out_dir))
    processor.image_processor.save_pretrained(str(out_dir))
    (out_dir / "chat_template.json").write_text(
        json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2) + "\n"
    )
