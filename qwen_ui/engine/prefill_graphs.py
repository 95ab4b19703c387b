"""Graph-captured prefills: the language model's pass over a prompt, replayed from a CUDA
graph recorded once per prompt-length bucket.

An eager prefill is launched by the host kernel by kernel: about 800 kernels and 225
compiled-function calls for one 1024x768 image on the 7B architecture, 32 ms of device time
that the host needs 40 to 75 ms to launch on the H200's hosts (bench/README.md, "Where
time to first token goes"), and a short text prompt waits about as long. A replayed graph
is one launch. The prompt is padded on the right to a multiple of :data:`BUCKET` rows:
attention is causal, so the real rows never see the padding, and only the last real row's
logits are computed. The graph writes the prompt's keys and values into fixed staging
buffers (:class:`StagingLayer`), which are then copied into the request's static cache,
whose addresses change from request to request.

Graphs share one memory pool (they never run at the same time and their outputs are read
before the next replay), so the pool holds the transients of the largest bucket recorded;
admission keeps that and the staging buffers out of the request budget
(:func:`qwen_ui.admission.budget.graph_reserve`). A bucket is recorded the first time a
prompt of its length arrives, after one eager pass on a side stream that compiles and
autotunes what the capture will record. Qwen3-VL's DeepStack features go in as dense
per-layer additions written into a fixed buffer like the embeddings
(:mod:`qwen_ui.engine.qwen3`); models with sliding-window layers take the eager prefill.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from transformers.cache_utils import Cache, DynamicLayer, StaticCache

from qwen_ui.engine import qwen3
from qwen_ui.engine.prefill import language_model

if TYPE_CHECKING:
    from qwen_ui.engine.generate import Prompt

log = logging.getLogger(__name__)

BUCKET = 64  # prompt rows are padded up to a multiple of this


def bucket_rows(length: int, bucket: int = BUCKET) -> int:
    """The padded row count of a prompt of ``length`` tokens."""
    return max(bucket, -(-length // bucket) * bucket)


class StagingLayer(DynamicLayer):  # type: ignore[misc]
    """One decoder layer's cache during a recorded prefill: the prompt's keys and values
    go into fixed buffers of ``rows`` positions (allocated on the first, eager, pass) and
    attention gets the new ones as they are (the prefill starts from an empty cache)."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows
        self.staged: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.staged is None:
            self.staged = (_buffer(key_states, self.rows), _buffer(value_states, self.rows))
        n = key_states.shape[-2]
        self.staged[0][:, :, :n].copy_(key_states)
        self.staged[1][:, :, :n].copy_(value_states)
        return key_states, value_states


def _buffer(like: torch.Tensor, rows: int) -> torch.Tensor:
    batch, heads, _, dim = like.shape
    return torch.zeros((batch, heads, rows, dim), dtype=like.dtype, device=like.device)


