"""Which checkpoint layouts the local engine runs, decided from the files alone.

``qwen-ui models install`` / ``adopt`` (and so ``scripts/cache_model.sh``) check a folder
before copying it into the store, ``qwen-ui models fetch`` checks the repository's
``config.json`` before downloading the weights, and the loader checks again (a store written
by an older version): a checkpoint the engine cannot run is refused with the reason and
what to install instead, at install time rather than at the first question.

Accepted (docs/store.md, "Checkpoint layouts"):

* architectures: Qwen2-VL, Qwen2.5-VL and Qwen3-VL dense models
  (``Qwen2VLForConditionalGeneration``, ``Qwen2_5_VLForConditionalGeneration``,
  ``Qwen3VLForConditionalGeneration``);
* weights in ``*.safetensors`` files;
* unquantized (bf16, fp16, fp32), or AutoAWQ GEMM: ``quant_method: awq``, ``bits: 4``,
  ``version: gemm``, ``zero_point: true``, ``qweight`` int32 ``[in, out / 8]`` beside
  ``scales`` ``[in / group, out]`` (checked in the safetensors headers).

Refused: other architectures (Qwen3-VL MoE included), ``.bin`` weights, FP8, GPTQ,
compressed-tensors (llm-compressor exports, AWQ-made or not), bitsandbytes, AWQ GEMV /
Marlin / ExLlama packings, AWQ without zero points. No torch import: the CLI stays fast.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_ui.engine.errors import UnsupportedCheckpoint

ARCHITECTURES = {
    "qwen2_vl": ("Qwen2-VL", "Qwen2VLForConditionalGeneration"),
    "qwen2_5_vl": ("Qwen2.5-VL", "Qwen2_5_VLForConditionalGeneration"),
    "qwen3_vl": ("Qwen3-VL", "Qwen3VLForConditionalGeneration"),
}
FLOAT_DTYPES = ("bfloat16", "float16", "float32")
INSTEAD = (
    "install an unquantized (bf16) checkpoint such as Qwen/Qwen3-VL-8B-Instruct or "
    "Qwen/Qwen2.5-VL-7B-Instruct, or an AutoAWQ GEMM one such as "
    "Qwen/Qwen2.5-VL-7B-Instruct-AWQ; or serve this one through a remote engine "
    "(vLLM, SGLang: docs/remote-engines.md)"
)
REFUSED_METHODS = {
    "fp8": "FP8 weights",
    "gptq": "GPTQ weights",
    "compressed-tensors": "compressed-tensors (llm-compressor) weights",
    "bitsandbytes": "bitsandbytes weights",
}
HEADER_LIMIT = 100 * 1024 * 1024  # a safetensors JSON header larger than this is damage


@dataclass(frozen=True)
class Layout:
    """What a checkpoint is, in words for the CLI (``Qwen3-VL, AutoAWQ GEMM int4 g128``)."""

    family: str
    model_type: str
    quantization: str  # "none" | "awq"
    group_size: int | None = None

    def describe(self) -> str:
        if self.quantization == "awq":
            return f"{self.family}, AutoAWQ GEMM int4, group {self.group_size}"
        return f"{self.family}, unquantized"


def check_folder(path: Path) -> Layout:
    """The layout of the checkpoint in ``path``, or :class:`UnsupportedCheckpoint`."""
    config = read_config(path)
    layout = check_config(config)
    if not any(path.glob("*.safetensors")):
        found = sorted(p.name for p in path.glob("*.bin"))[:1] or ["no weight files"]
        raise UnsupportedCheckpoint(
            reason=f"the weights are not in .safetensors files (found: {found[0]}); "
            "the engine loads safetensors only"
        )
    if layout.quantization == "awq":
        check_awq_tensors(path, layout.group_size or 0)
    return layout


def read_config(path: Path) -> dict[str, Any]:
    file = path / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnsupportedCheckpoint(
            reason=f"{path} has no config.json: not a transformers checkpoint"
        ) from None
    except (OSError, ValueError) as exc:
        raise UnsupportedCheckpoint(reason=f"config.json cannot be read: {exc}") from None
    if not isinstance(config, dict):
        raise UnsupportedCheckpoint(reason="config.json is not a JSON object")
    return config


def check_config(config: Mapping[str, Any]) -> Layout:
    """The layout ``config`` (a parsed ``config.json``) declares, or
    :class:`UnsupportedCheckpoint`."""
    model_type = str(config.get("model_type", ""))
    if model_type not in ARCHITECTURES:
        raise UnsupportedCheckpoint(reason=_architecture_reason(model_type, config))
    family, architecture = ARCHITECTURES[model_type]
    declared = config.get("architectures") or [architecture]
    if list(declared) != [architecture]:
        raise UnsupportedCheckpoint(
            reason=f"architecture {', '.join(map(str, declared))} is not {architecture}"
        )
    quant = config.get("quantization_config")
    if quant is None:
        dtype = str(config.get("dtype") or config.get("torch_dtype") or "bfloat16")
        if dtype not in FLOAT_DTYPES:
            raise UnsupportedCheckpoint(reason=f"weights of dtype {dtype} are not supported")
        return Layout(family, model_type, "none")
    if not isinstance(quant, Mapping):
        raise UnsupportedCheckpoint(reason="quantization_config is not a JSON object")
    try:
        group = _awq_group(quant)
    except (TypeError, ValueError) as exc:  # e.g. "bits": "four"
        raise UnsupportedCheckpoint(reason=f"quantization_config cannot be read: {exc}") from None
    return Layout(family, model_type, "awq", group)


def _architecture_reason(model_type: str, config: Mapping[str, Any]) -> str:
    named = model_type or ", ".join(map(str, config.get("architectures") or [])) or "unknown"
    families = ", ".join(f for f, _ in ARCHITECTURES.values())
    if model_type.endswith("_moe"):
        return f"{named} is a mixture-of-experts model; the engine runs dense {families} models"
    return f"architecture {named} is not one the engine runs ({families} dense models)"


def _awq_group(quant: Mapping[str, Any]) -> int:
    method = str(quant.get("quant_method", "")).lower()
    if method != "awq":
        what = REFUSED_METHODS.get(method, f"quantization method {method or 'unknown'}")
        raise UnsupportedCheckpoint(
            reason=f"{what} are not supported by the local engine; {INSTEAD}"
        )
    bits = int(quant.get("bits", quant.get("w_bit", 4)))
    version = str(quant.get("version", "gemm")).lower()
    if bits != 4 or version != "gemm":
        raise UnsupportedCheckpoint(
            reason=f"AWQ {bits}-bit {version.upper()} packing: only 4-bit AutoAWQ GEMM "
            f"checkpoints are supported; {INSTEAD}"
        )
    if not bool(quant.get("zero_point", True)):
        raise UnsupportedCheckpoint(reason="AWQ checkpoints without zero points are not supported")
    group = int(quant.get("group_size", quant.get("q_group_size", 128)))
    if group <= 0:
        raise UnsupportedCheckpoint(reason=f"AWQ group size {group} is not supported")
    return group


# --- AutoAWQ GEMM tensors -------------------------------------------------------------


def check_awq_tensors(path: Path, group: int) -> None:
    """Every ``qweight`` is int32 ``[in, out / 8]`` with ``scales`` ``[in / group, out]`` and
    ``qzeros`` int32 ``[in / group, out / 8]`` beside it (GEMM packing; GEMV packs the other
    way round), read from the safetensors headers without loading any tensor."""
    headers = dict(_tensor_headers(path))
    quantized = [k[: -len(".qweight")] for k in headers if k.endswith(".qweight")]
    if not quantized:
        raise UnsupportedCheckpoint(
            reason="config.json says AWQ but no .qweight tensors are in the safetensors files"
        )
    for prefix in quantized:
        _check_awq_linear(headers, prefix, group)


def _check_awq_linear(headers: Mapping[str, Mapping[str, Any]], prefix: str, group: int) -> None:
    parts = {leaf: headers.get(f"{prefix}.{leaf}") for leaf in ("qweight", "qzeros", "scales")}
    missing = [leaf for leaf, h in parts.items() if h is None]
    if missing:
        raise UnsupportedCheckpoint(reason=f"{prefix} has qweight but no {missing[0]}")
    qweight, qzeros, scales = (parts[leaf] or {} for leaf in ("qweight", "qzeros", "scales"))
    q_shape, z_shape, s_shape = (list(h.get("shape", [])) for h in (qweight, qzeros, scales))
    ok = (
        qweight.get("dtype") == "I32"
        and qzeros.get("dtype") == "I32"
        and len(q_shape) == len(s_shape) == len(z_shape) == 2
        and s_shape[0] * group == q_shape[0]
        and s_shape[1] == q_shape[1] * 8
        and z_shape == [s_shape[0], q_shape[1]]
    )
    if not ok:
        raise UnsupportedCheckpoint(
            reason=f"{prefix} is not AutoAWQ GEMM packing with group {group} (qweight "
            f"{qweight.get('dtype')} {q_shape}, qzeros {z_shape}, scales {s_shape}); {INSTEAD}"
        )


def _tensor_headers(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for file in sorted(path.glob("*.safetensors")):
        for name, entry in _read_header(file).items():
            if name != "__metadata__" and isinstance(entry, Mapping):
                yield name, entry


def _read_header(file: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (8 bytes little-endian length, then JSON)."""
    try:
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > HEADER_LIMIT:
                raise ValueError(f"header of {length} bytes")
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error) as exc:
        raise UnsupportedCheckpoint(
            reason=f"{file.name} is not a safetensors file ({exc})"
        ) from None
    if not isinstance(header, dict):
        raise UnsupportedCheckpoint(reason=f"{file.name} is not a safetensors file")
    return header
