"""FlashAttention-1 (Dao et al. 2022) forward and backward: Triton kernels and their launchers.

This is the `algorithm="fa1"` arm of the engine, written to follow the original paper's loop
structure rather than to be fast; the FlashAttention-2 kernels live in `_forward.py` and
`_backward.py`.

Forward (the paper's Algorithm 1). Grid: one program per (batch, head), B * H in all. O, l and
m are initialised in HBM (0, 0, -inf) by the launcher. The outer loop walks the key/value
blocks j; each loads K_j, V_j once and keeps them on chip while the inner loop walks every
query block i. Each inner step reads Q_i, O_i, l_i, m_i from HBM, computes
S_ij = Q_i K_j^T * scale, the block's row max m~_ij and P~_ij = exp(S_ij - m~_ij) with row sum
l~_ij, then m_new = max(m_i, m~_ij), l_new = e^(m_i - m_new) l_i + e^(m~_ij - m_new) l~_ij and

    O_i <- diag(l_new)^-1 (diag(l_i) e^(m_i - m_new) O_i + e^(m~_ij - m_new) P~_ij V_j),

and writes O_i, l_i, m_i back to HBM. O is therefore normalised in HBM after every step (the
eager rescale). O is accumulated in a float32 scratch (B, H, Nq, D), as the original CUDA
kernel's float32 `o_tmp`, and l, m in float32 scratch (B, H, Nq); a last loop over the query
blocks casts O into the output (the input dtype) and writes the log-sum-exp m + log l
(natural log) that the backward needs, so both algorithms hand the same tensors to autograd.

Backward (the paper's Algorithm 4). Same grid. dQ is initialised to 0 in HBM (float32). The
outer loop walks the key blocks j, keeping K_j, V_j and the dK_j, dV_j accumulators on chip;
the inner loop walks every query block i, reads Q_i, dO_i, the log-sum-exp and
delta_i = rowsum(dO_i * O_i), recomputes P_ij = exp(S_ij - lse_i) (the same as the paper's
diag(l_i)^-1 exp(S_ij - m_i)), adds P_ij^T dO_i into dV_j and dS_ij^T Q_i into dK_j, and
reads, adds dS_ij K_j to and writes back dQ_i in HBM. No atomics: one program owns its
(batch, head), so only it touches those dQ rows. delta comes from a pre-pass (the FA2 delta
kernel) instead of being recomputed in every inner step. With grouped-query heads each query
head writes its own float32 dK, dV, which the launcher sums over the group (deterministic);
with one query head per key/value head they go straight into dk, dv.

Why this is slower than FA2: the grid has only B * H programs (no parallelism over the
sequence, so small batches leave most of the GPU idle); every inner step moves O_i (float32),
l_i and m_i to and from HBM (and dQ_i in the backward), Nk / BLOCK_N times over per query
row, where FA2 keeps them on chip; and the output is rescaled and normalised on every step
instead of once at the end.

Memory ordering: O, l, m (dQ in the backward) are read and written by the threads of one
program, and a row's l and m can be held, and read, by several warps at once. Two barriers
(`tl.debug_barrier()`, a bar.sync, which also orders the CTA's global-memory accesses):
one in every inner step between its reads and its writes, so no thread overwrites a row
that another thread has yet to read; one at the end of every outer iteration, after its
writes, so the next key block (and the forward's final loop) reads the values written here.
Within one outer iteration the inner steps touch disjoint query rows. Triton
software-pipelines only innermost loops, so no load of outer iteration j + 1 is issued before
the second barrier. In the interpreter programs run one at a time and in program order, and
the barrier is a no-op.

Causal attention is aligned to the bottom-right corner (query i sees keys j <= i + Nk - Nq):
(query block, key block) pairs wholly above the diagonal are skipped, pairs wholly below it
run unmasked, the band in between is masked. Query rows that see no key get an output of
zero and a log-sum-exp of -inf, as on the FA2 path. Scores are kept in the log2 domain
(scaled by softmax_scale * log2(e)) so m is in log2 units and the exponentials are exp2.
Offsets that can exceed 2^31 (batch/head bases, row starts) are computed in int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._backward import _attn_bwd_delta, _query_bounds
from kernels._forward import LOG2E, _load_tile
from kernels._launch import cdiv, launch_kernel
from kernels.tiles import MAX_HEAD_DIM, TileConfig, launch_fitting, padded_head_dim

# (block_m, block_n, num_warps, num_stages) per padded head dim. block_m is the streamed query
# tile, block_n the resident key tile, in both passes. Not timed: chosen by compiling for sm_90
# (triton 3.6, ptxas -v, 2026-11) and taking, among 64 x 64 tiles and the halvings of one side,
# those with the fewest register spills; all use under 120 KB of shared memory. A default that
# does not fit still steps down (`launch_fitting`).
_DEFAULTS = {
    "fwd": {16: TileConfig(64, 64, 4, 2), 32: TileConfig(64, 64, 4, 2), 64: TileConfig(64, 64, 4, 2),
            128: TileConfig(64, 64, 8, 2), 256: TileConfig(32, 64, 8, 2)},
    "bwd": {16: TileConfig(64, 64, 8, 2), 32: TileConfig(64, 64, 8, 2), 64: TileConfig(64, 64, 8, 2),
            128: TileConfig(32, 64, 8, 2), 256: TileConfig(32, 32, 8, 2)},
}


def fa1_default_tiles(head_dim: int, pass_: str) -> TileConfig:
    """The FA1 arm's tile config for `pass_` ("fwd" or "bwd") at this (unpadded) head dim."""
    if pass_ not in _DEFAULTS:
        raise ValueError(f"pass_ must be 'fwd' or 'bwd', got {pass_!r}")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head dim must be in [1, {MAX_HEAD_DIM}], got {head_dim}")
    return _DEFAULTS[pass_][padded_head_dim(head_dim)]


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------

