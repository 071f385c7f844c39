"""FlashAttention-2 backward pass: Triton kernels and their launcher.

Launches, as in the FlashAttention-2 paper's Algorithm 2:
  1. `_attn_bwd_delta`: delta = rowsum(dO * O), one float32 per query row; it also zeroes the
     float32 dQ accumulator when the dK/dV kernel accumulates dQ.
  2. `_attn_bwd_dkdv`: one program per (key block, batch x kv head). It keeps K, V and the
     dK, dV accumulators on chip and walks the query blocks of every query head that shares
     this K/V head (grouped-query attention sums their gradients here, in a fixed order),
     recomputing P = exp(S - lse) from Q, K and the saved log-sum-exp.
  3. `_attn_bwd_dq`: one program per (query block, batch x head) walking the key blocks, so
     every dQ element is written once by one program: bitwise reproducible, at the price of
     recomputing Q K^T and dO V^T (7 N x N x D matmuls per tile pair against 5). Measured on
     the H200 it is also faster than accumulating dQ atomically (notes/perf.md, v4).
  ATOMIC_DQ (`atomic_dq=True`, an ablation): the dK/dV kernel also adds each tile's dQ
     contribution dS K into a float32 accumulator with relaxed atomics (vectorised
     red.global.add.v4.f32 on sm_90; the paper's scheme), the delta kernel zeroes it, a copy
     converts it, and launch 3 is skipped; not deterministic.

Training features, the forward's compile-time switches, with the helpers of `_features.py`:
  WINDOW   both kernels skip the tiles outside the window (the dK/dV kernel's query range and
           the dQ kernel's key range come from the window bounds); boundary tiles are masked
  SOFTCAP  dS is multiplied by 1 - tanh^2 (the chain rule through the cap)
  ALIBI    the bias enters P; it is not differentiated (the slopes get no gradient)
  DROPOUT  the mask is regenerated from the seed: dV uses the kept P / (1 - p), and
           dS = P * (dP_kept / (1 - p) - delta) with delta = rowsum(dO * O)

Switches for the ablations:
  USE_SCORES=True   read the forward's stored scores instead of recomputing Q K^T
  SKIP_MASKED=False causal: visit every tile and mask it

Head dims in two column chunks (HEAD_DIM_B > 0, as the forward's: `tiles.head_dim_chunks`): both
kernels hold and load each operand as two chunks, sum the chunks' dots for S and dP, and keep one
dK, dV or dQ accumulator per chunk. Atomic dQ keeps one padded chunk (its float32 accumulator's rows
are HEAD_DIM_PAD wide); the delta kernel reads padded rows either way.

Scores and the log-sum-exp are handled in the log2 domain so P is an exp2.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._features import (LOG2E, _dropout_keep, _scores, _visible, _window_key_bounds,
                               _window_query_bounds)
from kernels._forward import (_causal_key_bounds, _load_tile, _varlen_bounds, check_varlen, strides, varlen_args,
                              varlen_shape)
from kernels._launch import cdiv, launch_kernel
from kernels.options import AttentionOptions, feature_switches
from kernels.tiles import TileConfig, head_dim_chunks, launch_fitting, padded_head_dim


@triton.jit
def _attn_bwd_delta(Out, DO, Delta, DQacc,
                    stride_oz, stride_oh, stride_om, stride_od,
                    stride_doz, stride_doh, stride_dom, stride_dod,
                    H, N_Q, Cu_q, TOTAL_Q,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                    VARLEN: tl.constexpr, ZERO_DQ: tl.constexpr):
    """delta of one query block; with ZERO_DQ, zero the same rows of the dQ accumulator, which
    is laid out like delta with HEAD_DIM_PAD floats per row."""
    num_m_blocks = tl.cdiv(N_Q, BLOCK_M)
    start_m = tl.program_id(0) % num_m_blocks
    off_hz = tl.program_id(0) // num_m_blocks
    off_z = tl.cast(off_hz // H, tl.int64)
    off_h = tl.cast(off_hz % H, tl.int64)
    if VARLEN:  # see _attn_fwd; rows past the sequence's end are masked
        seq_q0, _, N_Q, _ = _varlen_bounds(Cu_q, Cu_q, off_z)
        Out += seq_q0 * stride_om
        DO += seq_q0 * stride_dom
        Delta += off_h * TOTAL_Q + seq_q0
        DQacc += (off_h * TOTAL_Q + seq_q0) * HEAD_DIM_PAD
    else:
        Delta += tl.cast(off_hz, tl.int64) * N_Q
        DQacc += tl.cast(off_hz, tl.int64) * N_Q * HEAD_DIM_PAD
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    rows = tl.cast(offs_m, tl.int64)
    o = _load_tile(Out + off_z * stride_oz + off_h * stride_oh + rows[:, None] * stride_om
                   + offs_d[None, :] * stride_od, offs_m, N_Q, offs_d, HEAD_DIM, True, True)
    do = _load_tile(DO + off_z * stride_doz + off_h * stride_doh + rows[:, None] * stride_dom
                    + offs_d[None, :] * stride_dod, offs_m, N_Q, offs_d, HEAD_DIM, True, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta + offs_m, delta, mask=offs_m < N_Q)
    if ZERO_DQ:
        tl.store(DQacc + rows[:, None] * HEAD_DIM_PAD + offs_d[None, :],
                 tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32), mask=offs_m[:, None] < N_Q)


@triton.jit
def _attn_bwd_dkdv_inner(dk, dv, dk_b, dv_b, k, v, k_b, v_b, q_ptrs, do_ptrs, qb_ptrs, dob_ptrs, dq_ptrs, s_ptrs,
                         lse_ptr, delta_ptr, start_n, offs_n, offs_d, offs_db, start, end, qk_scale, sm_scale, N_Q, N_K,
                         stride_qm, stride_dom,
                         off_hz, slope_log2, seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale,
                         HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_B: tl.constexpr,
                         BLOCK_M: tl.constexpr,
                         MASK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                         ATOMIC_DQ: tl.constexpr, USE_SCORES: tl.constexpr,
                         WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, DROPOUT: tl.constexpr):
    """Accumulate dK, dV of one key block over query blocks [start, end) of one head.

    Works on the transposed tiles (keys x queries) so the dK, dV products need no transpose
    of the accumulators. Pointers are positioned at query row `start`; ATOMIC_DQ adds dS K
    into the float32 dQ accumulator rows (HEAD_DIM_PAD floats each; its padding columns get
    zeros, since K's are zero). HEAD_DIM_B > 0: the head dim's second column chunk (see `_attn_fwd`)
    runs beside the first: k_b, v_b, the qb/dob pointers and the dk_b, dv_b accumulators.
    """
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in tl.range(start, end, BLOCK_M):
        offs_m = start_m + offs_m0
        q = _load_tile(q_ptrs, offs_m, N_Q, offs_d, HEAD_DIM, MASK, not EVEN_D and HEAD_DIM_B == 0)
        if HEAD_DIM_B > 0:
            q_b = _load_tile(qb_ptrs, offs_m, N_Q, offs_db, HEAD_DIM, MASK, not EVEN_D)
        if MASK:
            lse = tl.load(lse_ptr + offs_m, mask=offs_m < N_Q, other=0.0)
            delta = tl.load(delta_ptr + offs_m, mask=offs_m < N_Q, other=0.0)
        else:
            lse = tl.load(lse_ptr + offs_m)
            delta = tl.load(delta_ptr + offs_m)
        if USE_SCORES:
            s_t = tl.load(s_ptrs + tl.cast(start_m, tl.int64) * N_K,
                          mask=(offs_n[:, None] < N_K) & (offs_m[None, :] < N_Q), other=0.0)
            p_t = tl.math.exp2(s_t - lse[None, :] * 1.4426950408889634)
        else:
            qk_t = tl.dot(k, tl.trans(q))
            if HEAD_DIM_B > 0:
                qk_t = tl.dot(k_b, tl.trans(q_b), qk_t)
            if SOFTCAP or ALIBI:
                s_t, tanh_t = _scores(qk_t, offs_m[None, :], offs_n[:, None], qk_scale, softcap_scale,
                                      softcap_log2, slope_log2, N_Q, N_K, SOFTCAP, ALIBI)
                p_t = tl.math.exp2(s_t - lse[None, :] * 1.4426950408889634)
            else:
                p_t = tl.math.exp2(qk_t * qk_scale - lse[None, :] * 1.4426950408889634)
        if MASK:
            visible = _visible(offs_m[None, :], offs_n[:, None], N_Q, N_K, win_left, win_right, True, CAUSAL, WINDOW)
            p_t = tl.where(visible, p_t, 0.0)
        do = _load_tile(do_ptrs, offs_m, N_Q, offs_d, HEAD_DIM, MASK, not EVEN_D and HEAD_DIM_B == 0)
        if HEAD_DIM_B > 0:
            do_b = _load_tile(dob_ptrs, offs_m, N_Q, offs_db, HEAD_DIM, MASK, not EVEN_D)
        if DROPOUT:  # dV sees the kept, rescaled P; dS uses the undropped P and the kept dP
            keep_t = _dropout_keep(seed, off_hz, offs_m[None, :], offs_n[:, None], dropout_p)
            dv = tl.dot(tl.where(keep_t, p_t * dropout_scale, 0.0).to(do.dtype), do, dv)
            if HEAD_DIM_B > 0:
                dv_b = tl.dot(tl.where(keep_t, p_t * dropout_scale, 0.0).to(do.dtype), do_b, dv_b)
                dp_t = tl.where(keep_t, tl.dot(v_b, tl.trans(do_b), tl.dot(v, tl.trans(do))) * dropout_scale, 0.0)
            else:
                dp_t = tl.where(keep_t, tl.dot(v, tl.trans(do)) * dropout_scale, 0.0)
        else:
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            dp_t = tl.dot(v, tl.trans(do))
            if HEAD_DIM_B > 0:
                dv_b = tl.dot(p_t.to(do.dtype), do_b, dv_b)
                dp_t = tl.dot(v_b, tl.trans(do_b), dp_t)
        ds_t = p_t * (dp_t - delta[None, :])
        if SOFTCAP:  # d(softcap * tanh(x / softcap)) / dx = 1 - tanh^2
            ds_t = ds_t * (1.0 - tanh_t * tanh_t)
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
        if HEAD_DIM_B > 0:
            dk_b = tl.dot(ds_t.to(q.dtype), q_b, dk_b)
        if ATOMIC_DQ:  # relaxed: no ordering is needed, and it vectorises (16-byte rows)
            dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * sm_scale
            if MASK:
                tl.atomic_add(dq_ptrs, dq, mask=offs_m[:, None] < N_Q, sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs, dq, sem="relaxed")
            dq_ptrs += BLOCK_M * HEAD_DIM_PAD
        q_ptrs += BLOCK_M * stride_qm
        do_ptrs += BLOCK_M * stride_dom
        if HEAD_DIM_B > 0:
            qb_ptrs += BLOCK_M * stride_qm
            dob_ptrs += BLOCK_M * stride_dom
    return dk, dv, dk_b, dv_b


@triton.jit
def _query_bounds(start_n, N_Q, N_K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr, EVEN_M: tl.constexpr):
    """Query blocks a key block must visit: [lo, mid) masked, [mid, even_end) unmasked, [.., N_Q) masked."""
    if CAUSAL:
        if SKIP_MASKED:
            first_row = start_n - (N_K - N_Q)  # the first query row that sees key start_n
            lo = tl.maximum(first_row, 0) // BLOCK_M * BLOCK_M
            full_row = start_n + BLOCK_N - 1 - (N_K - N_Q)  # from here on rows see the whole block
            mid = tl.maximum(tl.cdiv(tl.maximum(full_row, 0), BLOCK_M) * BLOCK_M, lo)
        else:
            lo = 0
            mid = tl.cdiv(N_Q, BLOCK_M) * BLOCK_M
    else:
        lo = 0
        mid = 0
    if EVEN_M:
        even_end = N_Q
    else:
        even_end = N_Q // BLOCK_M * BLOCK_M
    mid = tl.minimum(mid, tl.cdiv(N_Q, BLOCK_M) * BLOCK_M)
    lo = tl.minimum(lo, mid)
    return lo, mid, tl.maximum(even_end, mid)


@triton.heuristics({
    "EVEN_M": lambda args: not args["VARLEN"] and args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_N": lambda args: not args["VARLEN"] and args["N_K"] % args["BLOCK_N"] == 0,
    "EVEN_D": lambda args: args["HEAD_DIM"] == args["HEAD_DIM_PAD"] + args["HEAD_DIM_B"],
})
@triton.jit
def _attn_bwd_dkdv(Q, K, V, DO, DK, DV, DQacc, Scores, Lse, Delta,
                   stride_qz, stride_qh, stride_qm, stride_qd,
                   stride_kz, stride_kh, stride_kn, stride_kd,
                   stride_vz, stride_vh, stride_vn, stride_vd,
                   stride_doz, stride_doh, stride_dom, stride_dod,
                   stride_dkz, stride_dkh, stride_dkn, stride_dkd,
                   stride_dvz, stride_dvh, stride_dvn, stride_dvd,
                   H_KV, GROUP, N_Q, N_K, qk_scale, sm_scale,
                   Alibi, stride_az, stride_ah, Seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale,
                   Cu_q, Cu_k, TOTAL_Q,
                   HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_B: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr,
                   ATOMIC_DQ: tl.constexpr, USE_SCORES: tl.constexpr,
                   WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, DROPOUT: tl.constexpr,
                   VARLEN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    tl.static_assert(HEAD_DIM_B == 0 or (HEAD_DIM_PAD < HEAD_DIM and not ATOMIC_DQ),
                     "a second column chunk starts inside the head dim, and not with atomic dQ")
    num_n_blocks = tl.cdiv(N_K, BLOCK_N)
    start_n = tl.program_id(0) % num_n_blocks * BLOCK_N
    off_zkv = tl.program_id(0) // num_n_blocks
    off_z = tl.cast(off_zkv // H_KV, tl.int64)
    off_hkv = tl.cast(off_zkv % H_KV, tl.int64)
    H = H_KV * GROUP
    if VARLEN:  # see _attn_fwd
        seq_q0, seq_k0, N_Q, N_K = _varlen_bounds(Cu_q, Cu_k, off_z)
        if start_n >= N_K:  # past the sequence's end: its keys belong to no program here
            return
        Q += seq_q0 * stride_qm
        DO += seq_q0 * stride_dom
        K += seq_k0 * stride_kn
        V += seq_k0 * stride_vn
        DK += seq_k0 * stride_dkn
        DV += seq_k0 * stride_dvn

    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    col0 = tl.cast(start_n, tl.int64)
    rel_n = tl.arange(0, BLOCK_N)
    k_rows = K + off_z * stride_kz + off_hkv * stride_kh + col0 * stride_kn + rel_n[:, None] * stride_kn
    v_rows = V + off_z * stride_vz + off_hkv * stride_vh + col0 * stride_vn + rel_n[:, None] * stride_vn
    k = _load_tile(k_rows + offs_d[None, :] * stride_kd, offs_n, N_K, offs_d, HEAD_DIM, not EVEN_N,
                   not EVEN_D and HEAD_DIM_B == 0)
    v = _load_tile(v_rows + offs_d[None, :] * stride_vd, offs_n, N_K, offs_d, HEAD_DIM, not EVEN_N,
                   not EVEN_D and HEAD_DIM_B == 0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
    if HEAD_DIM_B > 0:  # the second column chunk (see `_attn_fwd`)
        offs_db = HEAD_DIM_PAD + tl.arange(0, HEAD_DIM_B)
        k_b = _load_tile(k_rows + offs_db[None, :] * stride_kd, offs_n, N_K, offs_db, HEAD_DIM, not EVEN_N, not EVEN_D)
        v_b = _load_tile(v_rows + offs_db[None, :] * stride_vd, offs_n, N_K, offs_db, HEAD_DIM, not EVEN_N, not EVEN_D)
        dk_b = tl.zeros([BLOCK_N, HEAD_DIM_B], dtype=tl.float32)
        dv_b = tl.zeros([BLOCK_N, HEAD_DIM_B], dtype=tl.float32)
    else:  # placeholders the inner loop never reads
        offs_db = offs_d
        k_b = k
        v_b = v
        dk_b = 0.0
        dv_b = 0.0

    if WINDOW:
        # Query tiles outside the window of every key of the block are never visited:
        # [lo, mid) masked, [mid, even_end) unmasked (unless the key block is ragged), [even_end, hi) masked.
        lo, mid, even_end, hi = _window_query_bounds(start_n, N_Q, N_K, win_left, win_right, BLOCK_M, BLOCK_N,
                                                     SKIP_MASKED)
    else:
        lo, mid, even_end = _query_bounds(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL, SKIP_MASKED, EVEN_M)
        hi = N_Q
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)
    lo64 = tl.cast(lo, tl.int64)
    mid64 = tl.cast(mid, tl.int64)
    end64 = tl.cast(even_end, tl.int64)
    offs_m0 = tl.arange(0, BLOCK_M)
    for g in range(0, GROUP):
        off_h = off_hkv * GROUP + g
        off_hz = off_z * H + off_h
        q_rows = Q + off_z * stride_qz + off_h * stride_qh + offs_m0[:, None] * stride_qm
        do_rows = DO + off_z * stride_doz + off_h * stride_doh + offs_m0[:, None] * stride_dom
        q_ptrs = q_rows + offs_d[None, :] * stride_qd
        do_ptrs = do_rows + offs_d[None, :] * stride_dod
        qb_ptrs = q_rows + offs_db[None, :] * stride_qd
        dob_ptrs = do_rows + offs_db[None, :] * stride_dod
        s_ptrs = Scores
        if USE_SCORES:  # float32, contiguous (B, H, Nq, Nk); read transposed
            s_ptrs = Scores + off_hz * N_Q * N_K + offs_m0[None, :] * N_K + offs_n[:, None]
        if VARLEN:  # (H, TOTAL_Q)
            row0 = off_h * TOTAL_Q + seq_q0
        else:
            row0 = off_hz * N_Q
        lse_ptr = Lse + row0
        delta_ptr = Delta + row0
        dq_ptrs = DQacc
        if ATOMIC_DQ:  # float32, laid out like delta with HEAD_DIM_PAD floats per row
            dq_ptrs = DQacc + row0 * HEAD_DIM_PAD + offs_m0[:, None] * HEAD_DIM_PAD + offs_d[None, :]
        slope_log2 = 0.0
        if ALIBI:
            slope_log2 = tl.load(Alibi + off_z * stride_az + off_h * stride_ah).to(tl.float32) * 1.4426950408889634
        # Diagonal band (causal): masked.
        dk, dv, dk_b, dv_b = _attn_bwd_dkdv_inner(
            dk, dv, dk_b, dv_b, k, v, k_b, v_b, q_ptrs + lo64 * stride_qm, do_ptrs + lo64 * stride_dom,
            qb_ptrs + lo64 * stride_qm, dob_ptrs + lo64 * stride_dom, dq_ptrs + lo64 * HEAD_DIM_PAD, s_ptrs, lse_ptr,
            delta_ptr, start_n, offs_n, offs_d, offs_db, lo, mid, qk_scale, sm_scale, N_Q, N_K, stride_qm,
            stride_dom, off_hz, slope_log2, seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p,
            dropout_scale, HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_B, BLOCK_M, True, CAUSAL, EVEN_D, ATOMIC_DQ, USE_SCORES,
            WINDOW, SOFTCAP, ALIBI, DROPOUT)
        # Rows that see the whole key block: unmasked, unless the key block itself is ragged.
        dk, dv, dk_b, dv_b = _attn_bwd_dkdv_inner(
            dk, dv, dk_b, dv_b, k, v, k_b, v_b, q_ptrs + mid64 * stride_qm, do_ptrs + mid64 * stride_dom,
            qb_ptrs + mid64 * stride_qm, dob_ptrs + mid64 * stride_dom, dq_ptrs + mid64 * HEAD_DIM_PAD, s_ptrs, lse_ptr,
            delta_ptr, start_n, offs_n, offs_d, offs_db, mid, even_end, qk_scale, sm_scale, N_Q, N_K, stride_qm,
            stride_dom, off_hz, slope_log2, seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p,
            dropout_scale, HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_B, BLOCK_M, not EVEN_N, CAUSAL, EVEN_D, ATOMIC_DQ, USE_SCORES,
            WINDOW, SOFTCAP, ALIBI, DROPOUT)
        # The ragged last query block.
        dk, dv, dk_b, dv_b = _attn_bwd_dkdv_inner(
            dk, dv, dk_b, dv_b, k, v, k_b, v_b, q_ptrs + end64 * stride_qm, do_ptrs + end64 * stride_dom,
            qb_ptrs + end64 * stride_qm, dob_ptrs + end64 * stride_dom, dq_ptrs + end64 * HEAD_DIM_PAD, s_ptrs, lse_ptr,
            delta_ptr, start_n, offs_n, offs_d, offs_db, even_end, hi, qk_scale, sm_scale, N_Q, N_K, stride_qm,
            stride_dom, off_hz, slope_log2, seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p,
            dropout_scale, HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_B, BLOCK_M, True, CAUSAL, EVEN_D, ATOMIC_DQ, USE_SCORES,
            WINDOW, SOFTCAP, ALIBI, DROPOUT)

    dk = dk * sm_scale
    dk_rows = DK + off_z * stride_dkz + off_hkv * stride_dkh + col0 * stride_dkn + rel_n[:, None] * stride_dkn
    dv_rows = DV + off_z * stride_dvz + off_hkv * stride_dvh + col0 * stride_dvn + rel_n[:, None] * stride_dvn
    store_mask = (offs_n[:, None] < N_K) & (offs_d[None, :] < HEAD_DIM)
    tl.store(dk_rows + offs_d[None, :] * stride_dkd, dk.to(DK.dtype.element_ty), mask=store_mask)
    tl.store(dv_rows + offs_d[None, :] * stride_dvd, dv.to(DV.dtype.element_ty), mask=store_mask)
    if HEAD_DIM_B > 0:
        store_mask_b = (offs_n[:, None] < N_K) & (offs_db[None, :] < HEAD_DIM)
        tl.store(dk_rows + offs_db[None, :] * stride_dkd, (dk_b * sm_scale).to(DK.dtype.element_ty), mask=store_mask_b)
        tl.store(dv_rows + offs_db[None, :] * stride_dvd, dv_b.to(DV.dtype.element_ty), mask=store_mask_b)


@triton.jit
def _attn_bwd_dq_inner(dq, dq_b, q, do, q_b, do_b, lse, delta, k_ptrs, v_ptrs, kb_ptrs, vb_ptrs, s_ptrs, offs_m,
                       offs_n, offs_d, offs_db, start, end, qk_scale, N_Q, N_K, stride_kn, stride_vn,
                       off_hz, slope_log2, seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale,
                       HEAD_DIM: tl.constexpr, HEAD_DIM_B: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                       CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, USE_SCORES: tl.constexpr,
                       WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, DROPOUT: tl.constexpr):
    """Accumulate dQ of one query block over key tiles [start, end); pointers at key `start`.
    HEAD_DIM_B > 0: the second column chunk beside the first (q_b, do_b, kb/vb pointers, dq_b)."""
    for start_n in tl.range(start, end, BLOCK_N):
        cols = start_n + offs_n
        k = _load_tile(k_ptrs, cols, N_K, offs_d, HEAD_DIM, MASK, not EVEN_D and HEAD_DIM_B == 0)
        v = _load_tile(v_ptrs, cols, N_K, offs_d, HEAD_DIM, MASK, not EVEN_D and HEAD_DIM_B == 0)
        if HEAD_DIM_B > 0:
            k_b = _load_tile(kb_ptrs, cols, N_K, offs_db, HEAD_DIM, MASK, not EVEN_D)
            v_b = _load_tile(vb_ptrs, cols, N_K, offs_db, HEAD_DIM, MASK, not EVEN_D)
        if USE_SCORES:
            s = tl.load(s_ptrs + start_n, mask=(offs_m[:, None] < N_Q) & (cols[None, :] < N_K), other=0.0)
            p = tl.math.exp2(s - lse[:, None])
        else:
            qk = tl.dot(q, tl.trans(k))
            if HEAD_DIM_B > 0:
                qk = tl.dot(q_b, tl.trans(k_b), qk)
            if SOFTCAP or ALIBI:
                s, tanh_s = _scores(qk, offs_m[:, None], cols[None, :], qk_scale, softcap_scale,
                                    softcap_log2, slope_log2, N_Q, N_K, SOFTCAP, ALIBI)
                p = tl.math.exp2(s - lse[:, None])
            else:
                p = tl.math.exp2(qk * qk_scale - lse[:, None])
        if MASK:
            visible = _visible(offs_m[:, None], cols[None, :], N_Q, N_K, win_left, win_right, False, CAUSAL, WINDOW)
            p = tl.where(visible, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        if HEAD_DIM_B > 0:
            dp = tl.dot(do_b, tl.trans(v_b), dp)
        if DROPOUT:
            dp = tl.where(_dropout_keep(seed, off_hz, offs_m[:, None], cols[None, :], dropout_p),
                          dp * dropout_scale, 0.0)
        ds = p * (dp - delta[:, None])
        if SOFTCAP:
            ds = ds * (1.0 - tanh_s * tanh_s)
        dq = tl.dot(ds.to(k.dtype), k, dq)
        if HEAD_DIM_B > 0:
            dq_b = tl.dot(ds.to(k_b.dtype), k_b, dq_b)
            kb_ptrs += BLOCK_N * stride_kn
            vb_ptrs += BLOCK_N * stride_vn
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return dq, dq_b


@triton.heuristics({
    "EVEN_M": lambda args: not args["VARLEN"] and args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_D": lambda args: args["HEAD_DIM"] == args["HEAD_DIM_PAD"] + args["HEAD_DIM_B"],
})
@triton.jit
def _attn_bwd_dq(Q, K, V, DO, DQ, Scores, Lse, Delta,
                 stride_qz, stride_qh, stride_qm, stride_qd,
                 stride_kz, stride_kh, stride_kn, stride_kd,
                 stride_vz, stride_vh, stride_vn, stride_vd,
                 stride_doz, stride_doh, stride_dom, stride_dod,
                 stride_dqz, stride_dqh, stride_dqm, stride_dqd,
                 H, GROUP, N_Q, N_K, qk_scale, sm_scale,
                 Alibi, stride_az, stride_ah, Seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale,
                 Cu_q, Cu_k, TOTAL_Q,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_B: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr, USE_SCORES: tl.constexpr,
                 WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, DROPOUT: tl.constexpr,
                 VARLEN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_D: tl.constexpr):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    tl.static_assert(HEAD_DIM_B == 0 or HEAD_DIM_PAD < HEAD_DIM, "a second column chunk starts inside the head dim")
    num_m_blocks = tl.cdiv(N_Q, BLOCK_M)
    pid = tl.program_id(0)
    off_hz = pid // num_m_blocks
    start_m = pid % num_m_blocks
    if CAUSAL or WINDOW:
        start_m = num_m_blocks - 1 - start_m
    off_z = tl.cast(off_hz // H, tl.int64)
    off_h = off_hz % H
    off_hkv = tl.cast(off_h // GROUP, tl.int64)
    off_h = tl.cast(off_h, tl.int64)
    off_hz64 = tl.cast(off_hz, tl.int64)
    row0 = tl.cast(start_m * BLOCK_M, tl.int64)
    if VARLEN:  # see _attn_fwd
        seq_q0, seq_k0, N_Q, N_K = _varlen_bounds(Cu_q, Cu_k, off_z)
        if start_m * BLOCK_M >= N_Q:  # past the sequence's end
            return
        Q += seq_q0 * stride_qm
        DO += seq_q0 * stride_dom
        DQ += seq_q0 * stride_dqm
        K += seq_k0 * stride_kn
        V += seq_k0 * stride_vn
        Lse += off_h * TOTAL_Q + seq_q0
        Delta += off_h * TOTAL_Q + seq_q0
    else:
        Lse += off_hz64 * N_Q
        Delta += off_hz64 * N_Q

    rel_m = tl.arange(0, BLOCK_M)
    offs_m = start_m * BLOCK_M + rel_m
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    q_rows = Q + off_z * stride_qz + off_h * stride_qh + row0 * stride_qm + rel_m[:, None] * stride_qm
    do_rows = DO + off_z * stride_doz + off_h * stride_doh + row0 * stride_dom + rel_m[:, None] * stride_dom
    q = _load_tile(q_rows + offs_d[None, :] * stride_qd, offs_m, N_Q, offs_d, HEAD_DIM, not EVEN_M,
                   not EVEN_D and HEAD_DIM_B == 0)
    do = _load_tile(do_rows + offs_d[None, :] * stride_dod, offs_m, N_Q, offs_d, HEAD_DIM, not EVEN_M,
                    not EVEN_D and HEAD_DIM_B == 0)
    if EVEN_M:
        lse = tl.load(Lse + offs_m) * 1.4426950408889634
        delta = tl.load(Delta + offs_m)
    else:
        lse = tl.load(Lse + offs_m, mask=offs_m < N_Q, other=0.0) * 1.4426950408889634
        delta = tl.load(Delta + offs_m, mask=offs_m < N_Q, other=0.0)

    k_rows = K + off_z * stride_kz + off_hkv * stride_kh + offs_n[:, None] * stride_kn
    v_rows = V + off_z * stride_vz + off_hkv * stride_vh + offs_n[:, None] * stride_vn
    k_ptrs = k_rows + offs_d[None, :] * stride_kd
    v_ptrs = v_rows + offs_d[None, :] * stride_vd
    if HEAD_DIM_B > 0:  # the second column chunk (see `_attn_fwd`)
        offs_db = HEAD_DIM_PAD + tl.arange(0, HEAD_DIM_B)
        q_b = _load_tile(q_rows + offs_db[None, :] * stride_qd, offs_m, N_Q, offs_db, HEAD_DIM, not EVEN_M, not EVEN_D)
        do_b = _load_tile(do_rows + offs_db[None, :] * stride_dod, offs_m, N_Q, offs_db, HEAD_DIM, not EVEN_M,
                          not EVEN_D)
        kb_ptrs = k_rows + offs_db[None, :] * stride_kd
        vb_ptrs = v_rows + offs_db[None, :] * stride_vd
        dq_b = tl.zeros([BLOCK_M, HEAD_DIM_B], dtype=tl.float32)
    else:  # placeholders the inner loop never reads
        offs_db = offs_d
        q_b = q
        do_b = do
        kb_ptrs = k_ptrs
        vb_ptrs = v_ptrs
        dq_b = 0.0
    s_ptrs = Scores
    if USE_SCORES:
        s_ptrs = Scores + off_hz64 * N_Q * N_K + row0 * N_K + rel_m[:, None] * N_K + offs_n[None, :]
    dq = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)

    slope_log2 = 0.0
    if ALIBI:
        slope_log2 = tl.load(Alibi + off_z * stride_az + off_h * stride_ah).to(tl.float32) * 1.4426950408889634
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)
    if WINDOW:  # key tiles outside every row's window are skipped; [a, b) needs no mask
        lo, a, b, hi = _window_key_bounds(start_m, N_Q, N_K, win_left, win_right, BLOCK_M, BLOCK_N, SKIP_MASKED)
        lo64 = tl.cast(lo, tl.int64)
        a64 = tl.cast(a, tl.int64)
        b64 = tl.cast(b, tl.int64)
        dq, dq_b = _attn_bwd_dq_inner(
            dq, dq_b, q, do, q_b, do_b, lse, delta, k_ptrs + lo64 * stride_kn, v_ptrs + lo64 * stride_vn, kb_ptrs + lo64 * stride_kn, vb_ptrs + lo64 * stride_vn, s_ptrs, offs_m, offs_n,
            offs_d, offs_db, lo, a, qk_scale, N_Q, N_K, stride_kn, stride_vn, off_hz, slope_log2, seed,
            win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale, HEAD_DIM, HEAD_DIM_B,
            BLOCK_N, True, CAUSAL, EVEN_D, USE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT)
        dq, dq_b = _attn_bwd_dq_inner(
            dq, dq_b, q, do, q_b, do_b, lse, delta, k_ptrs + a64 * stride_kn, v_ptrs + a64 * stride_vn, kb_ptrs + a64 * stride_kn, vb_ptrs + a64 * stride_vn, s_ptrs, offs_m, offs_n,
            offs_d, offs_db, a, b, qk_scale, N_Q, N_K, stride_kn, stride_vn, off_hz, slope_log2, seed,
            win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale, HEAD_DIM, HEAD_DIM_B,
            BLOCK_N, False, CAUSAL, EVEN_D, USE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT)
        dq, dq_b = _attn_bwd_dq_inner(
            dq, dq_b, q, do, q_b, do_b, lse, delta, k_ptrs + b64 * stride_kn, v_ptrs + b64 * stride_vn, kb_ptrs + b64 * stride_kn, vb_ptrs + b64 * stride_vn, s_ptrs, offs_m, offs_n,
            offs_d, offs_db, b, hi, qk_scale, N_Q, N_K, stride_kn, stride_vn, off_hz, slope_log2, seed,
            win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale, HEAD_DIM, HEAD_DIM_B,
            BLOCK_N, True, CAUSAL, EVEN_D, USE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT)
    else:
        mid, hi = _causal_key_bounds(start_m, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL, SKIP_MASKED)
        dq, dq_b = _attn_bwd_dq_inner(
            dq, dq_b, q, do, q_b, do_b, lse, delta, k_ptrs, v_ptrs, kb_ptrs, vb_ptrs, s_ptrs, offs_m, offs_n,
            offs_d, offs_db, 0, mid, qk_scale, N_Q, N_K, stride_kn, stride_vn, off_hz, slope_log2, seed,
            win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale, HEAD_DIM, HEAD_DIM_B,
            BLOCK_N, False, CAUSAL, EVEN_D, USE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT)
        mid64 = tl.cast(mid, tl.int64)
        dq, dq_b = _attn_bwd_dq_inner(
            dq, dq_b, q, do, q_b, do_b, lse, delta, k_ptrs + mid64 * stride_kn, v_ptrs + mid64 * stride_vn, kb_ptrs + mid64 * stride_kn, vb_ptrs + mid64 * stride_vn, s_ptrs, offs_m, offs_n,
            offs_d, offs_db, mid, hi, qk_scale, N_Q, N_K, stride_kn, stride_vn, off_hz, slope_log2, seed,
            win_left, win_right, softcap_scale, softcap_log2, dropout_p, dropout_scale, HEAD_DIM, HEAD_DIM_B,
            BLOCK_N, True, CAUSAL, EVEN_D, USE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT)
    dq = dq * sm_scale
    dq_rows = DQ + off_z * stride_dqz + off_h * stride_dqh + row0 * stride_dqm + rel_m[:, None] * stride_dqm
    tl.store(dq_rows + offs_d[None, :] * stride_dqd, dq.to(DQ.dtype.element_ty),
             mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM))
    if HEAD_DIM_B > 0:
        tl.store(dq_rows + offs_db[None, :] * stride_dqd, (dq_b * sm_scale).to(DQ.dtype.element_ty),
                 mask=(offs_m[:, None] < N_Q) & (offs_db[None, :] < HEAD_DIM))


def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, scores: torch.Tensor, opts: AttentionOptions,
                       alibi_slopes: torch.Tensor | None = None, dropout_seed: torch.Tensor | None = None,
                       cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None):
    """Launch the backward; returns (dq, dk, dv) shaped and strided like q, k, v where those are dense.

    Tiles come from `opts.bwd_tiles`; `opts.fit_bwd_tiles` steps down where a kernel does not
    fit the GPU (default configs). `not opts.recompute` reads the forward's `scores`;
    `opts.atomic_dq` accumulates dQ atomically instead of in the dQ kernel. A packed
    batch (cu_seqlens_q, cu_seqlens_k) is laid out as `attention_forward` describes; one launch
    per kernel covers it.
    """
    varlen = check_varlen(opts, cu_seqlens_q, cu_seqlens_k)
    heads, total_q, head_dim = q.shape[1:]
    batch, n_q, n_k = varlen_shape(q, k, opts, cu_seqlens_q)
    kv_heads = k.shape[1]
    head_dim_pad = padded_head_dim(head_dim)  # the delta kernel's and the atomic dQ accumulator's columns
    # the dK/dV and dQ kernels' column chunks; atomic dQ keeps one padded chunk (its accumulator's rows)
    chunk_a, chunk_b = (head_dim_pad, 0) if opts.atomic_dq else head_dim_chunks(head_dim)
    softmax_scale = opts.softmax_scale
    qk_scale = softmax_scale * LOG2E
    atomic_dq, tiles, fit_tiles = opts.atomic_dq, TileConfig(*opts.bwd_tiles), opts.fit_bwd_tiles
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    delta = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    if atomic_dq:  # float32 rows of head_dim_pad beside delta's; zeroed by the delta kernel
        dq_acc = torch.empty((*q.shape[:3], head_dim_pad), device=q.device, dtype=torch.float32)
    else:
        dq_acc = delta
    packed = varlen_args(cu_seqlens_q, cu_seqlens_k, total_q, delta)

    delta_block = 64
    launch_kernel(_attn_bwd_delta, (cdiv(n_q, delta_block) * batch * heads,),
        out, do, delta, dq_acc, *strides(out, varlen), *strides(do, varlen), heads, n_q, packed["Cu_q"], total_q,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, BLOCK_M=delta_block, VARLEN=varlen, ZERO_DQ=atomic_dq)

    features = opts.kernel_args(n_q, n_k, alibi_slopes, dropout_seed, delta)
    features.update(packed)
    switches = dict(SKIP_MASKED=opts.skip_masked_tiles, USE_SCORES=not opts.recompute)

    def launch_dkdv(config: TileConfig) -> None:
        launch_kernel(_attn_bwd_dkdv, (cdiv(n_k, config.block_n) * batch * kv_heads,),
            q, k, v, do, dk, dv, dq_acc, scores, lse, delta,
            *strides(q, varlen), *strides(k, varlen), *strides(v, varlen), *strides(do, varlen),
            *strides(dk, varlen), *strides(dv, varlen),
            kv_heads, heads // kv_heads, n_q, n_k, qk_scale, softmax_scale,
            HEAD_DIM=head_dim, HEAD_DIM_PAD=chunk_a, HEAD_DIM_B=chunk_b, BLOCK_M=config.block_m,
            BLOCK_N=config.block_n, ATOMIC_DQ=atomic_dq, num_warps=config.num_warps, num_stages=config.num_stages, **switches, **features)

    def launch_dq(config: TileConfig) -> None:
        # The mirrored tile: BLOCK_N queries resident, keys streamed BLOCK_M at a time.
        launch_kernel(_attn_bwd_dq, (cdiv(n_q, config.block_n) * batch * heads,),
            q, k, v, do, dq, scores, lse, delta,
            *strides(q, varlen), *strides(k, varlen), *strides(v, varlen), *strides(do, varlen),
            *strides(dq, varlen),
            heads, heads // kv_heads, n_q, n_k, qk_scale, softmax_scale,
            HEAD_DIM=head_dim, HEAD_DIM_PAD=chunk_a, HEAD_DIM_B=chunk_b, BLOCK_M=config.block_n,
            BLOCK_N=config.block_m, num_warps=config.num_warps, num_stages=config.num_stages, **switches, **features)

    key = (q.dtype, (chunk_a, chunk_b), tuple(switches.items()) + feature_switches(features) + (varlen,))
    launch_fitting(launch_dkdv, tiles, fit_tiles, ("bwd_dkdv", atomic_dq) + key)
    if atomic_dq:
        dq.copy_(dq_acc[..., :head_dim])
    else:
        launch_fitting(launch_dq, tiles, fit_tiles, ("bwd_dq",) + key)
    return dq, dk, dv
