"""The Hopper (sm_90) backward: one pass over the tile pairs in Gluon, dQ by TMA reduce-add.

The portable backward (`_backward.py`) runs two kernels over the tile pairs: dK/dV (4 of the N x N x D
matmuls) and a separate dQ kernel that recomputes Q K^T and dO V^T (3 more), so 7 matmuls where the
FLOP count credits 5. This one runs the 5 in a single warp-specialised kernel, in the manner of
FlashAttention-2's Algorithm 2 and FlashAttention-3's backward:

- a program owns 128 keys of one (batch, kv head); two consumer warpgroups own 64 of them each, with
  their K and V tiles in shared memory as the A operand of S^T = K Q^T and dP^T = V dO^T, and their
  dK, dV accumulators (64 x D float32) in registers (240 a thread, raised by `setmaxnreg`);
- K and V are loaded once, then the Q and dO tiles (64 query rows) of every query head of the group
  that sees the keys are streamed by TMA into a ring of `STAGES` shared-memory slots, each released
  by both consumers; one producer warp issues the loads, or, in the self-loading schedule, consumer 0;
- P^T = exp2(S^T * scale - lse), dV += P^T dO, dS^T = P^T (dP^T - delta), dK += dS^T Q;
- dS^T goes through shared memory (double-buffered, guarded by two mbarriers) so that dQ_tile = dS K
  reads it transposed as the A operand; each consumer sums all 128 keys for half of dQ's columns
  (FlashAttention-3's split) and adds them into a float32 accumulator with one TMA reduce
  (`cp.reduce.async.bulk.tensor ... add`), which holds no registers while it drains. The delta
  pre-pass of the portable backward zeroes the accumulator; a copy converts it at the end. The
  additions land in any order, so dQ is not bitwise reproducible (`deterministic=True` keeps the
  portable backward).

Three schedules (`SCHEDULES` picks one per head dim, the fastest on the H200, notes/perf.md v14-v16):
at head dim 64 the fused one (`_consumer_fused` and the producer warp: the next tile's lse and delta
loaded during this one, dK and dV drained before dQ, a three-slot ring, the mask only on tiles that
reach an edge or the diagonal); at 128 the self-loading one (`_consumer`, no producer warp: 8 warps,
so the launch can give every thread 255 registers, where the 12 warps of a producer's launch leave
168 and the plain consumers spill 172-308 bytes); "plain" (`_consumer` with the producer) stays for
the tests and probes.

At head dims 192 and 256 two consumers' dK and dV would not fit the register file: `hopper_backward`
hands those to `kernels/_hopper_bwd_wide.py`, where both consumers share one block of 64 keys.

It covers what the Hopper forward covers at head dims 64, 128, 192 and 256 (float16 and bfloat16, causal
with seqlen_q <= seqlen_k and full masks, grouped-query attention, (B, H, N, D) inputs whose heads' rows
are contiguous), and at 64 and 128 the sliding window, softcap and ALiBi (under a window a program
streams only the query tiles whose windows reach its keys, and softcap's gradient multiplies dS by
1 - tanh^2); not dropout; `kernels._hopper.hopper_unsupported` names the rest. Q, K, V and dO are read
as one (B*H*N, D) matrix: rows past a head's end belong to the next
head (or read as zeros past the tensor), and the masks zero their scores, so their dS rows add
zeros to dQ and their dK, dV rows are not stored. Nothing here runs on Triton's interpreter.
"""
from __future__ import annotations

import functools

import torch
from triton._C.libtriton import ir as _ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import _hopper
from kernels._backward import _attn_bwd_delta
from kernels._forward import strides
from kernels._launch import cdiv, launch_kernel, launch_keyed, next_power_of_2, row_descriptor

HEAD_DIMS = (64, 128, 192, 256)  # of the forward's (kernels/_hopper.py), those this backward covers
WIDE_HEAD_DIMS = (192, 256)  # run by kernels/_hopper_bwd_wide.py
# The training features this backward has (the forward's), and at which head dims: named, not derived from
# HEAD_DIMS (the wide kernel has none of them)
FEATURES = _hopper.FEATURES
FEATURE_HEAD_DIMS = (64, 128)
HALF_N = 64  # keys of one consumer warpgroup; a program holds two
BLOCK_N = 2 * HALF_N
BLOCK_M = 64  # query rows of one streamed tile
CONSUMER_WARPS = 4
TOTAL_WARPS = 12  # two consumer warpgroups and the producer's warp, which takes a warpgroup's registers
MAX_REGS = 168  # per thread at launch, as the Hopper forward
# head dim -> (schedule, Q/dO ring slots): "fused" at 64 (1.05-1.20x the portable backward in
# notes/gluon_bwd_draft_bench_v3_h200.csv, its mode 4), "self_loading" at 128 (1.06-1.10x "plain" in
# notes/gluon_bwd_v16_draft_check_bench_h200.txt)
SCHEDULES = {64: ("fused", 3), 128: ("self_loading", 2)}
_CONSUMER_WARPS = gl.constexpr(CONSUMER_WARPS)
_CONSUMER_REGS = gl.constexpr(240)
_PRODUCER_REGS = gl.constexpr(24)
_LOG2E = gl.constexpr(_hopper.LOG2E)


