"""Questions outside the demo grammar and the one refusal the demo model gives them.

Descriptions, stories, arithmetic, other objects ("How many cats are there?"), unknown
shapes and other languages all get :data:`REFUSAL` in the question's language (Chinese
for a Chinese question, English for every other language), naming two questions the
model does answer. Training seeds (below :data:`scenes.HELD_OUT_BASE`) draw only from the
``TRAIN`` templates and vocabulary; held-out seeds draw half the time from those and half
the time from ``UNSEEN`` ones (templates, objects, numbers' wording and languages never
trained on), so the held-out refusal rate measures generalisation, not recall.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from qwen_ui.demo import scenes

REFUSAL: dict[scenes.Lang, str] = {
    "en": "I can only answer questions about the shapes in the image, such as "
    "“How many red circles are there?” or “What colour is the star?”",
    "zh": "我只能回答关于图中图形的问题，例如“图中有几个红色的圆形？”或“星形是什么颜色的？”",
}


@dataclass(frozen=True)
class Pool:
    """Templates and the vocabulary they are filled from, per language."""

    # {o}: an object (singular), {os}: its plural, {a} {b}: numbers
    en: Sequence[str]
    zh: Sequence[str]
    # "other languages", answered with the English refusal
    foreign: Sequence[str]
    objects_en: Sequence[tuple[str, str]]
    objects_zh: Sequence[str]


TRAIN = Pool(
    en=(
        "Describe this image in detail.",
        "What is in this picture?",
        "Can you describe the image?",
        "Tell me about this image.",
        "Write a long story about this picture.",
        "Tell me a story.",
        "Write a poem.",
        "What is {a} plus {b}?",
        "What is {a} times {b}?",
        "Calculate {a} + {b}.",
        "How many {os} are there?",
        "How many red {os} are there?",
        "What colour is the {o}?",
        "Is there a {o}?",
        "Where is the {o}?",
        "What shape is the {o}?",
        "Who made this picture?",
        "What is the capital of France?",
        "Translate this into French.",
        "hello",
        "What is the weather like today?",
        "How many hexagons are there?",
        "Is there a pink circle?",
    ),
    zh=(
        "详细描述这张图片。",
        "这张图片里有什么？",
        "请描述一下这张图。",
        "写一个关于这张图的长故事。",
        "给我讲个故事。",
        "{a}加{b}等于几？",
        "{a}乘{b}是多少？",
        "图中有几个{o}？",
        "图中有几个红色的{o}？",
        "{o}是什么颜色的？",
        "图中有{o}吗？",
        "{o}在哪里？",
        "今天天气怎么样？",
        "你好",
        "中国的首都是哪里？",
        "图中有几个六边形？",
    ),
    foreign=(
        "Combien de cercles rouges y a-t-il ?",
        "¿Cuántos círculos hay?",
        "Wie viele Kreise gibt es?",
        "赤い円はいくつありますか？",
        "Сколько кругов на картинке?",
        "Décris cette image.",
        "Beschreibe dieses Bild.",
    ),
    objects_en=(
        ("cat", "cats"),
        ("dog", "dogs"),
        ("car", "cars"),
        ("bird", "birds"),
        ("person", "people"),
        ("apple", "apples"),
        ("house", "houses"),
        ("flower", "flowers"),
    ),
    objects_zh=("猫", "狗", "汽车", "鸟", "人", "苹果", "房子", "花"),
)

UNSEEN = Pool(
    en=(
        "Please give a detailed caption for this image.",
        "What can you see here?",
        "Compose a short poem about this image.",
        "Write a fairy tale about these pictures.",
        "What is {a} minus {b}?",
        "What is {a} divided by {b}?",
        "How many {os} can you see?",
        "Are there any {os}?",
        "What colour are the {os}?",
        "Why is the sky blue?",
        "Summarise this picture in one sentence.",
        "How many pentagons are there?",
    ),
    zh=(
        "请给这张图片写一段说明。",
        "你能看到什么？",
        "写一首关于这张图的诗。",
        "{a}减{b}等于多少？",
        "图中有没有{o}？",
        "这些{o}是什么颜色的？",
        "为什么天空是蓝色的？",
        "图中有几个五边形？",
    ),
    foreign=(
        "Quanti cerchi ci sono?",
        "Quantos círculos existem?",
        "빨간 원은 몇 개입니까?",
        "Hoeveel cirkels zijn er?",
        "Opisz ten obrazek.",
    ),
    objects_en=(("horse", "horses"), ("tree", "trees"), ("bicycle", "bicycles"), ("boat", "boats")),
    objects_zh=("马", "树", "自行车", "船"),
)


def _filled(template: str, rng: random.Random, objects: tuple[str, str] | str) -> str:
    one, many = (objects, objects) if isinstance(objects, str) else objects
    return template.format(o=one, os=many, a=rng.randint(2, 99), b=rng.randint(2, 99))


def question(rng: random.Random, lang: scenes.Lang, pool: Pool) -> tuple[str, scenes.Lang]:
    """An off-grammar question from ``pool`` and the language of its refusal: a quarter
    of the English ones are in another language (refused in English)."""
    if lang == "zh":
        return _filled(rng.choice(pool.zh), rng, rng.choice(pool.objects_zh)), "zh"
    if rng.random() < 0.25:
        return rng.choice(pool.foreign), "en"
    return _filled(rng.choice(pool.en), rng, rng.choice(pool.objects_en)), "en"


def q_off_grammar(rng: random.Random, lang: scenes.Lang, unseen: bool) -> scenes.Made:
    """An off-grammar question about 1 or 2 random scenes, answered with the refusal;
    ``unseen`` (held-out seeds) draws half the time from :data:`UNSEEN`."""
    pool = UNSEEN if unseen and rng.random() < 0.5 else TRAIN
    text, refusal_lang = question(rng, lang, pool)
    count = 2 if rng.random() < 0.2 else 1
    shown = tuple(
        scenes.scene_from(rng, lambda: [scenes.random_spec(rng) for _ in range(rng.randint(1, 6))])
        for _ in range(count)
    )
    return text, REFUSAL[refusal_lang], shown
