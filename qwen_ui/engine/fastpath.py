"""What the ``auto`` settings of the decode path mean on a device.

On CUDA ``auto`` is the fastest combination measured on the H200 (docs/BENCHMARKS.md):
a static KV cache, the decode step compiled with CUDA graphs, prefills of up to
:data:`CUDA_PREFILL_GRAPH_ROWS` tokens replayed from recorded graphs, and the model loaded
and warmed up at start-up so that no user's question is the one that compiles. On the CPU
``auto`` is the safe path: a dynamic cache grown per request, nothing compiled or recorded,
the model loaded on the first question. An explicit setting always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from qwen_ui.engine.generate import DecodeMode, decode_mode_for
from qwen_ui.settings import Settings

# The prefill graphs' longest bucket on CUDA: covers a question with up to three
# 1024x768 images (about 1,000 tokens each) and their history.
CUDA_PREFILL_GRAPH_ROWS = 4096


@dataclass(frozen=True)
class FastPath:
    """The decode path's settings, resolved for one device."""

    decode_mode: DecodeMode
    compile_decode: bool  # decode steps compiled / replayed from CUDA graphs (CUDA only)
    prefill_graph_rows: int  # longest prefill replayed from recorded graphs (0: none)
    preload: bool  # load the model and answer the warm-up question at start-up


def fast_path(settings: Settings, device_type: str) -> FastPath:
    """The settings' decode path on ``device_type`` ("cuda" or "cpu"), ``auto`` resolved.
    Compiled or recorded steps need CUDA, whatever their own setting; recorded prefills
    also a static cache (the one-request loop compiles its step only with one, too)."""
    cuda = device_type == "cuda"
    mode = decode_mode_for(settings.decode_mode, device_type)
    static = cuda and mode == "static"
    return FastPath(
        decode_mode=mode,
        compile_decode=cuda and _on(settings.compile_decode, True),
        prefill_graph_rows=_rows(settings.prefill_graph_rows) if static else 0,
        preload=_on(settings.preload, cuda),
    )


def _on(value: bool | Literal["auto"], auto: bool) -> bool:
    return auto if value == "auto" else bool(value)


def _rows(value: int | Literal["auto"]) -> int:
    return CUDA_PREFILL_GRAPH_ROWS if value == "auto" else int(value)