def default_config(head_dim: int) -> dict:
    """The tiles at this head dim, for the record: query rows streamed, keys a program holds, warps (the
    producer's counted as a warpgroup, as the Hopper forward's are) and ring slots."""
    if head_dim in WIDE_HEAD_DIMS:
        from kernels import _hopper_bwd_wide

        return _hopper_bwd_wide.default_config()
    schedule, stages = SCHEDULES[head_dim]
    warps = 2 * CONSUMER_WARPS if schedule == "self_loading" else TOTAL_WARPS
    return dict(block_m=BLOCK_M, block_n=BLOCK_N, num_warps=warps, num_stages=stages)


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """Add the shared-memory tile `src` into the global tile at `coord` of `tensor_desc` by TMA
    (cp.reduce.async.bulk.tensor add): the op plain Triton's descriptor atomic_add lowers to, which
    Gluon 3.6 builds but does not name in its Python API."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@gluon.jit
def _issue_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, kv_row):
    """Both consumers' K and V tiles by TMA, once."""
    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes + 2 * v_desc.block_type.nbytes)
    half: gl.constexpr = k_desc.block_type.shape[0]
    tma.async_copy_global_to_shared(k_desc, [kv_row, 0], kv_bar, k_smem.index(0))
    tma.async_copy_global_to_shared(k_desc, [kv_row + half, 0], kv_bar, k_smem.index(1))
    tma.async_copy_global_to_shared(v_desc, [kv_row, 0], kv_bar, v_smem.index(0))
    tma.async_copy_global_to_shared(v_desc, [kv_row + half, 0], kv_bar, v_smem.index(1))


@gluon.jit
def _issue_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, t, q_head0, N_Q, m_start, n_m, BLOCK_M: gl.constexpr,
                STAGES: gl.constexpr):
    """Tile t's Q and dO by TMA into its ring slot, once both consumers have released the slot."""
    slot = t % STAGES
    row = (q_head0 + t // n_m) * N_Q + (m_start + t % n_m) * BLOCK_M
    mbarrier.wait(empty.index(slot), ((t // STAGES) & 1) ^ 1)  # a fresh barrier passes the wait on phase 1
    mbarrier.expect(ready.index(slot), q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row, 0], ready.index(slot), q_smem.index(slot))
    tma.async_copy_global_to_shared(do_desc, [row, 0], ready.index(slot), do_smem.index(slot))


@gluon.jit
def _producer(q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_bar, ready, empty,
              kv_row, q_head0, GROUP, N_Q, m_start, n_m, BLOCK_M: gl.constexpr, STAGES: gl.constexpr):
    """One warp: both consumers' K and V tiles once, then Q and dO tile by tile (every query head of the
    group, query tiles m_start.. of each) into the ring."""
    _issue_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, kv_row)
    for t in range(GROUP * n_m):
        _issue_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, t, q_head0, N_Q, m_start, n_m, BLOCK_M, STAGES)


@gluon.jit
def _visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL: gl.constexpr):
    """(keys, queries) mask of the score entries a tile keeps: inside both sequences and, causal, on or
    below the bottom-right diagonal."""
    visible = gl.expand_dims(keys < N_K, 1) & gl.expand_dims(queries < N_Q, 0)
    if CAUSAL:
        visible = visible & (gl.expand_dims(keys, 1) <= gl.expand_dims(queries, 0) + causal_offset)
    return visible


@gluon.jit
def _probs_t_with_features(st, keys, queries, lse, slope_log2, N_Q, N_K, causal_offset, qk_scale, win_left, win_right,
                           softcap_scale, softcap_log2, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
                           SOFTCAP: gl.constexpr, ALIBI: gl.constexpr):
    """P^T of a (keys x queries) tile with the features (the forward's transform, kernels/_hopper.py
    `_scores`: softcap's hardware tanh, ALiBi's float32 distance, the window's bounds), the invisible
    entries 0; and with SOFTCAP the factor 1 - tanh^2 that dS^T takes for the softcap's gradient."""
    if SOFTCAP:
        t = gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [st * softcap_scale], dtype=gl.float32,
                                      is_pure=True, pack=1)
        s = t * softcap_log2
        grad = 1.0 - t * t
    else:
        s = st * qk_scale
        grad = s  # (unused)
    if ALIBI:
        s = s - slope_log2 * gl.abs(gl.expand_dims((queries + causal_offset).to(gl.float32), 0)
                                    - gl.expand_dims(keys.to(gl.float32), 1))
    visible = _visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL)
    if WINDOW:
        diag = gl.expand_dims(queries, 0) + causal_offset
        key = gl.expand_dims(keys, 1)
        visible = visible & (key >= diag - win_left) & (key <= diag + win_right)
    return gl.where(visible, gl.exp2(s - gl.expand_dims(lse, 0)), 0.0), grad


