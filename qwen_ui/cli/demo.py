"""``qwen-ui demo eval``: held-out accuracy of the shapes demo model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from qwen_ui.demo import scenes


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo",
        help="the shapes demo model",
        description="The small shapes demo model shipped in the package (docs/demo-model.md).",
    )
    cmds = parser.add_subparsers(dest="demo_command", required=True, metavar="COMMAND")
    p = cmds.add_parser(
        "eval",
        help="held-out accuracy, overall and per question type and language",
        description="Generate held-out questions (seeds never used in training, balanced over "
        "question types and languages), answer them greedily and print the accuracy.",
    )
    p.add_argument("--n", type=int, default=2000, help="number of questions (default 2000)")
    p.add_argument("--revision", choices=("bf16", "awq"), default="bf16")
    p.add_argument("--seed", type=int, default=0, help="held-out set number (default 0)")
    p.add_argument(
        "--kind",
        action="append",
        choices=scenes.ALL_KINDS,
        default=None,
        help="ask only questions of this type (repeatable; default the grammar's eight), "
        "e.g. a larger sample of one type than --n spread over all eight gives, or "
        "grounding (scored by IoU) and off_grammar (the refusal, exact)",
    )
    p.add_argument(
        "--vision-ids",
        choices=("model", "on", "off"),
        default="model",
        help="label each image in the prompt with its number ('Picture 1: '): as the model's "
        "qwen_ui.json declares (default, what the engine does), or forced on or off",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--batch-size", type=int, default=32, help="questions per generate call")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the model answers (default cpu); fp32 on either",
    )
    p.add_argument(
        "--weights",
        type=Path,
        default=None,
        metavar="DIR",
        help="evaluate the checkpoint in DIR (of the --revision's format, with its "
        "processor files) instead of the store's or the package's copy",
    )
    p.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="store root (default: QWEN_UI_MODEL_DIR, else QWEN_UI_HOME/models); the "
        "package's own copy is used when the store does not have the demo installed",
    )
    p.set_defaults(func=cmd_eval)


def model_path(model_dir: Path | None, revision: str) -> Path:
    """The demo's snapshot in the store, else the copy shipped in the package."""
    from qwen_ui.demo.install import weights_dir
    from qwen_ui.settings import DEMO_MODEL_ID, Settings
    from qwen_ui.store import ModelStore

    store = ModelStore(model_dir if model_dir is not None else Settings().model_path)
    if store.is_installed(DEMO_MODEL_ID, revision):
        return Path(store.resolve(DEMO_MODEL_ID, revision).path)
    return weights_dir(revision)


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    from qwen_ui.demo.answer import load_bf16, load_processor, make_answer_fn
    from qwen_ui.demo.awq_ref import load_awq_dequantized
    from qwen_ui.demo.evaluate import evaluate
    from qwen_ui.engine.facts import read_declared

    path = args.weights or model_path(args.model_dir, args.revision)
    dtype = torch.float32  # the CPU runs fp32 several times faster than bf16
    load = load_awq_dequantized if args.revision == "awq" else load_bf16
    model = load(path, dtype).to(args.device)
    labels = (
        read_declared(path).vision_ids if args.vision_ids == "model" else args.vision_ids == "on"
    )
    answer = make_answer_fn(model, load_processor(path), labels)

    def progress(done: int, total: int) -> None:
        if not args.json:
            print(f"\r{done}/{total}", end="", file=sys.stderr, flush=True)

    kinds = tuple(k for k in scenes.ALL_KINDS if k in args.kind) if args.kind else scenes.KINDS
    report = evaluate(
        answer, n=args.n, seed=args.seed, batch_size=args.batch_size, progress=progress, kinds=kinds
    )
    result = report.to_dict() | {"revision": args.revision, "path": str(path)}
    result["vision_ids"] = labels
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(file=sys.stderr)
        print(format_report(result))
    return 0


def format_report(result: dict[str, Any]) -> str:
    def line(name: str, row: dict[str, Any]) -> str:
        return f"  {name:<14} {100 * row['accuracy']:6.2f}%  ({row['correct']}/{row['total']})"

    lines = [
        f"demo model {result['revision']} ({result['path']}), {result['n']} held-out questions, "
        f"set {result['seed']}, {result['seconds']} s"
        + (", images labelled" if result.get("vision_ids") else ""),
        line("overall", result["overall"]),
        "by question type:",
        *(line(k, v) for k, v in result["by_kind"].items()),
        "by language:",
        *(line(k, v) for k, v in result["by_lang"].items()),
        "yes/no questions by right answer:",
        *(line(k, v) for k, v in result["by_yes_no"].items()),
    ]
    missing = [k for k in result["kinds"] if k not in result["by_kind"]]
    if missing:
        lines.append(f"(no questions of type {', '.join(missing)}: raise --n)")
    return "\n".join(lines)
