"""AWQ-quantize the demo model with gptqmodel, on the CPU (step 2 of
training/quantize_demo.sh; runs in the quantizer's own environment, .venv-quantize).

    .venv-quantize/bin/python training/gptq_awq.py --src BF16_DIR --calib CALIB_JSON --out DIR

AWQ, 4-bit, group 128, zero points (``sym=False``), GEMM packing; gptqmodel's Qwen2.5-VL
definition quantizes the language model's linear layers only. Its output keeps
transformers 5's key names and config; ``python -m training.quantize official``
rewrites it in the official layout.

Two workarounds for gptqmodel 7.7.0 on this machine: its CPU worker pool asks for two
workers where a 2-core machine gives it one (``GPTQMODEL_CPU_WORKERS=2``), and
transformers 5's Qwen2.5-VL processor always builds a video processor, which needs
torchvision, and no torchvision build imports beside the CPU torch 2.13.0 this
environment uses: the processor is built with images and text only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")

import torch
from transformers import (
    AutoImageProcessor,
    AutoProcessor,
    AutoTokenizer,
    Qwen2_5_VLProcessor,
)
from transformers.processing_utils import ProcessorMixin

log = logging.getLogger("gptq_awq")


class ImageTextProcessor(Qwen2_5_VLProcessor):
    """Qwen2.5-VL's processor without its video processor (no torchvision here)."""

    def __init__(self, image_processor: Any, tokenizer: Any, chat_template: str | None) -> None:
        self.image_token = "<|image_pad|>"  # noqa: S105 (a token, not a secret)
        self.video_token = "<|video_pad|>"  # noqa: S105
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        self.video_processor = None


def image_text_processor(path: Any, *_args: Any, **_kwargs: Any) -> ImageTextProcessor:
    template = Path(str(path)) / "chat_template.jinja"
    return ImageTextProcessor(
        AutoImageProcessor.from_pretrained(path),
        AutoTokenizer.from_pretrained(path),
        template.read_text() if template.exists() else None,
    )


def conversations(calib: Path) -> list[list[dict[str, Any]]]:
    out = []
    for item in json.loads(calib.read_text()):
        content: list[dict[str, Any]] = [
            {"type": "image", "image": "file://" + p} for p in item["images"]
        ]
        content.append({"type": "text", "text": item["question"]})
        out.append(
            [
                {"role": "user", "content": content},
                {"role": "assistant", "content": [{"type": "text", "text": item["answer"]}]},
            ]
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--calib", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    AutoProcessor.from_pretrained = image_text_processor  # type: ignore[method-assign]
    from gptqmodel import AWQConfig, GPTQModel
    from gptqmodel.quantization import FORMAT

    config = AWQConfig(bits=4, group_size=128, sym=False, format=FORMAT.GEMM, device="cpu")
    t0 = time.perf_counter()
    model = GPTQModel.load(str(args.src), config, dtype=torch.float16)
    model.quantize(conversations(args.calib), batch_size=1)
    model.save(str(args.out))
    log.info("quantized in %.1f s: %s", time.perf_counter() - t0, args.out)


if __name__ == "__main__":
    main()
