"""Continue the demo model's language model on frozen visual features (runs on a CPU).

    python -m training.tune_lm --init qwen_ui/demo/weights/bf16 --out OUT --samples 24000

A second stage after :mod:`training.train` for when GPU time runs out: the vision
tower (already trained, with the auxiliary per-token loss) stays frozen, so each training
sample's visual tokens are computed once, by worker processes, and reused for several
epochs; only the language model trains, under bf16 autocast on CPUs with
``avx512_bf16`` and in fp32 elsewhere (:func:`precision`: emulated bf16 is about ten times
slower than fp32 on an AVX2 CPU). Samples are drawn like ``train.py``'s, from their own
seed range (below the held-out seeds); the held-out score is the same teacher-forced exact
match. The output folder is a complete ``bf16`` revision (weights in 12 MB shards, the
``--init`` folder's config and processor files).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import random
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from qwen_ui.demo import evaluate as scoring
from qwen_ui.demo import modelcfg, scenes
from training import train

log = logging.getLogger(__name__)

SEED_BASE = 7 * 10**10  # train.py draws seed * 10**10 + i for --seed 1..6; held-out is >= 10**12
HELD_OUT_SET = train.HELD_OUT_SET


@dataclass(frozen=True)
class Row:
    """One sample with its visual tokens precomputed."""

    ids: torch.Tensor
    labels: torch.Tensor
    positions: torch.Tensor
    feats: torch.Tensor
    kind: str
    lang: str
    yes_no: str = ""  # "spatial: yes" etc. for a yes/no type (evaluate.yes_no_key)


# --- features -----------------------------------------------------------------------


def load_model(path: Path) -> Any:
    from transformers import Qwen2_5_VLForConditionalGeneration

    return Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32)


def encode(encoder: train.Encoder, model: Any, sample: scenes.Sample) -> Row:
    enc = encoder(sample)
    pixels = train.restore_pixels(enc["pixel_u8"], encoder.mean, encoder.std)
    with torch.no_grad():
        feats = model.model.visual(pixels, grid_thw=enc["image_grid_thw"]).pooler_output
    return Row(
        enc["input_ids"].short(),
        enc["labels"].short(),
        enc["position_ids"].short(),
        feats.bfloat16(),
        sample.kind,
        sample.lang,
        enc["yes_no"],
    )


@dataclass(frozen=True)
class Draw:
    """Which samples to draw: question types, languages, the spatial yes/no share, and
    sampling weights (``train.parse_kind_weights``: by kind or ``kind:lang``)."""

    kinds: tuple[str, ...] = scenes.KINDS
    langs: tuple[scenes.Lang, ...] = scenes.LANGS
    yes_no_share: float = 0.5
    weights: dict[str, float] = field(default_factory=dict)
    follow_up_share: float = 0.0  # single-image samples given follow-up turns (train.py's)
    follow_ups: int = 1

    def pairs(self) -> tuple[list[tuple[str, scenes.Lang]], list[float]]:
        return train.weighted_pairs(self.kinds, self.weights, self.langs)

    def keeps(self, sample: scenes.Sample) -> bool:
        return sample.kind in self.kinds and sample.lang in self.langs


def training_sample(index: int, draw: Draw = Draw()) -> scenes.Sample:
    seed = SEED_BASE + index
    rng = random.Random(seed)  # noqa: S311
    kind, lang = rng.choices(*draw.pairs())[0]
    item = scenes.sample(seed, kind, lang, yes_no_share=draw.yes_no_share)
    if rng.random() < draw.follow_up_share:
        return scenes.with_follow_up(item, draw.follow_ups)
    return item


def held_out(n: int, draw: Draw) -> list[scenes.Sample]:
    """The first ``n`` held-out samples (set 7) that ``draw`` keeps."""
    if draw.langs == scenes.LANGS:
        return train.held_out_samples(n, draw.kinds)
    pool = train.held_out_samples(n * len(scenes.LANGS), draw.kinds)
    return [s for s in pool if draw.keeps(s)][:n]


Job = tuple[Path, list[scenes.Sample] | None, range, Path, Draw]


def _encode_share(job: Job) -> Path:
    """A worker's share (held-out samples when given, else training samples by index),
    saved to a file: returning thousands of tensors through the pool would pass one file
    descriptor per tensor."""
    path, given, indexes, out, draw = job
    torch.set_num_threads(1)
    encoder, model = train.Encoder(path), load_model(path).eval()
    items = [given[i] if given is not None else training_sample(i, draw) for i in indexes]
    torch.save([encode(encoder, model, s) for s in items], out)
    return out


def features(
    path: Path,
    n: int,
    workers: int,
    given: list[scenes.Sample] | None = None,
    draw: Draw = Draw(),
) -> list[Row]:
    """Rows for ``given`` samples, or for the first ``n`` training samples ``draw`` gives."""
    count = len(given) if given is not None else n
    with tempfile.TemporaryDirectory() as tmp:
        jobs: list[Job] = [
            (path, given, range(w, count, workers), Path(tmp, f"{w}.pt"), draw)
            for w in range(workers)
        ]
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            files = pool.map(_encode_share, jobs)
        return [row for f in files for row in torch.load(f, weights_only=False)]


# --- training -----------------------------------------------------------------------


def collate(rows: list[Row]) -> dict[str, torch.Tensor]:
    """Right-padded ids/labels/positions and the rows' visual tokens, in order."""
    length, n = max(len(r.ids) for r in rows), len(rows)
    ids = torch.full((n, length), modelcfg.ENDOFTEXT_ID, dtype=torch.long)
    labels = torch.full((n, length), train.IGNORE, dtype=torch.long)
    positions = torch.zeros((3, n, length), dtype=torch.long)
    for i, r in enumerate(rows):
        k = len(r.ids)
        ids[i, :k], labels[i, :k], positions[:, i, :k] = r.ids, r.labels, r.positions
    feats = torch.cat([r.feats for r in rows]).float()
    return {"ids": ids, "labels": labels, "positions": positions, "feats": feats}


