"""Seeded scenes of simple shapes and questions about them, in English and Chinese.

One seed gives one :class:`Sample`: 1 to 3 images (scenes of 1 to 6 shapes on a tinted
background, 160 to 480 px a side) and a question with its exact answer, drawn from the
grammar documented in ``docs/demo-model.md``. Everything derives from ``random.Random(seed)``
so a seed always gives the same sample. Training draws seeds below :data:`HELD_OUT_BASE`;
evaluation uses seeds from :data:`HELD_OUT_BASE` up, never seen in training.
"""

from __future__ import annotations

import io
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from PIL import Image, ImageDraw

from qwen_ui.lang import LANGS as LANGS  # the demo's modules name them scenes.*
from qwen_ui.lang import Lang as Lang

HELD_OUT_BASE = 10**12

SHAPES = ("circle", "square", "triangle", "star")
SHAPE_PLURAL = {"circle": "circles", "square": "squares", "triangle": "triangles", "star": "stars"}
SHAPE_ZH = {"circle": "圆形", "square": "正方形", "triangle": "三角形", "star": "星形"}
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 215),
    "yellow": (235, 200, 25),
    "purple": (135, 55, 185),
    "orange": (245, 130, 25),
}
COLOUR_ZH = {
    "red": "红色",
    "green": "绿色",
    "blue": "蓝色",
    "yellow": "黄色",
    "purple": "紫色",
    "orange": "橙色",
}
RELATIONS = ("left", "right", "above", "below")
REL_EN = {"left": "left of", "right": "right of", "above": "above", "below": "below"}
REL_ZH = {"left": "左边", "right": "右边", "above": "上面", "below": "下面"}
ORDINAL_EN = ("the first image", "the second image", "the third image")
ORDINAL_ZH = ("第一张图", "第二张图", "第三张图")
COUNT_WORD_EN = {2: "two", 3: "three"}
COUNT_WORD_ZH = {2: "两", 3: "三"}
YES = {"en": "yes", "zh": "有"}
NO = {"en": "no", "zh": "没有"}
TRUE = {"en": "yes", "zh": "是"}
FALSE = {"en": "no", "zh": "否"}

KINDS = (
    "count",
    "total",
    "colour",
    "shape",
    "exists",
    "spatial",
    "multi_compare",
    "multi_count",
)
# beyond the grammar's answers: where shapes are (``locate``) and the refusal of
# questions outside the grammar (``off_grammar``); held-out sets ask them from a sequence
# of their own, so the grammar's sets stay what they were
EXTRA_KINDS = ("grounding", "off_grammar")
ALL_KINDS = KINDS + EXTRA_KINDS
EXTRA_OFFSET = 500_000  # a held-out set's extra questions start at this seed offset
MAX_SHAPES = 6


@dataclass(frozen=True)
class Shape:
    kind: str
    colour: str
    rgb: tuple[int, int, int]
    cx: float
    cy: float
    r: float


@dataclass(frozen=True)
class Scene:
    width: int
    height: int
    background: tuple[int, int, int]
    shapes: tuple[Shape, ...]

    def count(self, colour: str | None = None, kind: str | None = None) -> int:
        return sum(1 for s in self.shapes if _matches(s, colour, kind))


class FollowUp(NamedTuple):
    """A later turn of a conversation: its question, answer and question type."""

    question: str
    answer: str
    kind: str


@dataclass(frozen=True)
class Sample:
    seed: int
    kind: str
    lang: Lang
    question: str
    answer: str
    scenes: tuple[Scene, ...]
    # later turns of the same conversation, about the same images
    follow_ups: tuple[FollowUp, ...] = ()

    def images(self) -> list[Image.Image]:
        return [render(scene) for scene in self.scenes]

    def png_bytes(self) -> list[bytes]:
        """The images as PNG files' bytes (what a user uploads)."""
        out = []
        for image in self.images():
            buf = io.BytesIO()
            image.save(buf, "PNG")
            out.append(buf.getvalue())
        return out


def _matches(shape: Shape, colour: str | None, kind: str | None) -> bool:
    return _spec_matches((shape.kind, shape.colour), colour, kind)


def _spec_matches(spec: tuple[str, str], colour: str | None, kind: str | None) -> bool:
    return (colour is None or spec[1] == colour) and (kind is None or spec[0] == kind)


# --- scenes -------------------------------------------------------------------------


Spec = tuple[str, str]  # (kind, colour)