class PrefillGraphs:
    """A model's recorded prefills, for prompts of up to ``max_rows`` tokens; owned by the
    worker thread beside its :class:`~qwen_ui.engine.generate.CachePool`.

    ``record=False`` runs the same padded pass through the same buffers without a graph:
    the CPU's path, where the tests check everything but the capture itself."""

    def __init__(self, model: Any, max_rows: int, record: bool | None = None) -> None:
        self.model = model
        self.language: Any = language_model(model)
        self.max_rows = bucket_rows(max_rows)
        self.record = self.model.device.type == "cuda" if record is None else record
        config: Any = self.language.config
        self.usable = all(t == "full_attention" for t in getattr(config, "layer_types", None) or [])
        self.layers = [StagingLayer(self.max_rows) for _ in range(config.num_hidden_layers)]
        self.deepstack = qwen3.deepstack_layers(model)  # 0 but for Qwen3-VL
        if self.deepstack:
            qwen3.install_dense_deepstack(self.language)
        self._dense: torch.Tensor | None = None  # DeepStack features, [layers, 1, rows, hidden]
        self._pool: Any = None  # the graphs' shared memory pool, made on the first recording
        self._replays: dict[int, Callable[[], torch.Tensor]] = {}
        self._inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @property
    def buckets(self) -> list[int]:
        """The row counts recorded so far."""
        return sorted(self._replays)

    def fits(self, prompt: Prompt) -> bool:
        deepstack_ok = not prompt.deepstack or len(prompt.deepstack[0]) == self.deepstack
        return self.usable and deepstack_ok and prompt.length <= self.max_rows

    def prefill(self, prompt: Prompt, positions: torch.Tensor, cache: StaticCache) -> torch.Tensor:
        """The logits of the prompt's last position ``[1, vocab]``; its keys and values end
        up in ``cache`` (positions ``0 .. length - 1``), as an eager prefill leaves them."""
        logits = self.replay(prompt, positions)
        self._stage_into(cache, prompt.length)
        return logits

    def replay(self, prompt: Prompt, positions: torch.Tensor) -> torch.Tensor:
        """The logits of the prompt's last position ``[1, vocab]``; its keys and values stay
        in the staging buffers (:meth:`staged`) until the next replay."""
        self._write_inputs(prompt, positions)
        rows = bucket_rows(prompt.length)
        if rows not in self._replays:
            self._replays[rows] = self._recorded(rows)
            log.info("prefill graph recorded for %d rows", rows)
        return self._replays[rows]()

    def staged(self, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The last replay's keys and values of positions ``0 .. length - 1``, per layer
        ``[1, heads, length, dim]`` (views of the staging buffers)."""
        out = []
        for staging in self.layers:
            assert staging.staged is not None
            keys, values = staging.staged
            out.append((keys[:, :, :length], values[:, :, :length]))
        return out

    # --- inputs -------------------------------------------------------------------------
    def _write_inputs(self, prompt: Prompt, positions: torch.Tensor) -> None:
        embeds, rope, last = self._buffers()
        length = prompt.length
        embeds[:, :length].copy_(self._embeddings(prompt))
        rope[:, :, :length].copy_(positions)
        last.fill_(length - 1)
        if self.deepstack:
            qwen3.scatter_features(prompt, self._dense_buffer())

    def _buffers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._inputs is None:
            table = self.language.embed_tokens.weight
            rows, device = self.max_rows, table.device
            self._inputs = (
                torch.zeros((1, rows, table.shape[1]), dtype=table.dtype, device=device),
                torch.zeros((3, 1, rows), dtype=torch.long, device=device),
                torch.zeros((1,), dtype=torch.long, device=device),
            )
        return self._inputs

    def _dense_buffer(self) -> torch.Tensor:
        if self._dense is None:
            table = self.language.embed_tokens.weight
            self._dense = qwen3.dense_buffer(self.deepstack, self.max_rows, table)
        return self._dense

    def _embeddings(self, prompt: Prompt) -> torch.Tensor:
        """The prompt's input embeddings: the token table's rows, with the image features
        in place of the image tokens (as the model's own forward scatters them)."""
        embeds = self.language.embed_tokens(prompt.input_ids)
        if not prompt.image_features:
            return embeds  # type: ignore[no-any-return]
        features = torch.cat(prompt.image_features).to(embeds.device, embeds.dtype)
        image = (prompt.mm_token_type_ids == 1).to(embeds.device).unsqueeze(-1)
        return embeds.masked_scatter(image, features)  # type: ignore[no-any-return]

    # --- the pass -----------------------------------------------------------------------
    def _forward(self, rows: int) -> torch.Tensor:
        embeds, rope, last = self._buffers()
        extra: dict[str, Any] = {}
        if self.deepstack:  # every row gets its layer's features: zeros but at images
            extra["deepstack_visual_embeds"] = qwen3.layer_features(self._dense_buffer(), rows)
        out = self.language(
            inputs_embeds=embeds[:, :rows],
            position_ids=rope[:, :, :rows],
            cache=Cache(layers=list(self.layers)),
            use_cache=True,
            **extra,
        )
        hidden = out.last_hidden_state.index_select(1, last)
        return self.model.lm_head(hidden)[:, -1, :]  # type: ignore[no-any-return]

    def _recorded(self, rows: int) -> Callable[[], torch.Tensor]:
        """The replay of ``rows``'s graph; the padded pass run eagerly where recording is
        off, or fails: then this prompt takes that pass and later ones the model's own
        prefill (:meth:`fits` says no from here on; the log says why, once)."""
        if self.record:
            try:
                return self._capture(rows)
            except Exception:  # e.g. a kernel that cannot be captured: the eager pass is right
                log.exception("recording the prefill graph failed; prefills run eagerly")
                self.record = self.usable = False
        return lambda: self._forward(rows)

    def _capture(self, rows: int) -> Callable[[], torch.Tensor]:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compiles, autotunes and allocates outside the capture
            self._forward(rows)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's device work (the event loop's) does not void it
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            logits = self._forward(rows)

        def replay() -> torch.Tensor:
            graph.replay()
            return logits

        return replay

    # --- into the request's cache -------------------------------------------------------
    def _stage_into(self, cache: StaticCache, length: int) -> None:
        """Copy positions ``0 .. length - 1`` of the staged keys and values into ``cache``
        and set its length (the padding rows stay behind)."""
        targets: list[torch.Tensor] = []
        sources: list[torch.Tensor] = []
        for layer, staging in zip(cache.layers, self.layers, strict=True):
            assert staging.staged is not None
            keys, values = staging.staged
            if not layer.is_initialized:
                layer.lazy_initialization(keys[:, :, :1], values[:, :, :1])
            targets += [layer.keys[:, :, :length], layer.values[:, :, :length]]
            sources += [keys[:, :, :length], values[:, :, :length]]
        torch._foreach_copy_(targets, sources)
        lengths = [layer.cumulative_length for layer in cache.layers]
        torch._foreach_zero_(lengths)
        torch._foreach_add_(lengths, length)
