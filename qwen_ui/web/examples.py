"""Example prompts and images for the demo model, drawn from its scene grammar."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# (seed, question kind, language): fixed so the examples are the same on every start.
EXAMPLES = (
    (101, "count", "en"),
    (202, "colour", "zh"),
    (303, "multi_count", "en"),
    (404, "shape", "en"),
    (505, "spatial", "zh"),
    (606, "multi_compare", "zh"),
)


def demo_examples(folder: Path) -> list[dict[str, Any]]:
    """MultimodalTextbox values ``{"text", "files"}``; images are rendered once into
    ``folder``. Empty when the demo package cannot draw them."""
    try:
        from qwen_ui.demo import scenes
    except ImportError:  # pragma: no cover - the demo package ships with qwen-ui
        return []
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for seed, kind, lang in EXAMPLES:
        sample = scenes.sample(seed, kind, lang)  # type: ignore[arg-type]
        files = []
        for i, image in enumerate(sample.images()):
            path = folder / f"demo-{seed}-{i}.png"
            if not path.exists():
                image.save(path)
            files.append(str(path))
        out.append({"text": sample.question, "files": files})
    return out