@triton.jit
def _fa1_fwd_inner(k, v, Q, O, L, M, offs_n, offs_d, start, end, qk_scale, N_Q, N_K,
                   stride_qm, stride_qd,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr,
                   CAUSAL: tl.constexpr, EVEN_D: tl.constexpr):
    """Query blocks [start, end) against one resident key block: read O, l, m, update, write back.

    Q points at this (batch, head)'s query row 0, O at its float32 (Nq, HEAD_DIM) scratch, L and
    M at its l and m rows.
    """
    rel_m = tl.arange(0, BLOCK_M)
    for start_m in tl.range(start, end, BLOCK_M):
        offs_m = start_m + rel_m
        rows = tl.cast(offs_m, tl.int64)
        q = _load_tile(Q + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                       offs_m, N_Q, offs_d, HEAD_DIM, MASK, not EVEN_D)
        o_ptrs = O + rows[:, None] * HEAD_DIM + offs_d[None, :]
        o_i = _load_tile(o_ptrs, offs_m, N_Q, offs_d, HEAD_DIM, MASK, not EVEN_D)
        if MASK:
            l_i = tl.load(L + offs_m, mask=offs_m < N_Q, other=0.0)
            m_i = tl.load(M + offs_m, mask=offs_m < N_Q, other=float("-inf"))
        else:
            l_i = tl.load(L + offs_m)
            m_i = tl.load(M + offs_m)

        s = tl.dot(q, tl.trans(k)) * qk_scale
        if MASK:
            visible = offs_n[None, :] < N_K
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None] + (N_K - N_Q))
            # A finite fill keeps rows with no visible key in this block NaN-free: a row that
            # saw keys before keeps its larger m_i and gets p = 0 here; a row that sees no key
            # at all is zeroed in the epilogue.
            s = tl.where(visible, s, -1.0e6)
        m_ij = tl.max(s, 1)
        p = tl.math.exp2(s - m_ij[:, None])
        l_ij = tl.sum(p, 1)
        m_new = tl.maximum(m_i, m_ij)
        alpha = tl.math.exp2(m_i - m_new)
        beta = tl.math.exp2(m_ij - m_new)
        l_new = alpha * l_i + beta * l_ij
        pv = tl.dot(p.to(v.dtype), v)
        o_i = (o_i * (l_i * alpha)[:, None] + pv * beta[:, None]) / l_new[:, None]

        # Every thread has read this step's O, l, m rows before any thread overwrites them (a
        # row's l, m can be held by several warps, each using its own copy).
        tl.debug_barrier()
        if MASK:
            tl.store(o_ptrs, o_i, mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM))
            tl.store(L + offs_m, l_new, mask=offs_m < N_Q)
            tl.store(M + offs_m, m_new, mask=offs_m < N_Q)
        else:
            if EVEN_D:
                tl.store(o_ptrs, o_i)
            else:
                tl.store(o_ptrs, o_i, mask=offs_d[None, :] < HEAD_DIM)
            tl.store(L + offs_m, l_new)
            tl.store(M + offs_m, m_new)


