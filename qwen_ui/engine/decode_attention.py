"""One query token's attention over grouped K/V heads in two Triton kernels (CUDA): the
compiled decode step's attention (:func:`qwen_ui.engine.fused.step_attention`).

Split-KV ("flash-decoding"): the first kernel's programs each take one K/V head of one
sequence, with that head's query heads as the rows of a ``tl.dot`` tile (padded to
:data:`ROWS`), and one share of the cache length, a few blocks of :data:`BLOCK_N`
positions. Each scores its blocks in float32 (``q . k * scale``, the mask applied),
keeps a running maximum and sum of the exponentials (online softmax) and accumulates the
exponentials, rounded to V's dtype as flash attention rounds them, times V in float32;
it writes that share's output, maximum and sum to float32 scratch. The second kernel
combines the shares of every query head into the output. The shares are chosen from the
shapes alone (:func:`plan`: a few programs per multiprocessor of the device), so a
step recorded as a CUDA graph replays the same launches.

:func:`attention` runs it as one operator (``torch.ops.qwen_ui.decode_attention``) that
``torch.compile`` calls as it is; :func:`fits` says which inputs it takes.
``tests/engine/test_decode_attention.py`` compares it with
:func:`~qwen_ui.engine.fused.decode_attention` and SDPA over repeated heads.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

ROWS = 16  # query heads per K/V head, padded: tl.dot's smallest tile
BLOCK_N = 64  # cache positions per block
DIMS = (16, 32, 64, 128, 256)  # head dims the kernels take
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# programs a launch aims for: two per multiprocessor (on the H200, at 8 and 16 sequences of
# 1,536 positions a little faster than one), few off CUDA (Triton's interpreter)
PROGRAMS_PER_PROCESSOR = 2
INTERPRETER_PROGRAMS = 8
NO_MASK, KEEP_MASK, ADDED_MASK = 0, 1, 2


@triton.jit  # type: ignore[untyped-decorator]
def _shares(  # type: ignore[no-untyped-def]
    q,
    k,
    v,
    mask,
    part_out,
    part_max,
    part_sum,
    q_batch,
    q_head,
    k_batch,
    k_head,
    k_pos,
    v_batch,
    v_head,
    v_pos,
    mask_batch,
    mask_pos,
    kv_heads,
    length,
    per_share,
    scale,
    GROUP: tl.constexpr,
    ROWS: tl.constexpr,
    DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASK: tl.constexpr,
    IEEE: tl.constexpr,
):
    """One K/V head of one sequence over ``per_share`` blocks of positions: the share's
    unnormalized output, running maximum and sum of its query rows."""
    head = tl.program_id(0)  # sequence * kv_heads + K/V head
    share = tl.program_id(1)
    shares = tl.num_programs(1)
    b = (head // kv_heads).to(tl.int64)
    g = (head % kv_heads).to(tl.int64)
    r = tl.arange(0, ROWS)
    d = tl.arange(0, DIM)
    rows = r < GROUP
    at = q + b * q_batch + (g * GROUP + r)[:, None] * q_head + d[None, :]
    query = tl.load(at, mask=rows[:, None], other=0.0)
    keys = k + b * k_batch + g * k_head
    values = v + b * v_batch + g * v_head
    top = tl.full([ROWS], float("-inf"), tl.float32)
    total = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, DIM], tl.float32)
    first = share * per_share * BLOCK_N
    for i in range(per_share):
        n = first + i * BLOCK_N + tl.arange(0, BLOCK_N)
        inside = n < length
        key = tl.load(keys + n[:, None] * k_pos + d[None, :], mask=inside[:, None], other=0.0)
        value = tl.load(values + n[:, None] * v_pos + d[None, :], mask=inside[:, None], other=0.0)
        if MASK == 1:
            keep = tl.load(mask + b * mask_batch + n * mask_pos, mask=inside, other=0)
            inside = inside & (keep != 0)
        if MASK == 2:
            added = tl.load(mask + b * mask_batch + n * mask_pos, mask=inside, other=0.0)
        if IEEE:
            s = tl.dot(query, tl.trans(key), input_precision="ieee") * scale
        else:
            s = tl.dot(query, tl.trans(key)) * scale
        if MASK == 2:
            s = s + added.to(tl.float32)[None, :]
        s = tl.where(inside[None, :], s, float("-inf"))
        new_top = tl.maximum(top, tl.max(s, 1))
        base = tl.where(new_top == float("-inf"), 0.0, new_top)  # all masked so far: 0s
        p = tl.exp(s - base[:, None])
        alpha = tl.exp(top - base)
        total = total * alpha + tl.sum(p, 1)
        if IEEE:
            part = tl.dot(p.to(value.dtype), value, input_precision="ieee")
        else:
            part = tl.dot(p.to(value.dtype), value)
        acc = acc * alpha[:, None] + part
        top = new_top
    slot = (head * shares + share) * GROUP + r
    tl.store(part_out + slot[:, None] * DIM + d[None, :], acc, mask=rows[:, None])
    tl.store(part_max + slot, top, mask=rows)
    tl.store(part_sum + slot, total, mask=rows)


@triton.jit  # type: ignore[untyped-decorator]
def _combine(  # type: ignore[no-untyped-def]
    part_out,
    part_max,
    part_sum,
    out,
    heads,
    kv_heads,
    shares,
    GROUP: tl.constexpr,
    DIM: tl.constexpr,
    SHARES: tl.constexpr,
):
    """One query head of one sequence: its shares' outputs weighted by their maxima,
    over the sum of exponentials (zeros where every position is masked)."""
    row = tl.program_id(0)  # sequence * heads + query head
    b = row // heads
    h = row % heads
    s = tl.arange(0, SHARES)
    d = tl.arange(0, DIM)
    ok = s < shares
    slot = ((b * kv_heads + h // GROUP) * shares + s) * GROUP + h % GROUP
    tops = tl.load(part_max + slot, mask=ok, other=float("-inf"))
    totals = tl.load(part_sum + slot, mask=ok, other=0.0)
    outs = tl.load(part_out + slot[:, None] * DIM + d[None, :], mask=ok[:, None], other=0.0)
    top = tl.max(tops, 0)
    weight = tl.exp(tops - tl.where(top == float("-inf"), 0.0, top))
    total = tl.sum(weight * totals, 0)
    acc = tl.sum(weight[:, None] * outs, 0)
    result = acc / tl.where(total > 0.0, total, 1.0)
    tl.store(out + row.to(tl.int64) * DIM + d, result.to(out.dtype.element_ty))


def fits(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether :func:`attention` takes these inputs: CUDA tensors of one dtype (bf16, fp16
    or fp32), one query token, a head dim in :data:`DIMS`, at most :data:`ROWS` query heads
    per K/V head, and ``mask`` None or (batch or 1, 1, 1, the cache length or more), bool
    or floating."""
    batch, heads, tokens, dim = q.shape
    kv_heads, length = k.shape[1], k.shape[2]
    return (
        q.is_cuda
        and k.is_cuda
        and q.dtype == k.dtype
        and q.dtype in DTYPES
        and tokens == 1
        and dim in DIMS
        and k.shape[0] == batch
        and k.shape[3] == dim
        and length > 0
        and heads % kv_heads == 0
        and heads // kv_heads <= ROWS
        and (mask is None or _mask_fits(mask, batch, length))
    )


