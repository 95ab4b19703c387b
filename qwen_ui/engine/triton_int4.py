"""A Triton int4 kernel for a batch's decode steps of a few rows, on CUDA.

torch's int4 kernel (``_weight_int4pack_mm``) is fastest for one row, but its time grows
with the rows: a decode step of 8 or 16 sequences spends most of its time there. This
kernel reads each weight once for up to :data:`MAX_ROWS` rows: every program takes a
block of the output's columns and a share of the inner dimension (added atomically when
shared), unpacks its block's nibbles, dequantizes them (on sm_90 two at a time in bf16
pairs, by inline PTX) and multiplies with ``tl.dot`` (the transposed product, the weight
as the left operand).

It reads its own copy of the weight (:func:`pack` then :func:`tile`: each program's
words contiguous), half a byte per weight beside torch's packed one. At load,
:func:`keep_copies` checks every CUDA int4 layer's copy against torch's kernel and times
both per layer shape; a layer then multiplies inputs from the fewest rows where this was
faster at every row count timed up to :data:`MAX_ROWS` here (the operator
``torch.ops.qwen_ui.int4_rows``), everything else as before.

``bench/bench_int4_triton.py`` sweeps this kernel's other ways and sizes;
``bench/profile_batching.py`` times a step with it.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import nn

from qwen_ui.engine.awq import KERNEL_DTYPE, Int4Linear, inner_k_tiles, tile_gather, unpack_tinygemm
from qwen_ui.engine.dense_weights import MATCH, crossover_rows, keep_measured, time_ms

log = logging.getLogger(__name__)

MAX_ROWS = 16  # the kernel's row tile: inputs of more rows take another path
BLOCK_K = 128  # inner-dimension step; the group size must be a multiple of it
ROWS = (1, 2, 4, 8, 16)  # row counts timed per layer shape


@dataclass(frozen=True)
class Plan:
    """How one weight shape runs: ``split_k`` programs share the inner dimension,
    ``block_n`` output columns per program, ``stages`` as Triton's ``num_stages``."""

    split_k: int
    block_n: int
    stages: int = 3

    def args(self) -> tuple[int, int, int]:
        """As :func:`int4_rows` takes them after the group."""
        return self.split_k, self.block_n, self.stages


def plan_for(n: int, k: int) -> Plan:
    """The fastest sizes of the H200 sweep for the 7B decoder's shapes at 8 and 16 rows
    (docs/BENCHMARKS.md): wide outputs in 128-column blocks over 4 splits, narrow ones in
    64-column blocks over 8 splits, 16 when ``k`` is deep."""
    if n >= 16384:
        return Plan(4, 128)
    return Plan(16 if k >= 8192 else 8, 64)


def fits(n: int, k: int, group: int) -> bool:
    """Whether an ``[n, k]`` weight of groups of ``group`` runs here."""
    return group % BLOCK_K == 0 and k % group == 0 and n % plan_for(n, k).block_n == 0


@triton.jit  # type: ignore[untyped-decorator]
def _nibble(words, shift: tl.constexpr, s, z):  # type: ignore[no-untyped-def]
    """Nibble ``shift / 4`` of every word, dequantized in float32."""
    return (((words >> shift) & 0xF).to(tl.float32) - 8.0) * s + z


def _pair_ptx(shift: int, first: int) -> str:
    """Nibbles ``j`` and ``j + 4`` of word ``$8`` (``j = shift / 4``) as the bf16 pair
    ``128 + q`` (one ``lop3``: 128's exponent under the nibble as mantissa), less 136
    (exact: ``q - 8``), times the scale pair ``$9`` plus the zero pair ``$10`` (one
    ``fma.rn.bf16x2``), into outputs ``first`` and ``first + 4``."""
    word = f"shr.u32 u, $8, {shift};\n" if shift else "mov.b32 u, $8;\n"
    return (
        word + "lop3.b32 t, u, 0x000F000F, 0x43004300, 0xEA;\n"
        "sub.rn.bf16x2 t, t, c;\nfma.rn.bf16x2 t, t, $9, $10;\n"
        f"mov.b32 {{${first}, ${first + 4}}}, t;\n"
    )


