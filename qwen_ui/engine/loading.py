"""Loading a Qwen-VL checkpoint from a local folder: plain (bf16/fp16) or AutoAWQ.

Plain checkpoints go through ``AutoModelForImageTextToText.from_pretrained``. AWQ
checkpoints are built here: the module tree is created on the meta device, the decoder's
quantized linears become :class:`~qwen_ui.engine.awq.Int4Linear`, every other tensor is
copied from the safetensors files. The vision tower always stays in floating point, whatever
``modules_to_not_convert`` says (published configs say ``["visual"]``, which no longer
matches ``model.visual`` in transformers 5, so trusting it would leave the tower empty).
Nothing here touches the network: paths are local and ``local_files_only=True``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn
from transformers import AutoConfig, AutoModelForImageTextToText

from qwen_ui.engine import awq_format, fused, layouts
from qwen_ui.engine.awq import Int4Linear, awq_settings
from qwen_ui.engine.awq_format import QUANT_SUFFIXES
from qwen_ui.engine.errors import UnsupportedModel
from qwen_ui.engine.prefill import compile_prefill

log = logging.getLogger(__name__)

VISION_PREFIX = "model.visual."


def load_model(
    path: Path,
    device: torch.device,
    dtype: torch.dtype,
    prefill_rows: int = 0,
    fuse_projections: bool = False,
) -> Any:
    """``prefill_rows``: see :meth:`Int4Linear.from_awq`; ``fuse_projections``: see
    :mod:`qwen_ui.engine.fused` (both for AWQ checkpoints only). A layout the engine
    cannot run (:mod:`qwen_ui.engine.layouts`) raises ``UnsupportedCheckpoint`` first."""
    layouts.check_folder(path)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    try:
        awq = awq_settings(config)
    except ValueError as exc:
        raise UnsupportedModel(reason=str(exc)) from exc
    model: Any
    if awq is None:
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=dtype, local_files_only=True
        )
        model.to(device)
    else:
        group, zero_point = awq
        if not zero_point:
            raise UnsupportedModel(reason="AWQ checkpoints without zero points are not supported")
        model = load_awq_model(path, config, group, device, dtype, prefill_rows, fuse_projections)
    model.eval()
    model.requires_grad_(False)
    return model


def load_awq_model(
    path: Path,
    config: Any,
    group: int,
    device: torch.device,
    dtype: torch.dtype,
    prefill_rows: int = 0,
    fuse_projections: bool = False,
) -> Any:
    plain = copy.deepcopy(config)
    del plain.quantization_config
    with torch.device("meta"):
        model: Any = AutoModelForImageTextToText.from_config(  # type: ignore[no-untyped-call]
            plain, dtype=dtype
        )
    tensors = dict(_read_tensors(path))
    names = _target_names(model)
    quantized = _quantized_modules(tensors, names)
    for module_name in quantized:
        model.set_submodule(module_name, nn.Identity())  # placeholder: nothing to allocate
    model.to_empty(device=device)
    loaded = _load_float_tensors(model, tensors, names, quantized, device, dtype)
    groups: list[fused.Group] = []
    if fuse_projections:
        make = partial(
            Int4Linear.from_awq,
            group_size=group,
            device=device,
            dtype=dtype,
            prefill_rows=prefill_rows,
        )
        groups = fused.fuse(model, tensors, quantized, make)
        loaded.update(f"{g.parent}.{g.fused}.{leaf}" for g in groups for leaf in ("weight", "bias"))
    for module_name, ckpt_prefix in quantized.items():
        model.set_submodule(
            module_name,
            _quantized_layer(
                model, module_name, ckpt_prefix, tensors, group, device, dtype, prefill_rows
            ),
        )
        loaded.update(f"{module_name}.{leaf}" for leaf in ("weight", "bias"))
    _finish(model, loaded)
    if device.type == "cuda" and prefill_rows > 0:
        compile_prefill(model)
    _log_int4(model, len(groups))
    return model


def _log_int4(model: nn.Module, fused_groups: int) -> None:
    int4 = [m for m in model.modules() if isinstance(m, Int4Linear)]
    kernel = sum(1 for m in int4 if not m.dequantized)
    log.info(
        "AWQ checkpoint loaded: %d int4 layers (%d on kernels, %d of them fused)",
        len(int4),
        kernel,
        fused_groups,
    )


def _read_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise UnsupportedModel(reason=f"no .safetensors files in {path.name}")
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                yield key, handle.get_tensor(key)


def _target_names(model: nn.Module) -> set[str]:
    names = {name for name, _ in model.named_modules()}
    names |= {name for name, _ in model.named_parameters()}
    names |= {name for name, _ in model.named_buffers()}
    return names


def rename(key: str, names: set[str]) -> str | None:
    """The model name a checkpoint key stands for, or None when it matches nothing."""
    if key in names:
        return key
    candidate = awq_format.to_module_key(key)
    return candidate if candidate in names else None


def _quantized_modules(tensors: dict[str, torch.Tensor], names: set[str]) -> dict[str, str]:
    """Module name → checkpoint prefix, for every module stored as qweight/qzeros/scales."""
    found: dict[str, str] = {}
    for key in tensors:
        prefix, _, leaf = key.rpartition(".")
        if leaf != "qweight":
            continue
        module_name = rename(prefix, names)
        if module_name is None:
            raise UnsupportedModel(reason=f"unexpected quantized tensor {key}")
        found[module_name] = prefix
    return found


def _load_float_tensors(
    model: nn.Module,
    tensors: dict[str, torch.Tensor],
    names: set[str],
    quantized: dict[str, str],
    device: torch.device,
    dtype: torch.dtype,
) -> set[str]:
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    quantized_prefixes = set(quantized.values())
    loaded: set[str] = set()
    for key, tensor in tensors.items():
        prefix, _, leaf = key.rpartition(".")
        if prefix in quantized_prefixes and leaf in (*QUANT_SUFFIXES, "bias"):
            continue
        target = rename(key, names)
        if target is None or target not in state:
            log.debug("ignoring checkpoint tensor %s", key)
            continue
        dest = state[target]
        if dest.shape != tensor.shape:
            raise UnsupportedModel(
                reason=f"{key} has shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}"
            )
        with torch.no_grad():
            dest.copy_(tensor.to(device=device, dtype=dest.dtype))
        loaded.add(target)
    return loaded


def _quantized_layer(
    model: nn.Module,
    module_name: str,
    prefix: str,
    tensors: dict[str, torch.Tensor],
    group: int,
    device: torch.device,
    dtype: torch.dtype,
    prefill_rows: int = 0,
) -> nn.Module:
    qweight, qzeros, scales = (tensors[f"{prefix}.{leaf}"] for leaf in QUANT_SUFFIXES)
    bias = tensors.get(f"{prefix}.bias")
    if module_name.startswith(VISION_PREFIX):  # never keep the vision tower quantized
        weight = awq_format.dequantize(qweight, qzeros, scales, group)
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        with torch.no_grad():
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias.float())
        return linear.to(device=device, dtype=dtype)
    return Int4Linear.from_awq(qweight, qzeros, scales, bias, group, device, dtype, prefill_rows)


def _finish(model: Any, loaded: set[str]) -> None:
    """Recompute non-persistent buffers (rotary tables), tie embeddings, check completeness."""
    for module in model.modules():
        if "RotaryEmbedding" in type(module).__name__:
            model._init_weights(module)
    text_config = model.config.get_text_config()
    tied = bool(getattr(model.config, "tie_word_embeddings", False)) or bool(
        getattr(text_config, "tie_word_embeddings", False)
    )
    if "lm_head.weight" not in loaded and tied:
        model.lm_head.weight = model.get_input_embeddings().weight
        loaded.add("lm_head.weight")
    missing = [name for name, _ in model.named_parameters() if name not in loaded]
    missing += [
        name
        for name, _ in model.named_buffers()
        if name not in loaded and _is_persistent(model, name) and not _is_int4(model, name)
    ]
    if missing:
        raise UnsupportedModel(reason=f"checkpoint lacks {len(missing)} tensors, e.g. {missing[0]}")


def _is_persistent(model: nn.Module, name: str) -> bool:
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name)
    return leaf not in module._non_persistent_buffers_set


def _is_int4(model: nn.Module, name: str) -> bool:
    module_name, _, _ = name.rpartition(".")
    return isinstance(model.get_submodule(module_name), Int4Linear)