@gluon.jit
def _slope_log2(Alibi, stride_az, stride_ah, head, HEADS, ALIBI: gl.constexpr):
    """ALiBi's slope of query head `head` (batch x HEADS + h), in the log2 domain (0 without ALiBi)."""
    if ALIBI:
        slope = gl.load(Alibi + (head // HEADS) * stride_az + (head % HEADS) * stride_ah).to(gl.float32) * _LOG2E
    else:
        slope = 0.0
    return slope


@gluon.constexpr_function
def _wgmma_layout(num_warps, cols):
    """The register layout of a warpgroup MMA's accumulator with `cols` columns."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, cols, 16])


@gluon.jit
def _dq_mma(ds_smem, k_smem, buf, dq_zero, WHICH: gl.constexpr):
    """This consumer's half of a dQ tile, dS K over all 128 keys: both consumers' dS^T (buffer `buf`)
    read transposed as the A operand, against the WHICH-th half of K's columns. Asynchronous: the
    caller waits."""
    cols: gl.constexpr = k_smem.shape[2] // 2
    dq = warpgroup_mma(ds_smem.index(buf * 2).permute((1, 0)), k_smem.index(0).slice(WHICH * cols, cols, dim=1),
                       dq_zero, use_acc=False, is_async=True)
    return warpgroup_mma(ds_smem.index(buf * 2 + 1).permute((1, 0)), k_smem.index(1).slice(WHICH * cols, cols, dim=1),
                         dq, is_async=True)


@gluon.jit
def _reduce_dq(dq, dq_smem, dq_desc, row, WHICH: gl.constexpr):
    """Stage this consumer's half of a dQ tile in shared memory and add it into the float32 accumulator
    at (row, its columns) by one TMA reduce (the caller has waited for the previous one to drain)."""
    cols: gl.constexpr = dq_smem.shape[2]
    dq_smem.index(WHICH).store(dq)
    fence_async_shared()
    gl.thread_barrier()
    _tma_reduce_add(dq_desc, [row, WHICH * cols], dq_smem.index(WHICH))


@gluon.jit
def _store_dk_dv(DK, DV, dk, dv, kv_row, first_key, N_K, sm_scale, acc_layout: gl.constexpr,
                 HALF_N: gl.constexpr, HEAD_DIM: gl.constexpr, WHICH: gl.constexpr):
    """A consumer's epilogue: its HALF_N rows of dK (scaled) and dV, for the keys inside the sequence."""
    dtype: gl.constexpr = DK.dtype.element_ty
    out_rows = gl.arange(0, HALF_N, layout=gl.SliceLayout(1, acc_layout))
    out_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    offsets = ((kv_row + WHICH * HALF_N + gl.expand_dims(out_rows, 1)).to(gl.int64) * HEAD_DIM
               + gl.expand_dims(out_cols, 0))
    in_keys = gl.expand_dims(first_key + out_rows < N_K, 1) & gl.expand_dims(out_cols < HEAD_DIM, 0)
    gl.store(DK + offsets, (dk * sm_scale).to(dtype), mask=in_keys)
    gl.store(DV + offsets, dv.to(dtype), mask=in_keys)


@gluon.jit
def _consumer(q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
              dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale, sm_scale,
              q_desc, k_desc, v_desc, do_desc, Alibi, stride_az, stride_ah, win_left, win_right, softcap_scale,
              softcap_log2, HEADS, WHICH: gl.constexpr, HALF_N: gl.constexpr, BLOCK_M: gl.constexpr,
              HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
              SOFTCAP: gl.constexpr, ALIBI: gl.constexpr, LOADS: gl.constexpr, num_warps: gl.constexpr):
    """The plain schedule. One warpgroup, keys [key0 + WHICH * HALF_N, + HALF_N): dK and dV over every
    streamed query tile, and half of the columns of each tile's dQ over all 128 keys of the program.
    With LOADS (the self-loading schedule, no producer warp) this consumer also issues the TMA loads:
    K and V and the ring's first STAGES - 1 tiles before its loop, then each tile STAGES - 1 ahead."""
    dtype: gl.constexpr = q_smem.dtype
    st_layout: gl.constexpr = _wgmma_layout(num_warps, BLOCK_M)  # S^T and dP^T: keys x queries
    acc_layout: gl.constexpr = _wgmma_layout(num_warps, HEAD_DIM)  # dK and dV: keys x head dim
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    key_layout: gl.constexpr = gl.SliceLayout(1, st_layout)
    query_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
    DQ_COLS: gl.constexpr = HEAD_DIM // 2
    dq_layout: gl.constexpr = _wgmma_layout(num_warps, DQ_COLS)  # this consumer's half of a dQ tile
    k_tile = k_smem.index(WHICH)
    v_tile = v_smem.index(WHICH)
    first_key = key0 + WHICH * HALF_N
    keys = first_key + gl.arange(0, HALF_N, layout=key_layout)
    tile_queries = gl.arange(0, BLOCK_M, layout=query_layout)
    causal_offset = N_K - N_Q
    st_zero = gl.zeros([HALF_N, BLOCK_M], gl.float32, st_layout)
    dq_zero = gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout)
    dk = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)
    if LOADS:
        _issue_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, kv_row)
        for tn in gl.static_range(STAGES - 1):
            if tn < GROUP * n_m:
                _issue_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, tn, q_head0, N_Q, m_start, n_m, BLOCK_M,
                            STAGES)
    mbarrier.wait(kv_bar, 0)
    for t in range(GROUP * n_m):
        slot = t % STAGES
        phase = (t // STAGES) & 1
        head = q_head0 + t // n_m
        q0 = (m_start + t % n_m) * BLOCK_M
        queries = q0 + tile_queries
        in_q = queries < N_Q
        if LOADS:  # the tile STAGES - 1 ahead, into the slot tile t - 1 used, once both consumers released it
            if t + STAGES - 1 < GROUP * n_m:
                _issue_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, t + STAGES - 1, q_head0, N_Q, m_start,
                            n_m, BLOCK_M, STAGES)
        lse = gl.load(Lse + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0) * _LOG2E
        delta = gl.load(Delta + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0)
        mbarrier.wait(ready.index(slot), phase)
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        # S^T = K Q^T and dP^T = V dO^T, K and V from shared memory as the A operand.
        st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=[st])
        if WINDOW or SOFTCAP or ALIBI:
            slope_log2 = _slope_log2(Alibi, stride_az, stride_ah, head, HEADS, ALIBI)
            pt, grad = _probs_t_with_features(st, keys, queries, lse, slope_log2, N_Q, N_K, causal_offset, qk_scale,
                                              win_left, win_right, softcap_scale, softcap_log2, CAUSAL, WINDOW,
                                              SOFTCAP, ALIBI)
        else:
            visible = _visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL)
            pt = gl.where(visible, gl.exp2(st * qk_scale - gl.expand_dims(lse, 0)), 0.0)
        pt_op = gl.convert_layout(pt.to(dtype), a_layout)
        dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)  # dV += P^T dO
        dpt = warpgroup_mma_wait(1, deps=[dpt])
        dst = pt * (dpt - gl.expand_dims(delta, 0))
        if SOFTCAP:
            dst = dst * grad
        dst = dst.to(dtype)
        buf = t % 2
        mbarrier.wait(ds_empty.index(buf), ((t // 2) & 1) ^ 1)  # the other consumer has read tile t - 2's
        ds_smem.index(buf * 2 + WHICH).store(dst)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(ds_full.index(buf), count=1)
        dst_op = gl.convert_layout(dst, a_layout)
        dk = warpgroup_mma(dst_op, q_tile, dk, is_async=True)  # dK += dS^T Q
        dv, dk = warpgroup_mma_wait(0, deps=[dv, dk])
        mbarrier.arrive(empty.index(slot), count=1)
        # dQ: both consumers' dS^T; this one sums all 128 keys for its half of the columns, one TMA reduce
        mbarrier.wait(ds_full.index(buf), (t // 2) & 1)
        tma.store_wait(0)  # the last tile's reduce has read the staging tile
        gl.thread_barrier()
        dq = _dq_mma(ds_smem, k_smem, buf, dq_zero, WHICH)
        dq = warpgroup_mma_wait(0, deps=[dq])
        mbarrier.arrive(ds_empty.index(buf), count=1)
        _reduce_dq(dq * sm_scale, dq_smem, dq_desc, head * N_Q + q0, WHICH)

    _store_dk_dv(DK, DV, dk, dv, kv_row, first_key, N_K, sm_scale, acc_layout, HALF_N, HEAD_DIM, WHICH)
    tma.store_wait(0)


@gluon.jit
def _consumer_fused(q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                    dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale,
                    sm_scale, Alibi, stride_az, stride_ah, win_left, win_right, softcap_scale, softcap_log2,
                    HEADS, WHICH: gl.constexpr, HALF_N: gl.constexpr, BLOCK_M: gl.constexpr,
                    HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
                    SOFTCAP: gl.constexpr, ALIBI: gl.constexpr, DRAIN_DK: gl.constexpr,
                    SKIP_MASK: gl.constexpr, num_warps: gl.constexpr):
    """The fused schedule: the plain one's work (`_consumer`) with fewer stalls: the next tile's lse and
    delta loaded while this tile computes; dK and dQ issued back to back and drained once, or with
    DRAIN_DK dK and dV drained before dQ starts (fewer live registers); and with SKIP_MASK the mask only
    on tiles that reach past an edge or the diagonal."""
    dtype: gl.constexpr = q_smem.dtype
    st_layout: gl.constexpr = _wgmma_layout(num_warps, BLOCK_M)  # S^T and dP^T: keys x queries
    acc_layout: gl.constexpr = _wgmma_layout(num_warps, HEAD_DIM)  # dK and dV: keys x head dim
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    key_layout: gl.constexpr = gl.SliceLayout(1, st_layout)
    query_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
    DQ_COLS: gl.constexpr = HEAD_DIM // 2
    dq_layout: gl.constexpr = _wgmma_layout(num_warps, DQ_COLS)  # this consumer's half of a dQ tile
    k_tile = k_smem.index(WHICH)
    v_tile = v_smem.index(WHICH)
    first_key = key0 + WHICH * HALF_N
    keys = first_key + gl.arange(0, HALF_N, layout=key_layout)
    tile_queries = gl.arange(0, BLOCK_M, layout=query_layout)
    causal_offset = N_K - N_Q
    st_zero = gl.zeros([HALF_N, BLOCK_M], gl.float32, st_layout)
    dq_zero = gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout)
    dk = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)
    n_t = GROUP * n_m
    # lse and delta of a tile travel in a compact layout (a value a thread) and take the scores' layout at use
    compact: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    compact_queries = gl.arange(0, BLOCK_M, layout=compact)
    first = m_start * BLOCK_M + compact_queries
    lse_next = gl.load(Lse + (q_head0 * N_Q + first).to(gl.int64), mask=first < N_Q, other=0.0)
    delta_next = gl.load(Delta + (q_head0 * N_Q + first).to(gl.int64), mask=first < N_Q, other=0.0)
    mbarrier.wait(kv_bar, 0)
    for t in range(n_t):
        slot = t % STAGES
        phase = (t // STAGES) & 1
        head = q_head0 + t // n_m
        q0 = (m_start + t % n_m) * BLOCK_M
        queries = q0 + tile_queries
        lse = gl.convert_layout(lse_next, query_layout) * _LOG2E
        delta = gl.convert_layout(delta_next, query_layout)
        # the next tile's lse and delta, in flight while this tile computes
        t_next = t + 1
        queries_next = (m_start + t_next % n_m) * BLOCK_M + compact_queries
        rows_next = ((q_head0 + t_next // n_m) * N_Q + queries_next).to(gl.int64)
        ok_next = (queries_next < N_Q) & (t_next < n_t)
        lse_next = gl.load(Lse + rows_next, mask=ok_next, other=0.0)
        delta_next = gl.load(Delta + rows_next, mask=ok_next, other=0.0)
        mbarrier.wait(ready.index(slot), phase)
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=[st])
        if WINDOW or SOFTCAP or ALIBI:  # masked on every tile
            slope_log2 = _slope_log2(Alibi, stride_az, stride_ah, head, HEADS, ALIBI)
            pt, grad = _probs_t_with_features(st, keys, queries, lse, slope_log2, N_Q, N_K, causal_offset, qk_scale,
                                              win_left, win_right, softcap_scale, softcap_log2, CAUSAL, WINDOW,
                                              SOFTCAP, ALIBI)
        elif SKIP_MASK:  # a runtime branch: at d128 it costs more spills than the mask it saves
            pt = gl.exp2(st * qk_scale - gl.expand_dims(lse, 0))
            needs_mask = (q0 + BLOCK_M > N_Q) | (first_key + HALF_N > N_K)
            if CAUSAL:
                needs_mask = needs_mask | (q0 + causal_offset < first_key + HALF_N - 1)
            if needs_mask:
                pt = gl.where(_visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL), pt, 0.0)
        else:
            pt = gl.exp2(st * qk_scale - gl.expand_dims(lse, 0))
            pt = gl.where(_visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL), pt, 0.0)
        pt_op = gl.convert_layout(pt.to(dtype), a_layout)
        dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)  # dV += P^T dO
        dpt = warpgroup_mma_wait(1, deps=[dpt])
        dst = pt * (dpt - gl.expand_dims(delta, 0))
        if SOFTCAP:
            dst = dst * grad
        dst = dst.to(dtype)
        buf = t % 2
        mbarrier.wait(ds_empty.index(buf), ((t // 2) & 1) ^ 1)  # the other consumer has read tile t - 2's
        ds_smem.index(buf * 2 + WHICH).store(dst)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(ds_full.index(buf), count=1)
        dst_op = gl.convert_layout(dst, a_layout)
        dk = warpgroup_mma(dst_op, q_tile, dk, is_async=True)  # dK += dS^T Q
        if DRAIN_DK:  # fewer live registers: dK and dV finish before dQ starts
            dv, dk = warpgroup_mma_wait(0, deps=[dv, dk])
        mbarrier.wait(ds_full.index(buf), (t // 2) & 1)
        dq = _dq_mma(ds_smem, k_smem, buf, dq_zero, WHICH)
        if DRAIN_DK:
            dq = warpgroup_mma_wait(0, deps=[dq])
        else:
            dv, dk, dq = warpgroup_mma_wait(0, deps=[dv, dk, dq])
        mbarrier.arrive(empty.index(slot), count=1)
        mbarrier.arrive(ds_empty.index(buf), count=1)
        tma.store_wait(0)  # the last tile's reduce has read the staging tile
        gl.thread_barrier()
        _reduce_dq(dq * sm_scale, dq_smem, dq_desc, head * N_Q + q0, WHICH)

    _store_dk_dv(DK, DV, dk, dv, kv_row, first_key, N_K, sm_scale, acc_layout, HALF_N, HEAD_DIM, WHICH)
    tma.store_wait(0)


@gluon.jit
def _program_queries(key0, N_Q, N_K, KV_HEADS, GROUP, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """What a program of keys [key0, ...) of (batch, kv head) program_id(1) streams: its first query head
    (the group's heads follow it), its first key row in the (B*Hkv*N, D) matrix, and the query tiles
    m_start.. of each head that can see its keys (n_m of them). Both backward kernels' programs start here."""
    off_hkv = gl.program_id(1)  # batch * KV_HEADS + kv head
    q_head0 = (off_hkv // KV_HEADS) * (KV_HEADS * GROUP) + (off_hkv % KV_HEADS) * GROUP
    kv_row = off_hkv * N_K + key0
    n_m_total = gl.cdiv(N_Q, BLOCK_M)
    if CAUSAL:  # the block's first key is visible from query key0 - (N_K - N_Q) on
        m_start = gl.maximum(key0 - (N_K - N_Q), 0) // BLOCK_M
    else:
        m_start = 0
    n_m = gl.maximum(n_m_total - m_start, 0)
    return q_head0, kv_row, m_start, n_m


@gluon.jit(do_not_specialize=["stride_az", "stride_ah", "win_left", "win_right"],
           do_not_specialize_on_alignment=["Alibi"])
def _hopper_bwd(q_desc, k_desc, v_desc, do_desc, dq_desc, Lse, Delta, DK, DV, N_Q, N_K, KV_HEADS, GROUP,
                qk_scale, sm_scale, Alibi, stride_az, stride_ah, win_left, win_right, softcap_scale, softcap_log2,
                BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, WINDOW: gl.constexpr, SOFTCAP: gl.constexpr, ALIBI: gl.constexpr,
                FUSED: gl.constexpr, SELF_LOADING: gl.constexpr, num_warps: gl.constexpr):
    """A program: 2 x HALF_N keys of one (batch, kv head); warps: consumer 0 (the default partition),
    consumer 1 and, unless SELF_LOADING (consumer 0 issues the loads), the producer. The feature
    arguments are the Hopper forward's (kernels/_hopper.py `kernel_args`); under a window the program
    streams only the query tiles whose windows reach its keys."""
    HALF: gl.constexpr = k_desc.block_type.shape[0]
    key0 = gl.program_id(0) * 2 * HALF
    q_head0, kv_row, m_start, n_m = _program_queries(key0, N_Q, N_K, KV_HEADS, GROUP, BLOCK_M, CAUSAL)
    if WINDOW:  # query q sees keys q + N_K - N_Q - win_left .. q + N_K - N_Q + win_right (CAUSAL is off)
        m_start = gl.maximum(key0 - (N_K - N_Q) - win_right, 0) // BLOCK_M
        last_query = gl.minimum(key0 + 2 * HALF, N_K) - 1 - (N_K - N_Q) + win_left  # the last that sees a key here
        n_m = gl.maximum(gl.cdiv(gl.minimum(last_query + 1, N_Q), BLOCK_M) - m_start, 0)

    HEADS = KV_HEADS * GROUP
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], v_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [4, HALF, BLOCK_M], ds_layout)  # 2 buffers x 2 consumers
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_DIM // 2], dq_desc.layout)  # a consumer each
    ds_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # both consumers release a slot
    for i in gl.static_range(2):
        mbarrier.init(ds_full.index(i), count=2)
        mbarrier.init(ds_empty.index(i), count=2)

    if SELF_LOADING:  # two warpgroups and no producer warp: the launch's registers all go to the consumers
        gl.warp_specialize([
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                         dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, Alibi, stride_az, stride_ah, win_left,
                         win_right, softcap_scale, softcap_log2, HEADS, 0, HALF, BLOCK_M, HEAD_DIM, STAGES,
                         CAUSAL, WINDOW, SOFTCAP, ALIBI, True, num_warps)),
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                         dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, Alibi, stride_az, stride_ah, win_left,
                         win_right, softcap_scale, softcap_log2, HEADS, 1, HALF, BLOCK_M, HEAD_DIM, STAGES,
                         CAUSAL, WINDOW, SOFTCAP, ALIBI, False, num_warps)),
        ], [_CONSUMER_WARPS], [_CONSUMER_REGS])
    elif FUSED:
        gl.warp_specialize([
            (_consumer_fused, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full,
                               ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K,
                               m_start, n_m, qk_scale, sm_scale, Alibi, stride_az, stride_ah, win_left, win_right,
                               softcap_scale, softcap_log2, HEADS, 0, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL, WINDOW,
                               SOFTCAP, ALIBI, True, HEAD_DIM == 64, num_warps)),
            (_consumer_fused, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full,
                               ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K,
                               m_start, n_m, qk_scale, sm_scale, Alibi, stride_az, stride_ah, win_left, win_right,
                               softcap_scale, softcap_log2, HEADS, 1, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL, WINDOW,
                               SOFTCAP, ALIBI, True, HEAD_DIM == 64, num_warps)),
            (_producer, (q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_bar, ready, empty,
                         kv_row, q_head0, GROUP, N_Q, m_start, n_m, BLOCK_M, STAGES)),
        ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                         dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, Alibi, stride_az, stride_ah, win_left,
                         win_right, softcap_scale, softcap_log2, HEADS, 0, HALF, BLOCK_M, HEAD_DIM, STAGES,
                         CAUSAL, WINDOW, SOFTCAP, ALIBI, False, num_warps)),
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                         dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, Alibi, stride_az, stride_ah, win_left,
                         win_right, softcap_scale, softcap_log2, HEADS, 1, HALF, BLOCK_M, HEAD_DIM, STAGES,
                         CAUSAL, WINDOW, SOFTCAP, ALIBI, False, num_warps)),
            (_producer, (q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_bar, ready, empty,
                         kv_row, q_head0, GROUP, N_Q, m_start, n_m, BLOCK_M, STAGES)),
        ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])