# one word's eight weights dequantized two at a time in bf16 pairs (sm_90's bf16x2
# arithmetic): outputs 0..7 are the word's nibbles 0..7
DEQUANT_PTX = tl.constexpr(
    "{\n.reg .b32 t, u, c;\nmov.b32 c, 0x43084308;\n"  # 136.0, 136.0
    + "".join(_pair_ptx(4 * j, j) for j in range(4))
    + "}"
)


@triton.jit  # type: ignore[untyped-decorator]
def _bf16_pair(v):  # type: ignore[no-untyped-def]
    """Each bf16 of ``v`` twice in one int32 (both halves of a bf16x2 register)."""
    bits = v.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return bits | (bits << 16)


@triton.jit  # type: ignore[untyped-decorator]
def _dequantized(words, s, z, PAIRS: tl.constexpr):  # type: ignore[no-untyped-def]
    """``[BLOCK_N, BLOCK_K / 8]`` words with their column's bf16 scale and zero → the
    ``[BLOCK_N, BLOCK_K]`` weight, ``k`` in order: nibble ``4 a + 2 b + c`` of a word at
    ``[.., a, b, c]`` (the last join varies fastest; ``tl.join`` keeps a joined axis in
    one thread, so a thread holds 8 consecutive ``k`` of a column)."""
    if PAIRS:
        s2 = _bf16_pair(s)[:, None] + tl.zeros_like(words)
        z2 = _bf16_pair(z)[:, None] + tl.zeros_like(words)
        w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
            DEQUANT_PTX,
            "=h,=h,=h,=h,=h,=h,=h,=h,r,r,r",
            [words, s2, z2],
            dtype=(tl.bfloat16,) * 8,
            is_pure=True,
            pack=1,
        )
    else:
        s, z = s.to(tl.float32)[:, None], z.to(tl.float32)[:, None]
        w0 = _nibble(words, 0, s, z)
        w1 = _nibble(words, 4, s, z)
        w2 = _nibble(words, 8, s, z)
        w3 = _nibble(words, 12, s, z)
        w4 = _nibble(words, 16, s, z)
        w5 = _nibble(words, 20, s, z)
        w6 = _nibble(words, 24, s, z)
        w7 = _nibble(words, 28, s, z)
    joined = tl.join(
        tl.join(tl.join(w0, w4), tl.join(w2, w6)), tl.join(tl.join(w1, w5), tl.join(w3, w7))
    )
    return tl.reshape(joined, (words.shape[0], words.shape[1] * 8))


