"""Weight averages of two demo checkpoints, and the choice among them on a held-out set.

Two runs continued from the same weights usually lie in one basin: their average
``(1 - alpha) * A + alpha * B`` can score better than either. ``average`` writes one such
model (``B``'s shard layout, ``A``'s non-weight files); ``choose`` reads the
evaluations of several (``qwen-ui demo eval --json``) and names the one whose weakest
type (the off-grammar refusals counted as a type) is best, the overall accuracy breaking
ties, so a candidate is picked on one set and scored on another.

    python3 -m training.soup average A B ALPHA OUT
    python3 -m training.soup choose NAME=EVAL.json[,EVAL.json...] ...
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

log = logging.getLogger(__name__)
INDEX = "model.safetensors.index.json"


def shards(folder: Path) -> list[str]:
    """The shard files named by ``folder``'s index, in order."""
    index = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    return sorted(set(index["weight_map"].values()))


def load_all(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a sharded checkpoint."""
    tensors: dict[str, torch.Tensor] = {}
    for name in shards(folder):
        tensors.update(load_file(str(folder / name)))
    return tensors


def average(a: Path, b: Path, alpha: float, out: Path) -> None:
    """``(1 - alpha) * a + alpha * b`` into ``out``: ``b``'s shards, ``a``'s other files."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    first = load_all(a)
    out.mkdir(parents=True, exist_ok=True)
    for path in a.iterdir():
        if path.is_file() and not path.name.startswith("model"):
            shutil.copy2(path, out / path.name)
    shutil.copy2(b / INDEX, out / INDEX)
    for name in shards(b):
        part = load_file(str(b / name))
        if set(part) - set(first):
            raise ValueError(f"{name}: tensors missing from {a}: {sorted(set(part) - set(first))}")
        mixed = {
            key: torch.lerp(first[key].float(), value.float(), alpha).to(value.dtype)
            for key, value in part.items()
        }
        save_file(mixed, str(out / name), metadata={"format": "pt"})
    log.info("%s = (1 - %.3f) * %s + %.3f * %s", out, alpha, a, alpha, b)


def weakest(result: dict[str, object]) -> float:
    """The lowest per-type accuracy of one ``demo eval --json`` result."""
    by_kind = result["by_kind"]
    assert isinstance(by_kind, dict)
    return min(float(kind["accuracy"]) for kind in by_kind.values())


def merged(paths: list[Path]) -> dict[str, object]:
    """Several evaluations of one model (e.g. the grammar and the refusals) as one."""
    by_kind: dict[str, object] = {}
    correct = total = 0
    for path in paths:
        result = json.loads(path.read_text(encoding="utf-8"))
        by_kind.update(result["by_kind"])
        correct += int(result["overall"]["correct"])
        total += int(result["overall"]["total"])
    return {"by_kind": by_kind, "overall": {"accuracy": correct / total}}


def choose(candidates: dict[str, list[Path]]) -> str:
    """The candidate whose weakest type scores best; the overall accuracy breaks ties."""

    keys: dict[str, tuple[float, float]] = {}
    for name, paths in candidates.items():
        result = merged(paths)
        overall = result["overall"]
        assert isinstance(overall, dict)
        keys[name] = weakest(result), float(overall["accuracy"])
        log.info("%s: weakest %.4f, overall %.4f", name, *keys[name])
    return max(keys, key=keys.__getitem__)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    avg = sub.add_parser("average", help="write (1 - ALPHA) * A + ALPHA * B")
    avg.add_argument("a", type=Path)
    avg.add_argument("b", type=Path)
    avg.add_argument("alpha", type=float)
    avg.add_argument("out", type=Path)
    pick = sub.add_parser("choose", help="print the best candidate's name")
    pick.add_argument(
        "evals", nargs="+", help="NAME=EVAL.json[,EVAL.json...]: one candidate's evaluations"
    )
    args = p.parse_args(argv)
    if args.command == "average":
        average(args.a, args.b, args.alpha, args.out)
        return 0
    candidates = {}
    for spec in args.evals:
        name, _, files = spec.partition("=")
        candidates[name] = [Path(f) for f in files.split(",")]
    sys.stdout.write(choose(candidates) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