@triton.heuristics({
    "EVEN_M": lambda args: args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_N": lambda args: args["N_K"] % args["BLOCK_N"] == 0,
    "EVEN_D": lambda args: args["HEAD_DIM"] == args["HEAD_DIM_PAD"],
})
@triton.jit
def _fa1_fwd(Q, K, V, Out, Lse, OAcc, L, M,
             stride_qz, stride_qh, stride_qm, stride_qd,
             stride_kz, stride_kh, stride_kn, stride_kd,
             stride_vz, stride_vh, stride_vn, stride_vd,
             stride_oz, stride_oh, stride_om, stride_od,
             H, GROUP, N_Q, N_K, qk_scale,
             HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
             EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    tl.static_assert(HEAD_DIM <= HEAD_DIM_PAD, "head dim is padded up, never down")
    off_hz = tl.program_id(0)
    off_z = tl.cast(off_hz // H, tl.int64)
    off_h = off_hz % H
    off_hkv = tl.cast(off_h // GROUP, tl.int64)
    off_h = tl.cast(off_h, tl.int64)
    off_hz64 = tl.cast(off_hz, tl.int64)

    Q += off_z * stride_qz + off_h * stride_qh
    K += off_z * stride_kz + off_hkv * stride_kh
    V += off_z * stride_vz + off_hkv * stride_vh
    Out += off_z * stride_oz + off_h * stride_oh
    OAcc += off_hz64 * N_Q * HEAD_DIM  # float32, contiguous (B, H, Nq, HEAD_DIM)
    L += off_hz64 * N_Q
    M += off_hz64 * N_Q
    Lse += off_hz64 * N_Q

    rel_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    for start_n in range(0, N_K, BLOCK_N):
        offs_n = start_n + rel_n
        cols = tl.cast(offs_n, tl.int64)
        k = _load_tile(K + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                       offs_n, N_K, offs_d, HEAD_DIM, not EVEN_N, not EVEN_D)
        v = _load_tile(V + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                       offs_n, N_K, offs_d, HEAD_DIM, not EVEN_N, not EVEN_D)
        # Causal: [lo, mid) the diagonal band (masked), [mid, even_end) rows that see the whole
        # key block, [even_end, Nq) the ragged last query block; blocks before lo are skipped.
        lo, mid, even_end = _query_bounds(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL, True, EVEN_M)
        _fa1_fwd_inner(k, v, Q, OAcc, L, M, offs_n, offs_d, lo, mid, qk_scale, N_Q, N_K,
                       stride_qm, stride_qd, HEAD_DIM, BLOCK_M, True, CAUSAL, EVEN_D)
        _fa1_fwd_inner(k, v, Q, OAcc, L, M, offs_n, offs_d, mid, even_end, qk_scale, N_Q, N_K,
                       stride_qm, stride_qd, HEAD_DIM, BLOCK_M, not EVEN_N, CAUSAL, EVEN_D)
        _fa1_fwd_inner(k, v, Q, OAcc, L, M, offs_n, offs_d, even_end, N_Q, qk_scale, N_Q, N_K,
                       stride_qm, stride_qd, HEAD_DIM, BLOCK_M, True, CAUSAL, EVEN_D)
        # The next key block reads back the O, l, m rows written here, possibly in other threads.
        tl.debug_barrier()

    # Epilogue: O (float32, already normalised) into the output dtype, and lse = m + log l.
    rel_m = tl.arange(0, BLOCK_M)
    for start_m in range(0, N_Q, BLOCK_M):
        offs_m = start_m + rel_m
        rows = tl.cast(offs_m, tl.int64)
        o = _load_tile(OAcc + rows[:, None] * HEAD_DIM + offs_d[None, :], offs_m, N_Q, offs_d, HEAD_DIM,
                       True, not EVEN_D)
        l_i = tl.load(L + offs_m, mask=offs_m < N_Q, other=1.0)
        m_i = tl.load(M + offs_m, mask=offs_m < N_Q, other=0.0)
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # log2 domain -> natural log
        if CAUSAL:
            sees_a_key = offs_m + (N_K - N_Q) >= 0
            o = tl.where(sees_a_key[:, None], o, 0.0)
            lse = tl.where(sees_a_key, lse, float("-inf"))
        tl.store(Out + rows[:, None] * stride_om + offs_d[None, :] * stride_od, o.to(Out.dtype.element_ty),
                 mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM))
        tl.store(Lse + offs_m, lse, mask=offs_m < N_Q)


def fa1_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
                tiles: TileConfig, *, fit_tiles: bool = False):
    """Launch the FA1 forward. Inputs are validated by the caller (kernels.attention).

    Returns (out, lse) like the FA2 forward: out like q (same strides where q is dense), lse
    (B, H, Nq) float32, natural log.
    """
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    head_dim_pad = padded_head_dim(head_dim)
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    # Algorithm 1, line 2: O = 0, l = 0, m = -inf in HBM.
    o_acc = torch.zeros((batch, heads, n_q, head_dim), device=q.device, dtype=torch.float32)
    row_sum = torch.zeros((batch, heads, n_q), device=q.device, dtype=torch.float32)
    row_max = torch.full((batch, heads, n_q), float("-inf"), device=q.device, dtype=torch.float32)

    def launch(config: TileConfig) -> None:
        launch_kernel(_fa1_fwd, (batch * heads,),
            q, k, v, out, lse, o_acc, row_sum, row_max,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            heads, heads // kv_heads, n_q, n_k, softmax_scale * LOG2E,
            HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
            CAUSAL=causal, num_warps=config.num_warps, num_stages=config.num_stages)

    # A launch that does not fit fails before it runs, so the scratch is still untouched on a retry.
    launch_fitting(launch, tiles, fit_tiles, ("fa1_fwd", q.dtype, head_dim_pad, causal))
    return out, lse


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------

@triton.jit
def _fa1_bwd_inner(dk, dv, k, v, Q, DO, DQAcc, Lse, Delta, offs_n, offs_d, start, end,
                   qk_scale, sm_scale, N_Q, N_K,
                   stride_qm, stride_qd, stride_dom, stride_dod,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr,
                   CAUSAL: tl.constexpr, EVEN_D: tl.constexpr):
    """Query blocks [start, end) against one resident key block: accumulate dK, dV on chip and
    read-modify-write dQ in HBM. Works on the transposed tiles (keys x queries), as the FA2
    dK/dV kernel does, so the dK, dV products need no transpose of the accumulators."""
    rel_m = tl.arange(0, BLOCK_M)
    for start_m in tl.range(start, end, BLOCK_M):
        offs_m = start_m + rel_m
        rows = tl.cast(offs_m, tl.int64)
        q = _load_tile(Q + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                       offs_m, N_Q, offs_d, HEAD_DIM, MASK, not EVEN_D)
        do = _load_tile(DO + rows[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                        offs_m, N_Q, offs_d, HEAD_DIM, MASK, not EVEN_D)
        if MASK:
            lse = tl.load(Lse + offs_m, mask=offs_m < N_Q, other=0.0)
            delta = tl.load(Delta + offs_m, mask=offs_m < N_Q, other=0.0)
        else:
            lse = tl.load(Lse + offs_m)
            delta = tl.load(Delta + offs_m)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :] * 1.4426950408889634)
        if MASK:
            # Also zeroes the rows that see no key at all (lse = -inf makes their exp2 inf).
            visible = (offs_m[None, :] < N_Q) & (offs_n[:, None] < N_K)
            if CAUSAL:
                visible = visible & (offs_n[:, None] <= offs_m[None, :] + (N_K - N_Q))
            p_t = tl.where(visible, p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)

        dq_ptrs = DQAcc + rows[:, None] * HEAD_DIM + offs_d[None, :]
        dq = _load_tile(dq_ptrs, offs_m, N_Q, offs_d, HEAD_DIM, MASK, not EVEN_D)
        dq += tl.dot(tl.trans(ds_t.to(k.dtype)), k) * sm_scale
        tl.debug_barrier()  # every thread has read this step's dQ rows before any overwrites them
        if MASK:
            tl.store(dq_ptrs, dq, mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM))
        elif EVEN_D:
            tl.store(dq_ptrs, dq)
        else:
            tl.store(dq_ptrs, dq, mask=offs_d[None, :] < HEAD_DIM)
    return dk, dv