@triton.jit(do_not_specialize=["m"])  # type: ignore[untyped-decorator]
def _int4_rows(  # type: ignore[no-untyped-def]
    x_ptr,
    w_ptr,
    sz_ptr,
    out_ptr,
    m,
    n,
    k,
    k_per_split,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PAIRS: tl.constexpr,
    ATOMIC: tl.constexpr,
):
    # the transposed product W x^T: the dequantized block is tl.dot's left operand, k
    # contiguous, so it goes to shared memory in 16-byte stores
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    word_rows = tl.arange(0, BLOCK_K // 8)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    start = pid_k * k_per_split
    for k0 in range(start, tl.minimum(start + k_per_split, k), BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None] * k + ks[None, :], mask=rows[:, None] < m, other=0.0)
        first = ((pid_n * (k // BLOCK_K) + k0 // BLOCK_K) * (BLOCK_K // 8)) * BLOCK_N
        words = tl.load(
            w_ptr + first + word_rows[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        )
        words = tl.trans(words)  # [BLOCK_N, BLOCK_K / 8]
        g = k0 // GROUP
        s = tl.load(sz_ptr + (g * n + cols) * 2)
        z = tl.load(sz_ptr + (g * n + cols) * 2 + 1)
        w = _dequantized(words, s, z, PAIRS)
        acc += tl.dot(w.to(x.dtype), tl.trans(x))
    at = rows[None, :] * n + cols[:, None]
    row_ok = rows[None, :] < m
    if ATOMIC:
        tl.atomic_add(out_ptr + at, acc, mask=row_ok)
    else:
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=row_ok)


def pack(q: torch.Tensor) -> torch.Tensor:
    """int32 ``[n, k]`` of values 0..15 → int32 ``[k / 8, n]``, row ``8 w + j`` of column
    ``c`` in nibble ``j`` of word ``[w, c]``."""
    n, k = q.shape
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=q.device)
    return (q.t().reshape(k // 8, 8, n) << shifts[:, None]).sum(1, dtype=torch.int32)


def untile(words: torch.Tensor) -> torch.Tensor:
    """:func:`tile`'s words → int32 ``[n, k]`` of values 0..15 (what :func:`pack` took)."""
    column_blocks, k_blocks, per_block, block_n = words.shape
    packed = words.permute(1, 2, 0, 3).reshape(k_blocks * per_block, column_blocks * block_n)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    nibbles = (packed[:, None, :] >> shifts[:, None]) & 0xF  # [k / 8, 8, n]
    return nibbles.reshape(-1, packed.shape[1]).t().contiguous()


def tile(packed: torch.Tensor, block_n: int) -> torch.Tensor:
    """:func:`pack`'s ``[k / 8, n]`` → ``[n / block_n, k / BLOCK_K, BLOCK_K / 8, block_n]``:
    each program's block of words contiguous, its blocks along ``k`` one after another."""
    words, n = packed.shape
    per_block = BLOCK_K // 8
    blocks = packed.view(words // per_block, per_block, n // block_n, block_n)
    return blocks.permute(2, 0, 1, 3).contiguous()


@torch.library.custom_op("qwen_ui::int4_rows", mutates_args=())  # type: ignore[misc]
def int4_rows(
    x: torch.Tensor,
    words: torch.Tensor,
    scales_and_zeros: torch.Tensor,
    group: int,
    split_k: int,
    block_n: int,
    stages: int,
) -> torch.Tensor:
    """``x @ W.T`` for ``x`` ``[m, k]`` (``m`` at most :data:`MAX_ROWS`), ``W`` from
    :func:`tile`'s ``words`` and torch's ``scales_and_zeros[k / g, n, 2]``
    (``W = (q - 8) s + z'``). One operator, which ``torch.compile`` calls as it is: the
    Triton kernel (:func:`launch`) on CUDA, the dequantized weight's product on the CPU."""
    return launch(x, words, scales_and_zeros, group, split_k, block_n, stages)


@int4_rows.register_kernel("cpu")  # type: ignore[misc]
def _int4_rows_cpu(
    x: torch.Tensor, words: torch.Tensor, scales_and_zeros: torch.Tensor, group: int, *_: int
) -> torch.Tensor:
    sz = scales_and_zeros.float().repeat_interleave(group, dim=0)  # [k, n, 2]
    weight = (untile(words).t().float() - 8.0) * sz[..., 0] + sz[..., 1]  # [k, n]
    return (x.float() @ weight).to(x.dtype)


@functools.cache
def bf16_pairs(device: torch.device) -> bool:
    """Whether the kernel dequantizes in bf16 pairs on ``device`` (:data:`DEQUANT_PTX`
    needs sm_90's ``sub.bf16x2``); elsewhere it does so one weight at a time in float32."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def _pairs(asked: bool | None, device: torch.device, scales: torch.dtype) -> bool:
    """``asked``, or by default bf16 pairs where the device and bf16 scales allow them."""
    if asked is not None:
        return asked
    return scales == torch.bfloat16 and bf16_pairs(device)


def launch(
    x: torch.Tensor,
    words: torch.Tensor,
    scales_and_zeros: torch.Tensor,
    group: int,
    split_k: int,
    block_n: int,
    stages: int,
    pairs: bool | None = None,
) -> torch.Tensor:
    """:func:`int4_rows` by the Triton kernel (any device Triton runs on); ``pairs``
    (default: :func:`bf16_pairs` for bf16 scales) picks the dequantizing."""
    m, k = x.shape
    n = scales_and_zeros.shape[1]
    shared = split_k > 1
    if shared:
        out = torch.zeros(m, n, device=x.device, dtype=torch.float32)
    else:
        out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    per_split = triton.cdiv(k // BLOCK_K, split_k) * BLOCK_K  # whole blocks; the last shorter
    _int4_rows[(n // block_n, split_k)](
        x.contiguous(),
        words,
        scales_and_zeros,
        out,
        m,
        n,
        k,
        per_split,
        GROUP=group,
        BLOCK_M=MAX_ROWS,
        BLOCK_N=block_n,
        BLOCK_K=BLOCK_K,
        PAIRS=_pairs(pairs, x.device, scales_and_zeros.dtype),
        ATOMIC=shared,
        num_warps=4,
        num_stages=stages,
    )
    return out.to(x.dtype) if shared else out


@int4_rows.register_fake  # type: ignore[misc]
def _int4_rows_shape(
    x: torch.Tensor, words: torch.Tensor, sz: torch.Tensor, *_: int
) -> torch.Tensor:
    return x.new_empty(x.shape[0], sz.shape[1])


def keep_copies(model: nn.Module) -> int:
    """Give every CUDA int4 layer of ``model`` whose shape fits a copy in this kernel's
    layout, used from its shape's measured crossover. Returns the layers given one."""
    layers = [
        m
        for m in model.modules()
        if isinstance(m, Int4Linear)
        and not m.dequantized
        and m.packed.is_cuda
        and fits(m.out_features, m.in_features, m.group_size)
    ]
    if not layers:
        return 0
    try:
        return _keep(layers)
    except Exception:  # any failure (Triton's compiler included): torch's kernel as before
        log.exception("Triton int4 copies failed: none kept")
        for layer in layers:
            layer.drop_rows_kernel()
        return 0


def _keep(layers: list[Int4Linear]) -> int:
    def keep(layer: Int4Linear, copy: tuple[torch.Tensor, Plan], rows: int) -> None:
        words, plan = copy
        layer.keep_rows_kernel(words, plan.args(), rows, MAX_ROWS)

    return keep_measured(layers, copy_of, _measure, keep, "Triton int4 copies")


def copy_of(layer: Int4Linear) -> tuple[torch.Tensor, Plan] | None:
    """A copy of ``layer``'s weight in this kernel's layout and the plan it runs with, or
    None (logged) when it does not multiply as torch's kernel does (a packing layout this
    code does not know)."""
    gather = _gather(layer.packed.device, inner_k_tiles(layer.in_features))
    plan = plan_for(layer.out_features, layer.in_features)
    words = tile(pack(unpack_tinygemm(layer.packed, gather)), plan.block_n)
    probe = torch.randn(8, layer.in_features, device=words.device, dtype=KERNEL_DTYPE)
    expected = _torch_kernel(layer, probe).float()
    got = _triton_kernel(layer, words, plan, probe).float()
    error = float((got - expected).norm() / expected.norm())
    if not error <= MATCH:  # also NaN
        log.warning("int4 layout not recognised: no Triton copy (relative error %.3g)", error)
        return None
    return words, plan


@functools.cache
def _gather(device: torch.device, tiles: int) -> torch.Tensor:
    return tile_gather(device, tiles)


def _torch_kernel(layer: Int4Linear, x: torch.Tensor) -> torch.Tensor:
    return torch._weight_int4pack_mm(x, layer.packed, layer.group_size, layer.scales_and_zeros)


def _triton_kernel(
    layer: Int4Linear, words: torch.Tensor, plan: Plan, x: torch.Tensor
) -> torch.Tensor:
    out: torch.Tensor = int4_rows(x, words, layer.scales_and_zeros, layer.group_size, *plan.args())
    return out


def _measure(layer: Int4Linear, copy: tuple[torch.Tensor, Plan], flush: torch.Tensor) -> int:
    words, plan = copy
    torch_ms, triton_ms = [], []
    for rows in ROWS:
        x = torch.randn(rows, layer.in_features, device=flush.device, dtype=KERNEL_DTYPE)
        torch_ms.append(time_ms(functools.partial(_torch_kernel, layer, x), flush))
        triton_ms.append(time_ms(functools.partial(_triton_kernel, layer, words, plan, x), flush))
    log.debug(
        "int4 %dx%d, ms per call by rows %s: torch %s, Triton %s",
        layer.in_features,
        layer.out_features,
        ROWS,
        torch_ms,
        triton_ms,
    )
    return crossover_rows(ROWS, torch_ms, triton_ms)