def random_spec(rng: random.Random) -> Spec:
    return rng.choice(SHAPES), rng.choice(list(COLOURS))


def _jitter(rng: random.Random, rgb: tuple[int, int, int], amount: int) -> tuple[int, int, int]:
    r, g, b = (min(255, max(0, c + rng.randint(-amount, amount))) for c in rgb)
    return r, g, b


def make_scene(rng: random.Random, specs: Sequence[Spec]) -> Scene | None:
    """Place ``specs`` without overlap on a random canvas; None when they do not fit."""
    width, height = rng.randint(160, 480), rng.randint(160, 480)
    side = min(width, height)
    placed: list[Shape] = []
    for kind, colour in specs:
        r = side * rng.uniform(0.08, 0.14)
        for _ in range(60):
            cx = rng.uniform(r + 2, width - r - 2)
            cy = rng.uniform(r + 2, height - r - 2)
            if all(math.hypot(cx - s.cx, cy - s.cy) > r + s.r + 4 for s in placed):
                rgb = _jitter(rng, COLOURS[colour], 12)
                placed.append(Shape(kind, colour, rgb, cx, cy, r))
                break
        else:
            return None
    background = (rng.randint(222, 255), rng.randint(222, 255), rng.randint(222, 255))
    return Scene(width, height, background, tuple(placed))


def scene_from(rng: random.Random, draw_specs: Callable[[], list[Spec]]) -> Scene:
    """Draw specs and place them until they fit (shuffled so order carries no meaning)."""
    while True:
        specs = draw_specs()
        rng.shuffle(specs)
        scene = make_scene(rng, specs)
        if scene is not None:
            return scene