@triton.heuristics({
    "EVEN_M": lambda args: args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_N": lambda args: args["N_K"] % args["BLOCK_N"] == 0,
    "EVEN_D": lambda args: args["HEAD_DIM"] == args["HEAD_DIM_PAD"],
})
@triton.jit
def _fa1_bwd(Q, K, V, DO, DK, DV, DQAcc, Lse, Delta,
             stride_qz, stride_qh, stride_qm, stride_qd,
             stride_kz, stride_kh, stride_kn, stride_kd,
             stride_vz, stride_vh, stride_vn, stride_vd,
             stride_doz, stride_doh, stride_dom, stride_dod,
             stride_dkz, stride_dkh, stride_dkn, stride_dkd,
             stride_dvz, stride_dvh, stride_dvn, stride_dvd,
             H, GROUP, N_Q, N_K, qk_scale, sm_scale,
             HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
             EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr):
    """DK, DV are indexed by the query head: the launcher passes per-query-head buffers when
    GROUP > 1 and dk, dv themselves when GROUP == 1."""
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    off_hz = tl.program_id(0)
    off_z = tl.cast(off_hz // H, tl.int64)
    off_h = off_hz % H
    off_hkv = tl.cast(off_h // GROUP, tl.int64)
    off_h = tl.cast(off_h, tl.int64)
    off_hz64 = tl.cast(off_hz, tl.int64)

    Q += off_z * stride_qz + off_h * stride_qh
    DO += off_z * stride_doz + off_h * stride_doh
    K += off_z * stride_kz + off_hkv * stride_kh
    V += off_z * stride_vz + off_hkv * stride_vh
    DK += off_z * stride_dkz + off_h * stride_dkh
    DV += off_z * stride_dvz + off_h * stride_dvh
    DQAcc += off_hz64 * N_Q * HEAD_DIM  # float32, contiguous (B, H, Nq, HEAD_DIM)
    Lse += off_hz64 * N_Q
    Delta += off_hz64 * N_Q

    rel_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    for start_n in range(0, N_K, BLOCK_N):
        offs_n = start_n + rel_n
        cols = tl.cast(offs_n, tl.int64)
        k = _load_tile(K + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                       offs_n, N_K, offs_d, HEAD_DIM, not EVEN_N, not EVEN_D)
        v = _load_tile(V + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                       offs_n, N_K, offs_d, HEAD_DIM, not EVEN_N, not EVEN_D)
        dk = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
        lo, mid, even_end = _query_bounds(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL, True, EVEN_M)
        dk, dv = _fa1_bwd_inner(dk, dv, k, v, Q, DO, DQAcc, Lse, Delta, offs_n, offs_d, lo, mid,
                                qk_scale, sm_scale, N_Q, N_K, stride_qm, stride_qd, stride_dom, stride_dod,
                                HEAD_DIM, BLOCK_M, True, CAUSAL, EVEN_D)
        dk, dv = _fa1_bwd_inner(dk, dv, k, v, Q, DO, DQAcc, Lse, Delta, offs_n, offs_d, mid, even_end,
                                qk_scale, sm_scale, N_Q, N_K, stride_qm, stride_qd, stride_dom, stride_dod,
                                HEAD_DIM, BLOCK_M, not EVEN_N, CAUSAL, EVEN_D)
        dk, dv = _fa1_bwd_inner(dk, dv, k, v, Q, DO, DQAcc, Lse, Delta, offs_n, offs_d, even_end, N_Q,
                                qk_scale, sm_scale, N_Q, N_K, stride_qm, stride_qd, stride_dom, stride_dod,
                                HEAD_DIM, BLOCK_M, True, CAUSAL, EVEN_D)
        store_mask = (offs_n[:, None] < N_K) & (offs_d[None, :] < HEAD_DIM)
        tl.store(DK + cols[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
                 (dk * sm_scale).to(DK.dtype.element_ty), mask=store_mask)
        tl.store(DV + cols[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
                 dv.to(DV.dtype.element_ty), mask=store_mask)
        # The next key block reads back the dQ rows written here, possibly in other threads.
        tl.debug_barrier()


def fa1_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, softmax_scale: float, causal: bool, tiles: TileConfig, *,
                 fit_tiles: bool = False):
    """Launch the FA1 backward; returns (dq, dk, dv) shaped and strided like q, k, v where those are dense."""
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    group = heads // kv_heads
    head_dim_pad = padded_head_dim(head_dim)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    delta = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    delta_block = 64
    launch_kernel(_attn_bwd_delta, (cdiv(n_q, delta_block) * batch * heads,),
        out, do, delta, delta, *out.stride(), *do.stride(), heads, n_q, delta, n_q,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, BLOCK_M=delta_block, VARLEN=False, ZERO_DQ=False)

    dq_acc = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=torch.float32)
    if group > 1:  # one dK, dV per query head, summed over the group below
        dk_heads = torch.empty((batch, heads, n_k, head_dim), device=q.device, dtype=torch.float32)
        dv_heads = torch.empty((batch, heads, n_k, head_dim), device=q.device, dtype=torch.float32)
    else:
        dk_heads, dv_heads = dk, dv

    def launch(config: TileConfig) -> None:
        dq_acc.zero_()  # Algorithm 4: dQ = 0 in HBM; once per launch attempt
        launch_kernel(_fa1_bwd, (batch * heads,),
            q, k, v, do, dk_heads, dv_heads, dq_acc, lse, delta,
            *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk_heads.stride(), *dv_heads.stride(),
            heads, group, n_q, n_k, softmax_scale * LOG2E, softmax_scale,
            HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
            CAUSAL=causal, num_warps=config.num_warps, num_stages=config.num_stages)

    launch_fitting(launch, tiles, fit_tiles, ("fa1_bwd", q.dtype, head_dim_pad, causal))
    dq.copy_(dq_acc)
    if group > 1:
        dk.copy_(dk_heads.view(batch, kv_heads, group, n_k, head_dim).sum(dim=2))
        dv.copy_(dv_heads.view(batch, kv_heads, group, n_k, head_dim).sum(dim=2))
    return dq, dk, dv
