"""Make a trained demo checkpoint's language model deeper within the same size.

    python -m training.grow --init qwen_ui/demo/weights/bf16 --out /tmp/grown \\
        --mlp 768 --insert 4

First each decoder layer's MLP keeps the ``--mlp`` hidden units that matter most on
calibration samples (training seeds, never held out): a unit's mean absolute activation
times the norm of its column of ``down_proj``. Then a decoder layer is inserted at each
``--insert`` index (of the layers before insertion; the layer count there for one at
the end) with its attention output and MLP down projections at zero, so that it adds
nothing to the residual stream: the grown model computes what the pruned one did, and
training then gives it one more step of composition. The checkpoint is the stock
architecture with a new ``num_hidden_layers`` and ``intermediate_size``; its vision
tower is untouched. training/NOTES.md ("Eleventh session") says why depth.
"""

from __future__ import annotations

import argparse
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from qwen_ui.demo import scenes
from training import train

log = logging.getLogger(__name__)

# calibration samples: seeds no training run draws (runs use seed x 10^10 + a few
# million, seeds below 100) and below the held-out ones
CALIBRATION_BASE = 2 * 10**11


def decoder_layers(model: Any) -> list[Any]:
    """The language model's decoder layers (transformers modules, untyped here)."""
    return list(model.model.language_model.layers)


def calibration_batches(n: int, batch_size: int = 16) -> list[train.Batch]:
    """``n`` training-grammar samples of every type, encoded and batched as the training
    does, on the CPU."""
    encode = train.Encoder(train.WEIGHTS)
    rows = [encode(scenes.sample(CALIBRATION_BASE + i)) for i in range(n)]
    cpu = torch.device("cpu")
    return [
        train.to_device(train.collate(rows[i : i + batch_size]), cpu)
        for i in range(0, n, batch_size)
    ]


def mlp_importance(model: Any, batches: Iterable[train.Batch]) -> list[torch.Tensor]:
    """Per decoder layer, per MLP hidden unit: the mean absolute activation entering
    ``down_proj`` over the real tokens, times the norm of the unit's ``down_proj`` column."""
    layers = decoder_layers(model)
    sums = [torch.zeros(layer.mlp.down_proj.in_features) for layer in layers]
    mask: list[torch.Tensor] = []

    def hook(i: int) -> Any:
        def record(_: Any, inputs: tuple[torch.Tensor, ...]) -> None:
            sums[i] += (inputs[0].abs() * mask[0][..., None]).sum((0, 1)).float()

        return record

    handles = [
        layer.mlp.down_proj.register_forward_pre_hook(hook(i)) for i, layer in enumerate(layers)
    ]
    tokens = 0
    try:
        with torch.no_grad():
            for batch in batches:
                mask[:] = [batch["attention_mask"].float()]
                train.forward_logits(model, batch, fast=False, amp=False)
                tokens += int(batch["attention_mask"].sum())
    finally:
        for handle in handles:
            handle.remove()
    columns = [layer.mlp.down_proj.weight.detach().norm(dim=0) for layer in layers]
    return [s / max(1, tokens) * c.float() for s, c in zip(sums, columns, strict=True)]


def _keep(linear: torch.nn.Linear, keep: torch.Tensor, dim: int) -> torch.nn.Linear:
    """``linear`` keeping the ``keep`` outputs (``dim`` 0) or inputs (``dim`` 1)."""
    weight = linear.weight.detach().index_select(dim, keep)
    out = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=linear.bias is not None)
    out = out.to(weight.dtype)
    with torch.no_grad():
        out.weight.copy_(weight)
        if linear.bias is not None:
            out.bias.copy_(linear.bias if dim == 1 else linear.bias[keep])
    return out


