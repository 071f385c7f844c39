"""The score transform and the mask, written once for every kernel (forward, dK/dV, dQ, probs).

Index arguments `i` (query rows) and `j` (key columns) are int32 tensors that broadcast to the
tile's shape, so one helper serves the (queries x keys) tiles of the forward and the dQ kernel
and the transposed (keys x queries) tiles of the dK/dV kernel. Scores are in the log2 domain.

- `_visible`: the sequence-end, causal (bottom-right aligned) and sliding-window mask:
  query i sees key j iff i + Nk - Nq - win_left <= j <= i + Nk - Nq + win_right.
- `_scores`: scale, softcap (softcap * tanh(scale * q.k / softcap)) and the ALiBi bias
  -slope * |i + Nk - Nq - j|; also returns tanh for the softcap's gradient.
- `_dropout_keep`: Philox counter-based keep mask, regenerated identically in every pass from
  (seed, key index // 8, query index, batch x head index): independent 32-bit counters, so no
  flat offset can overflow. Each Philox call gives four 32-bit outputs, used as eight 16-bit
  uniforms: key column j takes half j % 2 of output (j % 8) // 2 of counter j // 8, so one call
  serves 8 columns, whatever the tile sizes. An entry is kept iff its 16-bit uniform is at
  least 65536 p: the keep probability is 1 - ceil(65536 p) / 65536, within 1.6e-5 of 1 - p.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

LOG2E = 1.4426950408889634
_LOG2E = tl.constexpr(LOG2E)  # for use inside @triton.jit code


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
    columns, contiguous and starting at a multiple of 8 (every tile's first column is a multiple
    of its BLOCK_N, itself a multiple of 16).

    One Philox call per 8 key columns: counter (j // 8, i, batch x head, 0) gives four 32-bit
    outputs, and column j takes 16-bit half j % 2 (low first) of output (j % 8) // 2. The mask
    depends on (seed, batch x head, i, j) only, not on the tile size.
    """
    BLOCK_N: tl.constexpr = j.shape[1]
    tl.static_assert(BLOCK_N % 8 == 0, "dropout needs a multiple of 8 key columns per tile")
    # the first column of each group of 8: [1, BLOCK_N] -> [1, BLOCK_N // 8]
    j0, _ = tl.split(tl.reshape(j, [1, BLOCK_N // 8, 2, 2, 2]))
    j0, _ = tl.split(j0)
    j0, _ = tl.split(j0)
    g = j0 // 8
    zero = i * 0 + g * 0  # [BLOCK_M, BLOCK_N // 8]
    c0 = (g + zero).to(tl.uint32, bitcast=True)
    c1 = (i + zero).to(tl.uint32, bitcast=True)
    c2 = (zero + off_hz.to(tl.int32)).to(tl.uint32, bitcast=True)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, zero.to(tl.uint32, bitcast=True))
    k0, k1 = _keep16(r0, dropout_p)
    k2, k3 = _keep16(r1, dropout_p)
    k4, k5 = _keep16(r2, dropout_p)
    k6, k7 = _keep16(r3, dropout_p)
    # [M, G, a, b, c] with column 8 * g + 4 * a + 2 * b + c: each tl.join adds a last axis, so
    # the innermost join selects a, the outermost c
    keep = tl.join(tl.join(tl.join(k0, k4), tl.join(k2, k6)), tl.join(tl.join(k1, k5), tl.join(k3, k7)))
    return tl.reshape(keep, [zero.shape[0], BLOCK_N])


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
