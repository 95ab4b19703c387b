"""The demo model's architecture: Qwen2.5-VL scaled down, on the production code path.

Window attention in the vision tower (with full-attention blocks, as in the real model),
multimodal rotary positions (mrope) in the language model, the 2x2 patch merger. Every
linear layer's width is a multiple of 128 so that int4 group-128 packing applies to all
of them. Images are limited to ``MAX_PIXELS`` (a 336 px square is 144 visual tokens).
"""

from __future__ import annotations

from typing import Any

PATCH = 14
MERGE = 2
TEMPORAL = 2  # the processor repeats a still image over this many frames
MIN_PIXELS = 56 * 56
MAX_PIXELS = 336 * 336
VOCAB_SIZE = 1024  # 1000 learned BPE tokens + 22 Qwen added tokens, padded to 128

# token ids of the shipped tokenizer: the 1000 learned tokens, then <|im_end|> (eos) and
# <|endoftext|> (pad) as the Qwen2Tokenizer constructor registers them, then the rest of
# tokenizer.SPECIAL_TOKENS in Qwen's order (training/tests/test_tokenizer.py pins them)
IM_END_ID = 1000
ENDOFTEXT_ID = 1001
IM_START_ID = 1002
VISION_START_ID = 1009
VISION_END_ID = 1010
IMAGE_PAD_ID = 1012
VIDEO_PAD_ID = 1013

TEXT = {
    "hidden_size": 384,
    # five layers of 768 (grow.py made them from four of 1024, the same 23.9 MB): the
    # fifth is what lets the yes/no spatial answer compare two named shapes' ranks
    "intermediate_size": 768,
    "num_hidden_layers": 5,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    # mrope gives time, height and width consecutive chunks of the rotary frequencies,
    # fastest first, so width gets the slowest: at a base of 10,000 it turned at most
    # 0.038 rad across a 336 px image and the language model could not tell left from
    # right; at 20 width turns 0.15 to 0.055 rad per visual token (training/NOTES.md)
    "rope_theta": 20.0,
    "mrope_section": [8, 12, 12],  # sums to head_dim / 2 = 32
}
VISION = {
    "depth": 4,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_heads": 4,
    "patch_size": PATCH,
    "spatial_merge_size": MERGE,
    "temporal_patch_size": TEMPORAL,
    "window_size": 112,
    "fullatt_block_indexes": [1, 3],
    "in_chans": 3,
    "hidden_act": "silu",
}


def config_dict() -> dict[str, Any]:
    """Keyword arguments for ``Qwen2_5_VLConfig``."""
    text = dict(TEXT)
    mrope = text.pop("mrope_section")
    text.update(
        vocab_size=VOCAB_SIZE,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_sliding_window=False,
        attention_dropout=0.0,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": text.pop("rope_theta"),
            "mrope_section": mrope,
        },
        bos_token_id=ENDOFTEXT_ID,
        eos_token_id=IM_END_ID,
        pad_token_id=ENDOFTEXT_ID,
    )
    vision = dict(VISION, out_hidden_size=TEXT["hidden_size"])
    return {
        "text_config": text,
        "vision_config": vision,
        "image_token_id": IMAGE_PAD_ID,
        "video_token_id": VIDEO_PAD_ID,
        "vision_start_token_id": VISION_START_ID,
        "vision_end_token_id": VISION_END_ID,
        "tie_word_embeddings": True,
    }


def build_config() -> Any:
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(**config_dict())


def linear_widths(model: Any) -> dict[str, tuple[int, int]]:
    """(in, out) of every ``nn.Linear`` in ``model``, by module name."""
    from torch import nn

    return {
        name: (m.in_features, m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
    }
