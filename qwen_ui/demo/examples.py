"""Example images and questions from the demo grammar, for the UI when the demo model is
loaded (one per question type, grounding included, in the requested language)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from qwen_ui.demo import scenes

EXAMPLE_BASE = scenes.HELD_OUT_BASE + 999 * 10**6  # held-out range: never trained on
EXAMPLE_KINDS = (*scenes.KINDS, "grounding")  # the refusal needs no example
NOTICE = {
    "en": "This is a small demo model that only knows simple shapes (circles, squares, "
    "triangles, stars in six colours). Ask it to count, name colours or shapes, compare "
    "positions, show where a shape is or compare images.",
    "zh": "这是一个只认识简单图形（六种颜色的圆形、正方形、三角形、星形）的小型演示模型。"
    "可以让它数数、说出颜色或形状、比较位置、框出图形在哪里或比较几张图。",
}

# what the shipped demo model understands, one line per language (shown beside the examples)
SCOPE = {
    "en": "Understands questions about circles, squares, triangles and stars in red, green, "
    "blue, yellow, purple and orange: how many, which colour or shape, whether one is there, "
    "left/right/above/below, where a shape is (boxes drawn on the image), and comparing or "
    "counting over 2–3 images, in English or Chinese.",
    "zh": "能回答关于红、绿、蓝、黄、紫、橙六种颜色的圆形、正方形、三角形、星形的问题：有几个、"
    "什么颜色或形状、有没有、左右上下的位置、图形在哪里（在图上画框），以及比较或合计 2–3 张图，"
    "可用中文或英文提问。",
}


@dataclass(frozen=True)
class Example:
    kind: str
    question: str
    answer: str
    images: tuple[Path, ...]


def examples(out_dir: Path, lang: scenes.Lang = "en") -> list[Example]:
    """One example per type of :data:`EXAMPLE_KINDS`; its images are written (PNG) under
    ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    found = []
    for i, kind in enumerate(EXAMPLE_KINDS):
        sample = scenes.sample(EXAMPLE_BASE + i, kind, lang)
        paths = []
        for j, image in enumerate(sample.images()):
            path = out_dir / f"demo-{kind}-{lang}-{j + 1}.png"
            image.save(path, "PNG")
            paths.append(path)
        found.append(Example(kind, sample.question, sample.answer, tuple(paths)))
    return found