def star_points(cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    points = []
    for i in range(10):
        radius = r if i % 2 == 0 else r * 0.45
        angle = -math.pi / 2 + i * math.pi / 5
        points.append((cx + radius * math.cos(angle), cy + radius * math.sin(angle)))
    return points


def draw_shape(
    draw: ImageDraw.ImageDraw, s: Shape, fill: int | tuple[int, int, int] | None = None
) -> None:
    """Draw ``s`` in its colour, or in ``fill`` (an int on a one-channel image)."""
    ink = s.rgb if fill is None else fill
    box = (s.cx - s.r, s.cy - s.r, s.cx + s.r, s.cy + s.r)
    if s.kind == "circle":
        draw.ellipse(box, fill=ink)
    elif s.kind == "square":
        k = s.r * 0.85
        draw.rectangle((s.cx - k, s.cy - k, s.cx + k, s.cy + k), fill=ink)
    elif s.kind == "triangle":
        h = s.r * math.sqrt(3) / 2
        draw.polygon(
            [(s.cx, s.cy - s.r), (s.cx - h, s.cy + s.r / 2), (s.cx + h, s.cy + s.r / 2)], fill=ink
        )
    else:
        draw.polygon(star_points(s.cx, s.cy, s.r), fill=ink)


def render(scene: Scene) -> Image.Image:
    """Draw ``scene`` as an RGB image."""
    image = Image.new("RGB", (scene.width, scene.height), scene.background)
    draw = ImageDraw.Draw(image)
    for shape in scene.shapes:
        draw_shape(draw, shape)
    return image


# --- questions ----------------------------------------------------------------------


Made = tuple[str, str, tuple[Scene, ...]]  # (question, answer, scenes)


def fill(rng: random.Random, n: int, ok: Callable[[Spec], bool]) -> list[Spec]:
    """``n`` random specs, each satisfying ``ok``."""
    specs: list[Spec] = []
    while len(specs) < n:
        spec = random_spec(rng)
        if ok(spec):
            specs.append(spec)
    return specs


def q_count(rng: random.Random, lang: Lang) -> Made:
    form = rng.choices(("both", "shape", "colour"), weights=(3, 1, 1))[0]
    kind = rng.choice(SHAPES) if form != "colour" else None
    colour = rng.choice(list(COLOURS)) if form != "shape" else None
    k = rng.randint(0, 5)
    n = rng.randint(max(1, k), MAX_SHAPES)

    def specs() -> list[Spec]:
        hits = [(kind or rng.choice(SHAPES), colour or rng.choice(list(COLOURS))) for _ in range(k)]
        return hits + fill(rng, n - k, lambda s: not _spec_matches(s, colour, kind))

    scene = scene_from(rng, specs)
    return _count_text(lang, colour, kind), str(scene.count(colour, kind)), (scene,)


def _count_text(lang: Lang, colour: str | None, kind: str | None) -> str:
    if lang == "en":
        noun = f"{colour} shapes" if kind is None else SHAPE_PLURAL[kind]
        if kind is not None and colour is not None:
            noun = f"{colour} {noun}"
        return f"How many {noun} are there?"
    noun = "图形" if kind is None else SHAPE_ZH[kind]
    return f"图中有几个{COLOUR_ZH[colour]}的{noun}？" if colour else f"图中有几个{noun}？"


def _total_text(lang: Lang) -> str:
    return "How many shapes are there?" if lang == "en" else "图中一共有几个图形？"


def q_total(rng: random.Random, lang: Lang) -> Made:
    n = rng.randint(1, MAX_SHAPES)
    scene = scene_from(rng, lambda: [random_spec(rng) for _ in range(n)])
    return _total_text(lang), str(n), (scene,)


def q_colour(rng: random.Random, lang: Lang) -> Made:
    kind, colour = random_spec(rng)
    n = rng.randint(1, MAX_SHAPES)
    scene = scene_from(rng, lambda: [(kind, colour), *fill(rng, n - 1, lambda s: s[0] != kind)])
    return _colour_text(lang, kind, rng), _colour_word(lang, colour), (scene,)


def _colour_text(lang: Lang, kind: str, rng: random.Random) -> str:
    if lang == "en":
        word = rng.choice(("colour", "color"))
        return f"What {word} is the {kind}?"
    return f"{SHAPE_ZH[kind]}是什么颜色的？"


def _colour_word(lang: Lang, colour: str) -> str:
    return colour if lang == "en" else COLOUR_ZH[colour]


def q_shape(rng: random.Random, lang: Lang) -> Made:
    kind, colour = random_spec(rng)
    n = rng.randint(1, MAX_SHAPES)
    scene = scene_from(rng, lambda: [(kind, colour), *fill(rng, n - 1, lambda s: s[1] != colour)])
    return _shape_text(lang, colour), _shape_word(lang, kind), (scene,)


def _shape_text(lang: Lang, colour: str) -> str:
    if lang == "en":
        return f"What shape is the {colour} one?"
    return f"{COLOUR_ZH[colour]}的图形是什么形状？"


def _shape_word(lang: Lang, kind: str) -> str:
    return kind if lang == "en" else SHAPE_ZH[kind]


def q_exists(rng: random.Random, lang: Lang) -> Made:
    kind, colour = random_spec(rng)
    present = rng.random() < 0.5
    n = rng.randint(1, MAX_SHAPES)

    def specs() -> list[Spec]:
        # near misses (same shape or same colour) make "no" scenes informative
        rest = fill(rng, n - 1 if present else n, lambda s: s != (kind, colour))
        return [(kind, colour), *rest] if present else rest

    scene = scene_from(rng, specs)
    return _exists_text(lang, colour, kind), (YES if present else NO)[lang], (scene,)


def _exists_text(lang: Lang, colour: str, kind: str) -> str:
    if lang == "en":
        article = "an" if colour in ("orange",) else "a"
        return f"Is there {article} {colour} {kind}?"
    return f"图中有{COLOUR_ZH[colour]}的{SHAPE_ZH[kind]}吗？"


FOLLOW_UP_FORMS = ("total", "count", "exists", "colour", "shape", "spatial")


def follow_up(scene: Scene, rng: random.Random, lang: Lang) -> FollowUp:
    """A later question about an earlier turn's ``scene``: the total count, a yes/no
    spatial question about two of its shapes (a few tries), where the scene has one the
    colour of its only shape of a kind or the shape of its only one of a colour, a count
    (by colour and shape, by shape or by colour, as :func:`q_count` asks it, half the time
    about a shape that is there), else existence (half the time of a shape that is
    there)."""
    form = rng.choice(FOLLOW_UP_FORMS)
    if form == "total":
        return FollowUp(_total_text(lang), str(len(scene.shapes)), "total")
    for _ in range(4 if form == "spatial" else 0):  # many pairs are not clear-cut
        if made := _yes_no_about(scene, rng, lang, rng.choice(RELATIONS)):
            return FollowUp(*made, "spatial")
    by = {"colour": "kind", "shape": "colour"}.get(form)
    if by and (alone := alone_shapes(scene, by)):
        shape = rng.choice(alone)
        if form == "colour":
            text = _colour_text(lang, shape.kind, rng)
            return FollowUp(text, _colour_word(lang, shape.colour), "colour")
        return FollowUp(_shape_text(lang, shape.colour), _shape_word(lang, shape.kind), "shape")
    kind, colour = _follow_up_spec(scene, rng)
    if form == "count":
        return FollowUp(*_follow_up_count(scene, rng, lang, kind, colour), "count")
    present = scene.count(colour, kind) > 0
    return FollowUp(_exists_text(lang, colour, kind), (YES if present else NO)[lang], "exists")


def _follow_up_spec(scene: Scene, rng: random.Random) -> Spec:
    """A (kind, colour): half the time one of the scene's shapes', else any."""
    if rng.random() < 0.5:
        shape = rng.choice(scene.shapes)
        return shape.kind, shape.colour
    return random_spec(rng)


def _follow_up_count(
    scene: Scene, rng: random.Random, lang: Lang, kind: str, colour: str
) -> tuple[str, str]:
    form = rng.choices(("both", "shape", "colour"), weights=(3, 1, 1))[0]
    by_kind = kind if form != "colour" else None
    by_colour = colour if form != "shape" else None
    return _count_text(lang, by_colour, by_kind), str(scene.count(by_colour, by_kind))


def alone_shapes(scene: Scene, by: str) -> list[Shape]:
    """The scene's shapes that are the only one of their kind (``by="kind"``) or colour."""
    values = [s.kind if by == "kind" else s.colour for s in scene.shapes]
    return [s for s, v in zip(scene.shapes, values, strict=True) if values.count(v) == 1]


def with_follow_up(item: Sample, turns: int = 1) -> Sample:
    """``item`` with ``turns`` follow-up turns about its image (single-image samples
    only; no question twice in one conversation), drawn from the sample's own seed."""
    if len(item.scenes) != 1:
        return item
    rng = random.Random(f"follow-up {item.seed}")  # noqa: S311
    asked = {item.question}
    later: list[FollowUp] = []
    for _ in range(4 * turns):  # a few draws per turn: small scenes repeat questions
        if len(later) == turns:
            break
        turn = follow_up(item.scenes[0], rng, item.lang)
        if turn.question not in asked:
            asked.add(turn.question)
            later.append(turn)
    return replace(item, follow_ups=tuple(later))


def turns_of(item: Sample) -> list[Sample]:
    """Each turn of ``item``'s conversation as a sample of its own type about the same
    images, with no later turns: ``item`` itself first, then its follow-ups."""
    first = replace(item, follow_ups=())
    later = (
        replace(first, kind=f.kind, question=f.question, answer=f.answer) for f in item.follow_ups
    )
    return [first, *later]


def _axis(rel: str, s: Shape) -> float:
    """Coordinate along the relation's axis, growing in the relation's direction."""
    return {"left": -s.cx, "right": s.cx, "above": -s.cy, "below": s.cy}[rel]


def holds(rel: str, a: Shape, b: Shape) -> bool:
    """``a`` is clearly ``rel`` of ``b``: their extents on that axis do not overlap."""
    return _axis(rel, a) - a.r > _axis(rel, b) + b.r


def clearly_not(rel: str, a: Shape, b: Shape) -> bool:
    """``a`` is clearly not ``rel`` of ``b``: its centre lies on the other side."""
    return _axis(rel, a) < _axis(rel, b) - 0.25 * b.r


def shape_ranks(scene: Scene) -> list[tuple[int, int]]:
    """Per shape of ``scene``: how many other shapes have their centre left of its centre,
    and how many above it. "Is A left of B?" is asked only when A's extent ends before
    B's begins (yes) or A's centre lies clearly right of B's (no), so the answer is
    whether A's rank across is below B's; likewise down for above and below."""
    xs = [s.cx for s in scene.shapes]
    ys = [s.cy for s in scene.shapes]
    return [(sum(x < s.cx for x in xs), sum(y < s.cy for y in ys)) for s in scene.shapes]


def _unique_refs(scene: Scene) -> list[Shape]:
    return [s for s in scene.shapes if scene.count(s.colour, s.kind) == 1]


JOINT_CLASSES = len(SHAPES) * len(COLOURS)  # (kind, colour) pairs


def joint_class(s: Shape) -> int:
    """``s``'s (kind, colour) pair as one class, 0 .. JOINT_CLASSES - 1."""
    return SHAPES.index(s.kind) * len(COLOURS) + list(COLOURS).index(s.colour)


def shape_name(s: Shape, lang: Lang) -> str:
    """How the grammar names ``s`` (a colour and a kind) in ``lang``."""
    return f"{s.colour} {s.kind}" if lang == "en" else f"{COLOUR_ZH[s.colour]}{SHAPE_ZH[s.kind]}"


def _spatial_which(rng: random.Random, lang: Lang, rel: str) -> Made | None:
    n = rng.randint(2, MAX_SHAPES)
    scene = scene_from(rng, lambda: [random_spec(rng) for _ in range(n)])
    for ref in _unique_refs(scene):
        others = [s for s in scene.shapes if s is not ref]
        hits = [s for s in others if holds(rel, s, ref)]
        if len(hits) == 1 and all(s is hits[0] or clearly_not(rel, s, ref) for s in others):
            if lang == "en":
                return (
                    f"What shape is {REL_EN[rel]} the {shape_name(ref, lang)}?",
                    hits[0].kind,
                    (scene,),
                )
            text = f"{shape_name(ref, lang)}{REL_ZH[rel]}的图形是什么形状？"
            return text, SHAPE_ZH[hits[0].kind], (scene,)
    return None


def _spatial_yesno(rng: random.Random, lang: Lang, rel: str) -> Made | None:
    n = rng.randint(2, MAX_SHAPES)
    scene = scene_from(rng, lambda: [random_spec(rng) for _ in range(n)])
    made = _yes_no_about(scene, rng, lang, rel)
    return None if made is None else (*made, (scene,))


def _yes_no_about(scene: Scene, rng: random.Random, lang: Lang, rel: str) -> tuple[str, str] | None:
    """ "Is A ``rel`` of B?" about two of the scene's shapes, each alone of its kind and
    colour, drawn at random; ``None`` where there are no two such or the answer is not
    clear (their extents overlap on that axis)."""
    refs = _unique_refs(scene)
    if len(refs) < 2:
        return None
    a, b = rng.sample(refs, 2)
    if holds(rel, a, b):
        truth = True
    elif clearly_not(rel, a, b):
        truth = False
    else:
        return None
    answer = (TRUE if truth else FALSE)[lang]
    if lang == "en":
        where = REL_EN[rel] if rel in ("above", "below") else f"to the {REL_EN[rel]}"
        return f"Is the {shape_name(a, lang)} {where} the {shape_name(b, lang)}?", answer
    return f"{shape_name(a, lang)}在{shape_name(b, lang)}的{REL_ZH[rel]}吗？", answer


def q_spatial(rng: random.Random, lang: Lang, yes_no_share: float = 0.5) -> Made:
    """A spatial question: the yes/no form with probability ``yes_no_share``, else the
    "which" form."""
    form = _spatial_which if rng.random() < 1.0 - yes_no_share else _spatial_yesno
    rel = rng.choice(RELATIONS)
    while True:
        made = form(rng, lang, rel)
        if made is not None:
            return made


def q_multi_compare(rng: random.Random, lang: Lang) -> Made:
    m = rng.choice((2, 3))
    kind = rng.choice(SHAPES)
    while True:
        counts = [rng.randint(0, 4) for _ in range(m)]
        best = max(counts)
        if counts.count(best) == 1:
            break
    scenes = tuple(
        _scene_with(rng, kind, c, rng.randint(max(1, c), min(MAX_SHAPES, c + 3))) for c in counts
    )
    winner = counts.index(best)
    if lang == "en":
        more = "more" if m == 2 else "the most"
        return f"Which image has {more} {SHAPE_PLURAL[kind]}?", ORDINAL_EN[winner], scenes
    more = "更多" if m == 2 else "最多"
    return f"哪张图里的{SHAPE_ZH[kind]}{more}？", ORDINAL_ZH[winner], scenes


def _scene_with(rng: random.Random, kind: str, hits: int, n: int) -> Scene:
    def specs() -> list[Spec]:
        same = [(kind, rng.choice(list(COLOURS))) for _ in range(hits)]
        return same + fill(rng, n - hits, lambda s: s[0] != kind)

    return scene_from(rng, specs)


def q_multi_count(rng: random.Random, lang: Lang) -> Made:
    m = rng.choice((2, 3))
    kind = rng.choice(SHAPES)
    counts = [rng.randint(0, 3) for _ in range(m)]
    scenes = tuple(
        _scene_with(rng, kind, c, rng.randint(max(1, c), min(MAX_SHAPES, c + 3))) for c in counts
    )
    total = str(sum(counts))
    if lang == "en":
        text = f"How many {SHAPE_PLURAL[kind]} are there in the {COUNT_WORD_EN[m]} images together?"
        return text, total, scenes
    return f"{COUNT_WORD_ZH[m]}张图里一共有几个{SHAPE_ZH[kind]}？", total, scenes


MAKERS: dict[str, Callable[[random.Random, Lang], Made]] = {
    "count": q_count,
    "total": q_total,
    "colour": q_colour,
    "shape": q_shape,
    "exists": q_exists,
    "spatial": q_spatial,
    "multi_compare": q_multi_compare,
    "multi_count": q_multi_count,
}


def sample(
    seed: int,
    kind: str | None = None,
    lang: Lang | None = None,
    yes_no_share: float = 0.5,
    every_share: float | None = None,
) -> Sample:
    """The sample of ``seed``; ``kind``/``lang`` force a question type (any of
    :data:`ALL_KINDS`) or language; ``yes_no_share`` is the share of spatial questions in
    the yes/no form and ``every_share`` that of grounding questions about every shape of a
    kind (training only: the grammar's, and every held-out set's, are one half and
    ``locate.EVERY_SHARE``; None keeps the latter)."""
    rng = random.Random(seed)  # noqa: S311 (reproducible scenes, not secrets)
    chosen_kind = rng.choice(KINDS)
    chosen_lang = rng.choice(LANGS)
    kind = kind or chosen_kind
    lang = lang or chosen_lang
    question, answer, scenes = _made(rng, seed, kind, lang, yes_no_share, every_share)
    return Sample(seed, kind, lang, question, answer, scenes)


def _made(
    rng: random.Random,
    seed: int,
    kind: str,
    lang: Lang,
    yes_no_share: float,
    every_share: float | None,
) -> Made:
    # the extra kinds' modules build on this one's scenes (imported here, not at the top)
    from qwen_ui.demo import locate, off_grammar

    if kind == "spatial":
        return q_spatial(rng, lang, yes_no_share)
    if kind == "grounding":
        share = locate.EVERY_SHARE if every_share is None else every_share
        return locate.q_grounding(rng, lang, share)
    if kind == "off_grammar":
        return off_grammar.q_off_grammar(rng, lang, unseen=seed >= HELD_OUT_BASE)
    return MAKERS[kind](rng, lang)


def held_out(n: int, seed: int = 0, kinds: tuple[str, ...] = KINDS) -> list[Sample]:
    """The first ``n`` samples of ``kinds`` (the grammar's types by default) in held-out
    set ``seed``, balanced over types and languages. The grammar's types are one sequence:
    seed ``base + i`` is always the same (type, language, question), so the questions of a
    few types are those the whole set asks of them, in order; the extra types
    (:data:`EXTRA_KINDS`) are a second sequence from ``base + EXTRA_OFFSET``. With both,
    each gets its share of ``n`` by its number of types, interleaved."""
    if not kinds or not set(kinds) <= set(ALL_KINDS):
        raise ValueError(f"question types must be some of {', '.join(ALL_KINDS)}: {kinds}")
    base = HELD_OUT_BASE + seed * 10**6
    grammar = tuple(k for k in kinds if k in KINDS)
    extra = tuple(k for k in kinds if k in EXTRA_KINDS)
    n_extra = n * len(extra) // len(kinds)
    first = _sequence(n - n_extra, base, KINDS, grammar)
    second = _sequence(n_extra, base + EXTRA_OFFSET, EXTRA_KINDS, extra)
    return _interleave(first, second)


def _sequence(n: int, base: int, cycle: tuple[str, ...], kinds: tuple[str, ...]) -> list[Sample]:
    pairs = [(k, lang) for k in cycle for lang in LANGS]
    slots = (i for i in itertools.count() if pairs[i % len(pairs)][0] in kinds)
    return [sample(base + i, *pairs[i % len(pairs)]) for i in itertools.islice(slots, n)]


def _interleave(first: list[Sample], second: list[Sample]) -> list[Sample]:
    """``first`` and ``second`` merged evenly, each in its order."""
    if not second:
        return first
    keyed = [((i + 0.5) / len(first), 0, s) for i, s in enumerate(first)]
    keyed += [((i + 0.5) / len(second), 1, s) for i, s in enumerate(second)]
    merged = [s for _, _, s in sorted(keyed, key=lambda t: (t[0], t[1]))]
    return merged