def _mask_fits(mask: torch.Tensor, batch: int, length: int) -> bool:
    return (
        mask.is_cuda
        and mask.dim() == 4
        and mask.shape[0] in (1, batch)
        and mask.shape[1] == mask.shape[2] == 1
        and mask.shape[3] >= length
        and (mask.dtype == torch.bool or mask.dtype.is_floating_point)
    )


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """Attention of one query token (``q``: batch, heads, 1, dim) over grouped K/V heads
    (``k``/``v``: batch, kv heads, length, dim, q's dtype; any strides, a last dimension
    not contiguous copied), ``mask`` (batch or 1, 1, 1, length or more; bool = keep, else
    added) over the heads; returns batch, 1, heads, dim in q's dtype. One operator under
    ``torch.compile``; inputs as :func:`fits` takes them."""
    out: torch.Tensor = torch.ops.qwen_ui.decode_attention(q, k, v, mask, scale)
    return out


@torch.library.custom_op("qwen_ui::decode_attention", mutates_args=())  # type: ignore[misc]
def _attention_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    return launch(q, k, v, mask, scale)


@_attention_op.register_fake  # type: ignore[misc]
def _attention_shape(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    batch, heads, _, dim = q.shape
    return q.new_empty((batch, 1, heads, dim))


def plan(length: int, heads: int, programs: int, block_n: int = BLOCK_N) -> tuple[int, int]:
    """How the work of ``heads`` (sequences times K/V heads) over ``length`` positions is
    shared out: ``(shares, blocks per share)``, each share the same whole blocks (the
    last may have fewer, never none), enough shares for ``heads * shares`` programs to
    reach ``programs`` (or one block each)."""
    blocks = triton.cdiv(length, block_n)
    wanted = max(1, min(blocks, triton.cdiv(programs, heads)))
    per_share = blocks // wanted
    return triton.cdiv(blocks, per_share), per_share


@functools.cache
def programs(device: torch.device) -> int:
    """The programs a launch on ``device`` aims for: :data:`PROGRAMS_PER_PROCESSOR` per
    multiprocessor of a CUDA device, :data:`INTERPRETER_PROGRAMS` elsewhere."""
    if device.type != "cuda":
        return INTERPRETER_PROGRAMS
    processors = torch.cuda.get_device_properties(device).multi_processor_count
    return PROGRAMS_PER_PROCESSOR * int(processors)


def launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    block_n: int = BLOCK_N,
    shares: tuple[int, int] | None = None,
) -> torch.Tensor:
    """:func:`attention` by the two kernels (any device Triton runs on); ``shares``
    (default: :func:`plan`'s) as ``(shares, blocks per share)``."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    batch, heads, _, dim = q.shape
    kv_heads, length = k.shape[1], k.shape[2]
    group = heads // kv_heads
    count, per_share = shares or plan(length, batch * kv_heads, programs(q.device), block_n)
    part_out = q.new_empty((batch * kv_heads, count, group, dim), dtype=torch.float32)
    part_max = q.new_empty((batch * kv_heads, count, group), dtype=torch.float32)
    part_sum = torch.empty_like(part_max)
    kind, flags, mask_strides = _mask_args(mask, q)
    _shares[(batch * kv_heads, count)](
        q,
        k,
        v,
        flags,
        part_out,
        part_max,
        part_sum,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        *mask_strides,
        kv_heads,
        length,
        per_share,
        scale,
        GROUP=group,
        ROWS=ROWS,
        DIM=dim,
        BLOCK_N=block_n,
        MASK=kind,
        IEEE=q.dtype == torch.float32,
        num_warps=4,
    )
    out = torch.empty((batch, 1, heads, dim), device=q.device, dtype=q.dtype)
    _combine[(batch * heads,)](
        part_out,
        part_max,
        part_sum,
        out,
        heads,
        kv_heads,
        count,
        GROUP=group,
        DIM=dim,
        SHARES=triton.next_power_of_2(count),
        num_warps=4,
    )
    return out


def _mask_args(
    mask: torch.Tensor | None, q: torch.Tensor
) -> tuple[int, torch.Tensor, tuple[int, int]]:
    """The kernel's mask kind, tensor (q when none: never read; bool as bytes) and
    strides (sequence, position; a mask of one row read by every sequence)."""
    if mask is None:
        return NO_MASK, q, (0, 0)
    strides = (mask.stride(0) if mask.shape[0] > 1 else 0, mask.stride(3))
    if mask.dtype == torch.bool:
        return KEEP_MASK, mask.view(torch.uint8), strides
    return ADDED_MASK, mask, strides
