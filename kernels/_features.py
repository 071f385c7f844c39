"""The score transform and the mask, written once for every kernel (forward, dK/dV, dQ, probs).

Index arguments `i` (query rows) and `j` (key columns) are int32 tensors that broadcast to the
tile's shape, so one helper serves the (queries x keys) tiles of the forward and the dQ kernel
and the transposed (keys x queries) tiles of the dK/dV kernel. Scores are in the log2 domain.

- `_visible`: the sequence-end, causal (bottom-right aligned) and sliding-window mask:
  query i sees key j iff i + Nk - Nq - win_left <= j <= i + Nk - Nq + win_right.
- `_scores`: scale, softcap (softcap * tanh(scale * q.k / softcap)) and the ALiBi bias
  -slope * |i + Nk - Nq - j|; also returns tanh for the softcap's gradient.
- `_dropout_keep`: Philox counter-based keep mask, regenerated identically in every pass from
  (seed, key group, query index, batch x head index): independent 32-bit counters, so no flat
  offset can overflow. Each Philox call gives four 32-bit outputs, used as eight 16-bit uniforms:
  key column j = 32 q + 8 g + 2 s + h takes half h of output g of counter 4 q + s, so one call
  serves the 8 columns one thread holds in the tensor cores' accumulator layout (2 adjacent
  columns in each of 4 groups of 8), whatever the tile sizes. An entry is kept iff its 16-bit
  uniform is at least 65536 p: the keep probability is 1 - ceil(65536 p) / 65536, within 1.6e-5
  of 1 - p. Philox runs 7 rounds (`PHILOX_ROUNDS`), as in FlashAttention-2's dropout.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

LOG2E = 1.4426950408889634
_LOG2E = tl.constexpr(LOG2E)  # for use inside @triton.jit code
# Philox rounds of the dropout mask: 7, as FlashAttention-2's dropout uses (its philox.cuh), not Triton's
# default 10; the mask is Philox4x32-7 of the documented counter
PHILOX_ROUNDS = tl.constexpr(7)


@triton.jit
def _visible(i, j, N_Q, N_K, win_left, win_right, CHECK_M: tl.constexpr, CAUSAL: tl.constexpr,
             WINDOW: tl.constexpr):
    visible = j < N_K
    if CHECK_M:
        visible = (i < N_Q) & visible
    if CAUSAL:
        visible = visible & (j <= i + (N_K - N_Q))
    if WINDOW:
        diag = i + (N_K - N_Q)
        visible = visible & (j >= diag - win_left) & (j <= diag + win_right)
    return visible


# On a GPU, softcap's tanh is the hardware's tanh.approx.f32: one special-function op, as many
# as the softmax's exp2 needs, where the exp2-and-divide formula needs two and the IEEE division's
# refinement (softcap's forward is bound by these ops at head dims 64 and 128). Its relative error
# is at most 2^-10.99, about an fp16 rounding; flash-attn's softcap uses the same instruction. The
# interpreter has no inline PTX and takes the formula.
_HW_TANH = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"))


@triton.jit
def _tanh(x):
    if _HW_TANH:
        t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                      pack=1)
    else:
        e = tl.math.exp2(tl.abs(x) * (-2.0 * _LOG2E))
        t = (1.0 - e) / (1.0 + e)
        t = tl.where(x < 0, -t, t)
    return t


@triton.jit
def _scores(qk, i, j, qk_scale, softcap_scale, softcap_log2, slope_log2, N_Q, N_K,
            SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """Log2-domain scores of the raw products q.k, and tanh of the softcap (for its gradient)."""
    if SOFTCAP:
        t = _tanh(qk * softcap_scale)
        s = t * softcap_log2
    else:
        s = qk * qk_scale
        t = s
    if ALIBI:
        # the integer distance, converted per entry: the float-index form (M + N conversions per
        # tile) was no faster on the H200 (3-4% slower in each forward cell; notes/perf.md, v5)
        s = s - slope_log2 * tl.abs(i + (N_K - N_Q) - j).to(tl.float32)
    return s, t


@triton.jit
def _keep16(r, dropout_p):
    """Keep decisions of the low and high 16 bits of Philox outputs r: uniform 16-bit u is kept
    iff u >= 65536 p, i.e. iff u >= ceil(65536 p), compared as integers (an int-to-float
    conversion per entry would cost as much as the softmax's exp2)."""
    threshold = tl.math.ceil(dropout_p * 65536.0).to(tl.uint32)
    low = (r & 0xFFFF) >= threshold
    high = (r >> 16) >= threshold
    return low, high


@triton.jit
def _dropout_keep_qk(seed, off_hz, i, j, dropout_p):
    """Keep mask of a (queries x keys) tile: i is [BLOCK_M, 1] query rows, j is [1, BLOCK_N] key
    columns, contiguous and starting at a multiple of BLOCK_N, itself 16 or a multiple of 32.

    Key column j = 32 q + 8 g + 2 s + h takes 16-bit half h (low first) of output g of the Philox
    call with counter (4 q + s, i, batch x head, 0). One call serves the 8 columns (g, h) of one
    (q, s): those one thread holds in the tensor cores' accumulator layout, which gives a thread two
    adjacent columns in every group of 8, so the mask is built in the scores' own layout, with no
    exchange between threads. The mask depends on (seed, batch x head, i, j) only, not on the tile.
    """
    BLOCK_N: tl.constexpr = j.shape[1]
    BLOCK_M: tl.constexpr = i.shape[0]
    tl.static_assert(BLOCK_N == 16 or BLOCK_N % 32 == 0, "dropout needs 16 or a multiple of 32 key columns per tile")
    GROUPS: tl.constexpr = 4 if BLOCK_N >= 32 else 2  # the outputs g a tile's 32-column span holds
    SPANS: tl.constexpr = BLOCK_N // (8 * GROUPS)
    # j as [1, SPANS, GROUPS (g), 4 (s), 2 (h)]; keep h = 0 and g = 0: [1, SPANS, 4 (s)], values 32 q + 8 g0 + 2 s
    j4, _ = tl.split(tl.reshape(j, [1, SPANS, GROUPS, 4, 2]))
    j4 = tl.permute(j4, [0, 1, 3, 2])  # [1, SPANS, 4 (s), GROUPS (g)]
    if GROUPS == 4:
        j3, _ = tl.split(tl.reshape(j4, [1, SPANS, 4, 2, 2]))
        j3, _ = tl.split(j3)
    else:
        j3, _ = tl.split(j4)
    i3 = tl.reshape(i, [BLOCK_M, 1, 1])
    zero = i3 * 0 + j3 * 0  # [BLOCK_M, SPANS, 4]
    c0 = ((j3 // 32) * 4 + (j3 % 8) // 2 + zero).to(tl.uint32, bitcast=True)
    c1 = (i3 + zero).to(tl.uint32, bitcast=True)
    c2 = (zero + off_hz.to(tl.int32)).to(tl.uint32, bitcast=True)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, zero.to(tl.uint32, bitcast=True), PHILOX_ROUNDS)
    if GROUPS == 4:
        k0l, k0h = _keep16(r0, dropout_p)
        k1l, k1h = _keep16(r1, dropout_p)
        k2l, k2h = _keep16(r2, dropout_p)
        k3l, k3h = _keep16(r3, dropout_p)
        # each tl.join adds a last axis: [M, SPANS, s, h, g0, g1] with g = 2 g1 + g0
        keep = tl.join(tl.join(tl.join(k0l, k0h), tl.join(k1l, k1h)),
                       tl.join(tl.join(k2l, k2h), tl.join(k3l, k3h)))
        keep = tl.permute(keep, [0, 1, 5, 4, 2, 3])  # [M, SPANS, g1, g0, s, h]
    else:
        # a 16-column tile holds outputs 0, 1 (its start % 32 == 0) or 2, 3 (== 16) of each call
        upper = (j3 % 32) >= 16
        kal, kah = _keep16(tl.where(upper, r2, r0), dropout_p)
        kbl, kbh = _keep16(tl.where(upper, r3, r1), dropout_p)
        keep = tl.join(tl.join(kal, kah), tl.join(kbl, kbh))  # [M, 1, s, h, g']
        keep = tl.permute(keep, [0, 1, 4, 2, 3])  # [M, 1, g', s, h]
    return tl.reshape(keep, [BLOCK_M, BLOCK_N])


@triton.jit
def _dropout_keep(seed, off_hz, i, j, dropout_p):
    """Keep mask (uniform >= p) of query rows i and key columns j, in the tile's orientation:
    (i [M, 1], j [1, N]) for the (queries x keys) tiles, (i [1, M], j [N, 1]) for the transposed
    (keys x queries) tiles of the dK/dV kernel. Both build the same (queries x keys) mask."""
    if j.shape[0] == 1:
        keep = _dropout_keep_qk(seed, off_hz, i, j, dropout_p)
    else:
        tl.static_assert(i.shape[0] == 1 and j.shape[1] == 1, "i, j: [1, M] and [N, 1] for a transposed tile")
        keep = tl.trans(_dropout_keep_qk(seed, off_hz, tl.trans(i), tl.trans(j), dropout_p))
    return keep


@triton.jit
def _window_key_bounds(start_m, N_Q, N_K, win_left, win_right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       SKIP_MASKED: tl.constexpr):
    """Key tiles of a query block under a window: [lo, a) masked, [a, b) unmasked, [b, hi) masked.

    Tiles outside [lo, hi) are outside the window of every row of the block and are skipped.
    """
    if SKIP_MASKED:
        first = start_m * BLOCK_M + (N_K - N_Q)  # diagonal of the block's first row
        last = first + BLOCK_M - 1
        lo = tl.maximum(first - win_left, 0) // BLOCK_N * BLOCK_N
        hi = tl.maximum(tl.minimum(last + win_right + 1, N_K), lo)
        a = tl.cdiv(tl.maximum(last - win_left, 0), BLOCK_N) * BLOCK_N
        b = tl.maximum(tl.minimum(first + win_right + 1, N_K), 0) // BLOCK_N * BLOCK_N
        a = tl.minimum(tl.maximum(a, lo), hi)
        b = tl.maximum(tl.minimum(b, hi), a)
    else:
        lo = 0
        a = 0
        b = 0
        hi = N_K
    return lo, a, b, hi


@triton.jit
def _window_query_bounds(start_n, N_Q, N_K, win_left, win_right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         SKIP_MASKED: tl.constexpr):
    """Query tiles of a key block under a window: [lo, a) masked, [a, b) all rows see the whole
    key block and lie inside Nq, [b, hi) masked; the rest is skipped."""
    if SKIP_MASKED:
        off = N_K - N_Q
        lo = tl.maximum(start_n - off - win_right, 0) // BLOCK_M * BLOCK_M
        hi = tl.maximum(tl.minimum(start_n + BLOCK_N - off + win_left, N_Q), lo)
        a = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - off - win_right, 0), BLOCK_M) * BLOCK_M
        b = tl.maximum(tl.minimum(start_n - off + win_left + 1, N_Q), 0) // BLOCK_M * BLOCK_M
        a = tl.minimum(tl.maximum(a, lo), hi)
        b = tl.maximum(tl.minimum(b, hi), a)
    else:
        lo = 0
        a = 0
        b = 0
        hi = N_Q
    return lo, a, b, hi


@triton.jit
def _sees_a_key(i, N_Q, N_K, win_left, win_right, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """Rows that see at least one key (all rows when neither mask is on)."""
    diag = i + (N_K - N_Q)
    sees = diag >= -N_K  # always true; the shape of i
    if CAUSAL:
        sees = diag >= 0
    if WINDOW:
        sees = (diag + win_right >= 0) & (diag - win_left <= N_K - 1)
    return sees