def prune_mlp(model: Any, importance: list[torch.Tensor], width: int) -> None:
    """Keep the ``width`` most important hidden units of every decoder layer's MLP."""
    for layer, score in zip(decoder_layers(model), importance, strict=True):
        keep = score.topk(width).indices.sort().values
        mlp = layer.mlp
        mlp.gate_proj = _keep(mlp.gate_proj, keep, 0)
        mlp.up_proj = _keep(mlp.up_proj, keep, 0)
        mlp.down_proj = _keep(mlp.down_proj, keep, 1)
        mlp.intermediate_size = width
    model.config.text_config.intermediate_size = width


def identity_layer(model: Any) -> Any:
    """A new decoder layer that adds nothing to the residual stream (zero output
    projections), of the model's own layer class and config."""
    layers = decoder_layers(model)
    text = model.config.text_config
    layer = type(layers[0])(text, layer_idx=0)
    layer = layer.to(next(model.parameters()).dtype)
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    return layer


def insert_layers(model: Any, at: list[int]) -> None:
    """Insert an identity layer (:func:`identity_layer`) at each index of ``at`` (indices
    of the layers before any insertion), then renumber the layers for the cache."""
    layers = decoder_layers(model)
    for index in sorted(at, reverse=True):
        if not 0 <= index <= len(layers):
            raise ValueError(f"no layer index {index} in 0..{len(layers)}")
        layers.insert(index, identity_layer(model))
    model.model.language_model.layers = torch.nn.ModuleList(layers)
    for i, layer in enumerate(layers):
        layer.self_attn.layer_idx = i
    text = model.config.text_config
    text.num_hidden_layers = len(layers)
    text.layer_types = ["full_attention"] * len(layers)


def grow(init: Path, out: Path, mlp_width: int, insert: list[int] | None, samples: int) -> Any:
    """The grown checkpoint of ``init`` as a complete revision in ``out/model``;
    ``insert`` None: one layer at the end."""
    model = train.build_model(torch.device("cpu"), init)
    model.eval()
    layers = decoder_layers(model)
    if mlp_width < layers[0].mlp.down_proj.in_features:
        prune_mlp(model, mlp_importance(model, calibration_batches(samples)), mlp_width)
    insert_layers(model, [len(layers)] if insert is None else insert)
    train.save(model, out, 0)
    for f in init.iterdir():  # the processor files: a complete revision folder
        if f.is_file() and not f.name.startswith(("model", "config", "generation_config")):
            shutil.copy2(f, out / "model" / f.name)
    return model


def held_out_score(model: Any, n: int) -> dict[str, float]:
    """Teacher-forced exact match on the first ``n`` questions of held-out set 7, as the
    training scores itself (``train.evaluate``): overall and per type."""
    cpu = torch.device("cpu")
    batches = [train.to_device(b, cpu) for b in train.held_out_batches(train.WEIGHTS, n, 64)]
    attention = train.BatchedAttention(model)
    attention.enable(True)
    try:
        acc: dict[str, float] = train.evaluate(model, batches, cpu, attention)["acc"]
    finally:
        attention.enable(False)
    return {k: v for k, v in acc.items() if ":" not in k and k not in scenes.LANGS}


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--init", type=Path, default=train.WEIGHTS)
    p.add_argument("--out", type=Path, required=True, help="the checkpoint goes to OUT/model")
    p.add_argument("--mlp", type=int, default=768, help="MLP hidden units kept per layer")
    p.add_argument(
        "--insert", type=int, action="append", help="a layer index (repeatable; default: the end)"
    )
    p.add_argument("--samples", type=int, default=512, help="calibration samples")
    p.add_argument(
        "--check",
        type=int,
        default=0,
        help="also score --init and the grown model on this many held-out questions of set 7",
    )
    args = p.parse_args(argv)
    if args.mlp % 128:
        p.error("--mlp must be a multiple of 128 (int4 group-128 packing)")
    model = grow(args.init, args.out, args.mlp, args.insert, args.samples)
    log.info("params %d", sum(p.numel() for p in model.parameters()))
    if args.check:
        before = train.build_model(torch.device("cpu"), args.init)
        log.info("held-out, --init: %s", held_out_score(before, args.check))
        log.info("held-out, grown: %s", held_out_score(model, args.check))


if __name__ == "__main__":
    main()