def precision() -> torch.autocast:
    """bf16 autocast where the CPU computes bf16 natively, else fp32 (autocast off)."""
    native = torch.cpu._is_avx512_bf16_supported()
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=native)


def logits_of(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The language model's logits with the visual tokens in the ``<|image_pad|>`` slots
    (right padding only, so no attention mask: no real token sees a pad)."""
    ids = batch["ids"]
    embeds = model.model.get_input_embeddings()(ids)
    slots = (ids == modelcfg.IMAGE_PAD_ID)[..., None].expand_as(embeds)
    embeds = embeds.masked_scatter(slots, batch["feats"].to(embeds.dtype))
    out = model(
        inputs_embeds=embeds,
        position_ids=batch["positions"],
        attention_mask=None,
        use_cache=False,
    )
    return out.logits  # type: ignore[no-any-return]


def evaluate(model: Any, rows: list[Row], batch_size: int = 64) -> dict[str, float]:
    """Teacher-forced exact match (= greedy decoding's), overall, per type and language."""
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    model.eval()
    with torch.no_grad(), precision():
        for i in range(0, len(rows), batch_size):
            chunk = rows[i : i + batch_size]
            batch = collate(chunk)
            right = train.exact(logits_of(model, batch), batch["labels"]).tolist()
            for ok, row in zip(right, chunk, strict=True):
                for key in scoring.score_keys(row.kind, row.lang, row.yes_no):
                    hits[key][0] += int(ok)
                    hits[key][1] += 1
    model.train()
    return {k: round(v[0] / v[1], 4) for k, v in sorted(hits.items())}


def batches_of(rows: list[Row], size: int, rng: random.Random) -> list[list[Row]]:
    """Length-sorted batches (little padding), in shuffled order."""
    ordered = sorted(rows, key=lambda r: len(r.ids))
    out = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    rng.shuffle(out)
    return out


def freeze_vision(model: Any) -> list[torch.nn.Parameter]:
    """Freeze ``visual``; the language model's parameters (the tied head included)."""
    model.model.visual.requires_grad_(False)
    return [p for p in model.parameters() if p.requires_grad]


def step(
    model: Any, opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], rows: list[Row]
) -> float:
    batch = collate(rows)
    with precision():
        logits = logits_of(model, batch)
    loss = train.answer_loss(logits, batch["labels"])
    opt.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return float(loss.detach())


def tune(model: Any, rows: list[Row], held: list[Row], args: argparse.Namespace) -> None:
    """Epochs over ``rows`` until ``--minutes`` or ``--epochs``; cosine decay over the
    larger of time and epoch share; held-out score every ``--eval-every`` steps."""
    params = freeze_vision(model)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.05)
    rng, start, done = random.Random(args.seed), time.time(), 0  # noqa: S311
    total = args.epochs * -(-len(rows) // args.batch)
    log.info("eval %s", json.dumps({"step": 0, "acc": evaluate(model, held)}))
    while True:
        for chunk in batches_of(rows, args.batch, rng):
            progress = max(done / total, (time.time() - start) / (args.minutes * 60))
            if progress >= 1.0:
                return
            for group in opt.param_groups:
                group["lr"] = train.lr_at(done, progress, args.lr, args.warmup)
            loss = step(model, opt, params, chunk)
            done += 1
            report(model, held, args, done, loss, start)


def report(
    model: Any, held: list[Row], args: argparse.Namespace, done: int, loss: float, start: float
) -> None:
    if done % 50 == 0:
        log.info("train %s", json.dumps({"step": done, "loss": round(loss, 4)}))
    if done % args.eval_every == 0:
        acc = evaluate(model, held)
        row = {"step": done, "min": round((time.time() - start) / 60, 1), "acc": acc}
        log.info("eval %s", json.dumps(row))


# --- the run ------------------------------------------------------------------------


def save_revision(model: Any, init: Path, out: Path) -> None:
    """A complete revision in ``out/model``: bf16 shards plus ``init``'s other files."""
    train.save(model, out, -1)
    target = out / "model"
    for f in init.iterdir():
        if f.is_file() and not f.name.startswith("model"):
            shutil.copy2(f, target / f.name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--init", type=Path, required=True, help="a bf16 revision folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--samples", type=int, default=24000, help="training samples (encoded once)")
    p.add_argument("--held-n", type=int, default=512)
    p.add_argument("--epochs", type=float, default=6.0)
    p.add_argument("--minutes", type=float, default=45.0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--workers", type=int, default=2, help="feature-encoding processes")
    p.add_argument("--threads", type=int, default=2, help="torch threads for training")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--kinds",
        default=",".join(scenes.KINDS),
        help="question types to train and score on, comma-separated",
    )
    p.add_argument("--langs", default="en,zh", help="languages to train and score on")
    p.add_argument(
        "--yes-no-share",
        type=train.parse_share,
        default=0.5,
        help="share of spatial training questions in the yes/no form",
    )
    p.add_argument(
        "--kind-weights",
        type=train.parse_kind_weights,
        default={},
        help="sampling weights, as train.py's (count=2,spatial:en=4; others 1)",
    )
    p.add_argument(
        "--follow-up-share",
        type=train.parse_share,
        default=0.0,
        help="share of single-image training samples with follow-up turns (train.py's)",
    )
    p.add_argument("--follow-ups", type=int, default=1, help="follow-up turns in each (1 to 4)")
    return p.parse_args(argv)


def draw_of(args: argparse.Namespace) -> Draw:
    langs = tuple(lang for lang in scenes.LANGS if lang in args.langs.split(","))
    return Draw(
        tuple(args.kinds.split(",")),
        langs,
        args.yes_no_share,
        args.kind_weights,
        args.follow_up_share,
        args.follow_ups,
    )


def run(args: argparse.Namespace) -> None:
    train.seed_everything(args.seed)
    t0 = time.time()
    draw = draw_of(args)
    held = features(args.init, 0, args.workers, held_out(args.held_n, draw))
    rows = features(args.init, args.samples, args.workers, draw=draw)
    log.info("encoded %d + %d samples in %.0f s", len(rows), len(held), time.time() - t0)
    torch.set_num_threads(args.threads)
    model = load_model(args.init).train()
    tune(model, rows, held, args)
    log.info("eval %s", json.dumps({"step": "final", "acc": evaluate(model, held)}))
    save_revision(model, args.init, args.out)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(parse_args(argv))


if __name__ == "__main__":
    main()