def dq_descriptor(dq_acc: torch.Tensor) -> TensorDescriptor:
    """The float32 dQ accumulator (B, H, N, D) as one (B*H*N, D) matrix in tiles of BLOCK_M rows x D/2
    columns. A query tile past its head's last row reaches into the next head's rows: those rows of dS
    are zero, so the reduce adds zeros there."""
    b, h, n, d = dq_acc.shape
    layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, d // 2], gl.float32)
    return TensorDescriptor(dq_acc, [b * h * n, d], [d, 1], [BLOCK_M, d // 2], layout)


def kernel_args(q, k, v, do, dq_acc, lse, delta, dk, dv, softmax_scale: float, causal: bool,
                schedule: str | None = None, stages: int | None = None, window_size: tuple[int, int] = (-1, -1),
                softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None) -> tuple[tuple, dict]:
    """The positional and keyword arguments of one `_hopper_bwd` launch through Triton's JIT
    (tests/hopper_compile.py compiles from them too)."""
    scalars, constants = _launch_values(q, k, softmax_scale, causal, schedule, stages, window_size, softcap,
                                        alibi_slopes, lse)
    args = (_hopper._descriptor(q, BLOCK_M), _hopper._descriptor(k, HALF_N), _hopper._descriptor(v, HALF_N),
            _hopper._descriptor(do, BLOCK_M), dq_descriptor(dq_acc), lse, delta, dk, dv, *scalars)
    return args, dict(zip(_CONSTANTS, constants))


_CONSTANTS = ("BLOCK_M", "HEAD_DIM", "STAGES", "CAUSAL", "WINDOW", "SOFTCAP", "ALIBI", "FUSED", "SELF_LOADING",
              "num_warps")


def _launch_values(q, k, softmax_scale, causal, schedule, stages, window_size, softcap, alibi_slopes,
                   dummy) -> tuple[tuple, tuple]:
    """(the scalar and feature arguments after DV, the compile-time constants in _CONSTANTS' order); a call
    without features reads them from a cache, as the forward's."""
    _, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    if window_size == (-1, -1) and not softcap and alibi_slopes is None:
        before, after, constants = _plain_launch_values(n_q, heads, head_dim, kv_heads, n_k, softmax_scale, causal,
                                                        schedule, stages)
        return before + (dummy,) + after, constants
    default_schedule, default_stages = SCHEDULES[head_dim]
    schedule = schedule or default_schedule
    feature_args, switches = _hopper._features(n_q, n_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                               dummy)
    scalars = (n_q, n_k, kv_heads, heads // kv_heads, softmax_scale * _hopper.LOG2E, softmax_scale, *feature_args)
    constants = (BLOCK_M, head_dim, stages or default_stages, *switches, schedule == "fused",
                 schedule == "self_loading", CONSUMER_WARPS)
    return scalars, constants


@functools.lru_cache(maxsize=1024)
def _plain_launch_values(n_q, heads, head_dim, kv_heads, n_k, softmax_scale, causal, schedule,
                         stages) -> tuple[tuple, tuple, tuple]:
    """`_launch_values` without features: the scalars before and after the (unused) ALiBi pointer, and the
    constants."""
    default_schedule, default_stages = SCHEDULES[head_dim]
    schedule = schedule or default_schedule
    before = (n_q, n_k, kv_heads, heads // kv_heads, softmax_scale * _hopper.LOG2E, softmax_scale)
    after = (0, 0, 0, 0, 0.0, 0.0)
    constants = (BLOCK_M, head_dim, stages or default_stages, bool(causal), False, False, False, schedule == "fused",
                 schedule == "self_loading", CONSUMER_WARPS)
    return before, after, constants


def max_regs(schedule: str) -> int:
    """Registers a thread at launch: 65536 over the 12 warps of two consumer warpgroups and the producer's
    warp (which takes a warpgroup's share), or over 8 without the producer. ptxas allocates each
    consumer within this, whatever `setmaxnreg` raises it to (notes/gluon_bwd_v16_draft.py)."""
    return 256 if schedule == "self_loading" else MAX_REGS


def backward_inputs(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """do (made contiguous), q, k, v, each at a 16-byte aligned address as TMA reads them, and dk, dv to fill."""
    do = _hopper.aligned(do.contiguous())
    q, k, v = _hopper.aligned(q), _hopper.aligned(k), _hopper.aligned(v)
    return do, q, k, v, torch.empty_like(k), torch.empty_like(v)


def delta_pass(out: torch.Tensor, do: torch.Tensor, dq_acc: torch.Tensor, zero_dq: bool) -> torch.Tensor:
    """delta = rowsum(dO * O), (B, H, N) float32, by the portable backward's pre-pass; with zero_dq it also
    zeroes the float32 dQ accumulator, laid out (B, H, N, D)."""
    batch, heads, n_q, head_dim = out.shape
    out = out.contiguous()
    delta = torch.empty((batch, heads, n_q), device=out.device, dtype=torch.float32)
    delta_block = 64
    launch_kernel(_attn_bwd_delta, (cdiv(n_q, delta_block) * batch * heads,),
                  out, do, delta, dq_acc, *strides(out, False), *strides(do, False), heads, n_q, delta, 0,
                  HEAD_DIM=head_dim, HEAD_DIM_PAD=next_power_of_2(head_dim), BLOCK_M=delta_block,
                  VARLEN=False, ZERO_DQ=zero_dq)
    return delta


def hopper_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    lse: torch.Tensor, softmax_scale: float, causal: bool, schedule: str | None = None,
                    stages: int | None = None, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of attention(q, k, v) given the output, its log-sum-exp and d_out (callers check
    `hopper_unsupported` first; do and out may have any strides: they are made contiguous here).
    `window_size`, `softcap` and `alibi_slopes` (a (B, H) float32 view) as the forward took them (head dims
    64 and 128). `schedule` ("plain", "fused" or "self_loading") and `stages` override SCHEDULES (for the tests
    and probes; at head dims 192 and 256, `kernels._hopper_bwd_wide.wide_backward` runs with its own schedule). Both
    kernels launch as the Hopper forward does: through Triton's JIT on a shape's first call, then
    directly (`kernels._launch`; the window's and ALiBi's integers are not specialised on)."""
    batch, heads, n_q, head_dim = q.shape
    if head_dim in WIDE_HEAD_DIMS:
        if window_size != (-1, -1) or softcap or alibi_slopes is not None:
            raise NotImplementedError(f"the Hopper backward has the window, softcap and ALiBi at head dims "
                                      f"{FEATURE_HEAD_DIMS}, not {head_dim}")
        from kernels._hopper_bwd_wide import wide_backward

        return wide_backward(do, q, k, v, out, lse, softmax_scale, causal)
    do, q, k, v, dk, dv = backward_inputs(do, q, k, v)
    dq_acc = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=torch.float32)
    delta = delta_pass(out, do, dq_acc, zero_dq=True)
    lse = lse.contiguous()
    scalars, constants = _launch_values(q, k, softmax_scale, causal, schedule, stages, window_size, softcap,
                                        alibi_slopes, lse)
    grid = (cdiv(k.shape[2], BLOCK_N), batch * k.shape[1])
    self_loading = constants[_CONSTANTS.index("SELF_LOADING")]

    def jit_launch():
        return _hopper_bwd[grid](_hopper._descriptor(q, BLOCK_M), _hopper._descriptor(k, HALF_N),
                                 _hopper._descriptor(v, HALF_N), _hopper._descriptor(do, BLOCK_M), dq_descriptor(dq_acc),
                                 lse, delta, dk, dv, *scalars, **dict(zip(_CONSTANTS, constants)),
                                 maxnreg=max_regs("self_loading" if self_loading else "plain"))

    def direct_args():
        return (row_descriptor(q), row_descriptor(k), row_descriptor(v), row_descriptor(do), row_descriptor(dq_acc),
                lse, delta, dk, dv, *scalars, *constants)

    # lse is the only input allocated outside: its alignment is part of the specialisation
    launch_keyed(("hopper_bwd", q.dtype, tuple(q.shape), tuple(k.shape), constants, lse.data_ptr() % 16 == 0), grid,
                 direct_args, jit_launch)
    return dq_acc.to(q.dtype), dk, dv
