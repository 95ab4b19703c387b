"""Answer questions with a checkpoint through plain transformers ``generate``.

Greedy decoding over the chat template and the real processor, batched with left padding.
This is the reference path used by ``qwen-ui demo eval`` and the tests until the engine
answers; :func:`make_answer_fn` is the seam (see :data:`qwen_ui.demo.evaluate.AnswerFn`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from qwen_ui.demo.evaluate import AnswerFn, Item
from qwen_ui.engine.pipelines import Turn
from qwen_ui.engine.pipelines import messages as engine_messages

# a grammar answer is a few tokens, the refusal about 70, a grounding answer of four
# boxes about 190; generate stops when every answer of the batch has ended
MAX_NEW_TOKENS = 256


def load_processor(path: Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(path))


def load_bf16(path: Path, dtype: torch.dtype = torch.bfloat16) -> Any:
    """The ``bf16`` revision through the transformers Auto class."""
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(str(path), dtype=dtype).eval()


def messages(images: int, question: str, vision_ids: bool = False) -> list[dict[str, Any]]:
    """One question's messages as the engine builds them; ``vision_ids`` labels the images
    ("Picture 1: ", ...) as the engine does for a model that declares them."""
    return engine_messages([Turn(question, images, first_image=1 if vision_ids else 0)])


def answer_batch(
    model: Any, processor: Any, items: Sequence[Item], vision_ids: bool = False
) -> list[str]:
    prompts = [
        processor.apply_chat_template(
            messages(len(imgs), q, vision_ids), add_generation_prompt=True, tokenize=False
        )
        for imgs, q in items
    ]
    images = [img for imgs, _ in items for img in imgs]
    inputs = processor(
        text=prompts, images=images, return_tensors="pt", padding=True, padding_side="left"
    ).to(model.device)
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    new = out[:, inputs["input_ids"].shape[1] :]
    return [text.strip() for text in processor.batch_decode(new, skip_special_tokens=True)]


def make_answer_fn(model: Any, processor: Any, vision_ids: bool = False) -> AnswerFn:
    def answer(items: Sequence[Item]) -> list[str]:
        return answer_batch(model, processor, items, vision_ids)

    return answer
