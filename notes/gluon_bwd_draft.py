"""A draft of the Hopper backward in Gluon (notes/perf.md, v14): checked and timed on the H200, not yet in kernels/.

    PYTHONPATH=. python3 notes/gluon_bwd_draft.py                      # compile for sm_90a here, print ptxas' report
    PYTHONPATH=. python3 notes/gluon_bwd_draft.py --check [--modes ..] # sm_90 GPU: against the float64 reference
    PYTHONPATH=. python3 notes/gluon_bwd_draft.py --bench [--modes ..] # sm_90 GPU: against the portable backward, cuDNN

Compiled here: notes/gluon_bwd_draft_compile.txt (shared memory and spills per dQ mode and head dim).
On the H200: notes/gluon_bwd_draft_check_h200.txt (every mode passes the tests' error rule on odd lengths,
GQA, Nq != Nk, causal and not) and notes/gluon_bwd_draft_bench_v{1,2,3}_h200.csv (do_bench medians, fp16,
the paper's shapes; a script's timing, not the pipeline's).

Why: the one-pass backward in plain Triton (kernels/_hopper_bwd.py) sits at the 255-register cap with
spills, because Triton keeps K and V in registers as the A operand of K Q^T and V dO^T, beside the dK and
dV accumulators, S, dP and the dQ tile. This draft places them as FlashAttention-3 does:

- a program owns 128 keys of one (batch, kv head); two consumer warpgroups own 64 of them each, with
  their K and V tiles in shared memory as the A operand (S^T = K Q^T, dP^T = V dO^T) and their dK, dV
  accumulators (64 x D float32) in registers, raised to 240 per thread by `setmaxnreg`;
- one producer warp loads K and V once, then streams Q and dO tiles (64 query rows) of every query
  head of the group by TMA into a ring of `STAGES` slots, each released by both consumers;
- dS^T goes through shared memory so that dQ_tile = dS K reads it transposed as the A operand, and dQ
  is accumulated in float32 (zeroed by the portable backward's delta pre-pass, converted after) in one
  of five ways, `dq_mode`:
  0. each consumer adds its 64 keys' share with relaxed element-wise atomic adds;
  1. each consumer stages its share in shared memory and adds it by TMA (`_tma_reduce_add`: the
     builder's async TMA reduce, which plain Triton's descriptor atomic_add lowers to and Gluon 3.6's
     Python API does not name);
  2. both consumers' dS^T tiles in shared memory (double-buffered, two mbarriers), each consumer sums
     all 128 keys for half the columns, one TMA reduce per consumer and tile (FlashAttention-3's split);
  3. mode 2 with fewer stalls (`_bwd_consumer_fused`): the next tile's lse and delta loaded during this
     one, dK and dQ issued back to back and drained once, a three-slot ring, and at d64 the mask only
     on tiles that reach an edge or the diagonal (at d128 that branch costs more spills than it saves);
  4. mode 3 with dK and dV drained before dQ starts (fewer live registers).

Not here yet: skipping the query tiles the second consumer cannot see (both consumers start at the
block's first visible tile), lse/delta by TMA, longest-first scheduling, and a d128 variant of modes 3-4
without their extra spills.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

from triton._C.libtriton import ir as _ir
from triton.experimental.gluon.language._core import builtin

from kernels import _hopper


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """Add the shared-memory tile `src` into the global tile at `coord` of `tensor_desc` by TMA
    (cp.reduce.async.bulk.tensor add): the op plain Triton's descriptor atomic_add lowers to, which
    Gluon 3.6 builds but does not name in its Python API."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)

HALF_N = 64  # keys of one consumer warpgroup; a program holds two
BLOCK_N = 2 * HALF_N
BLOCK_M = 64  # query rows of one streamed tile
STAGES = 2
CONSUMER_WARPS = 4
MAX_REGS = 168
_CONSUMER_WARPS = gl.constexpr(CONSUMER_WARPS)
_CONSUMER_REGS = gl.constexpr(240)
_PRODUCER_REGS = gl.constexpr(24)
_LOG2E = gl.constexpr(_hopper.LOG2E)


@gluon.jit
def _bwd_producer(q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_bar, ready, empty,
                  kv_row, q_head0, GROUP, N_Q, m_start, n_m, BLOCK_M: gl.constexpr, STAGES: gl.constexpr):
    """One warp: both consumers' K and V tiles once, then Q and dO tile by tile (every query head of the
    group, query tiles m_start.. of each) into the ring."""
    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes + 2 * v_desc.block_type.nbytes)
    half: gl.constexpr = k_desc.block_type.shape[0]
    tma.async_copy_global_to_shared(k_desc, [kv_row, 0], kv_bar, k_smem.index(0))
    tma.async_copy_global_to_shared(k_desc, [kv_row + half, 0], kv_bar, k_smem.index(1))
    tma.async_copy_global_to_shared(v_desc, [kv_row, 0], kv_bar, v_smem.index(0))
    tma.async_copy_global_to_shared(v_desc, [kv_row + half, 0], kv_bar, v_smem.index(1))
    for t in range(GROUP * n_m):
        slot = t % STAGES
        phase = (t // STAGES) & 1
        row = (q_head0 + t // n_m) * N_Q + (m_start + t % n_m) * BLOCK_M
        mbarrier.wait(empty.index(slot), phase ^ 1)  # a fresh barrier passes the wait on phase 1
        mbarrier.expect(ready.index(slot), q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [row, 0], ready.index(slot), q_smem.index(slot))
        tma.async_copy_global_to_shared(do_desc, [row, 0], ready.index(slot), do_smem.index(slot))


@gluon.jit
def _visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL: gl.constexpr):
    """(keys, queries) mask of the score entries a tile keeps: inside both sequences and, causal, on or
    below the bottom-right diagonal."""
    visible = gl.expand_dims(keys < N_K, 1) & gl.expand_dims(queries < N_Q, 0)
    if CAUSAL:
        visible = visible & (gl.expand_dims(keys, 1) <= gl.expand_dims(queries, 0) + causal_offset)
    return visible


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
def _bwd_consumer(q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                  dq_desc, Lse, Delta, DQ, DK, DV,
                  key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale, sm_scale, WHICH: gl.constexpr,
                  HALF_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                  CAUSAL: gl.constexpr, DQ_PARTS: gl.constexpr, DQ_MODE: gl.constexpr, num_warps: gl.constexpr):
    """One warpgroup, keys [key0 + WHICH * HALF_N, + HALF_N): dK and dV over every streamed query tile,
    and its share of each tile's dQ."""
    dtype: gl.constexpr = q_smem.dtype
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    key_layout: gl.constexpr = gl.SliceLayout(1, st_layout)
    query_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
    k_tile = k_smem.index(WHICH)
    v_tile = v_smem.index(WHICH)
    first_key = key0 + WHICH * HALF_N
    keys = first_key + gl.arange(0, HALF_N, layout=key_layout)
    tile_queries = gl.arange(0, BLOCK_M, layout=query_layout)
    causal_offset = N_K - N_Q

    st_zero = gl.zeros([HALF_N, BLOCK_M], gl.float32, st_layout)
    DQ_COLS: gl.constexpr = HEAD_DIM // DQ_PARTS
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, DQ_COLS, 16])
    dq_zero = gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout)
    dk = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)
    dq_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
    dq_cols = gl.arange(0, DQ_COLS, layout=gl.SliceLayout(0, dq_layout))
    mbarrier.wait(kv_bar, 0)
    for t in range(GROUP * n_m):
        slot = t % STAGES
        phase = (t // STAGES) & 1
        head = q_head0 + t // n_m
        q0 = (m_start + t % n_m) * BLOCK_M
        queries = q0 + tile_queries
        in_q = queries < N_Q
        lse = gl.load(Lse + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0) * _LOG2E
        delta = gl.load(Delta + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0)
        mbarrier.wait(ready.index(slot), phase)
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        # S^T = K Q^T and dP^T = V dO^T, K and V from shared memory as the A operand.
        st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=[st])
        visible = _visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL)
        pt = gl.where(visible, gl.exp2(st * qk_scale - gl.expand_dims(lse, 0)), 0.0)
        pt_op = gl.convert_layout(pt.to(dtype), a_layout)
        dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)  # dV += P^T dO
        dpt = warpgroup_mma_wait(1, deps=[dpt])
        dst = (pt * (dpt - gl.expand_dims(delta, 0))).to(dtype)
        buf = t % 2
        if DQ_MODE == 2:  # the other consumer may still read this buffer's dS^T of tile t - 2
            mbarrier.wait(ds_empty.index(buf), ((t // 2) & 1) ^ 1)
        ds_tile = ds_smem.index(buf * 2 + WHICH)
        ds_tile.store(dst)
        fence_async_shared()
        gl.thread_barrier()
        if DQ_MODE == 2:
            mbarrier.arrive(ds_full.index(buf), count=1)
        dst_op = gl.convert_layout(dst, a_layout)
        dk = warpgroup_mma(dst_op, q_tile, dk, is_async=True)  # dK += dS^T Q
        dv, dk = warpgroup_mma_wait(0, deps=[dv, dk])
        mbarrier.arrive(empty.index(slot), count=1)
        # dQ_tile's share of these keys, dS K, DQ_PARTS column blocks one after the other (fewer live registers)
        dq_tile = DQ + (head * N_Q + q0).to(gl.int64) * HEAD_DIM  # int64 once; 32-bit offsets within the tile
        dq_offsets = gl.expand_dims(dq_rows, 1) * HEAD_DIM + gl.expand_dims(dq_cols, 0)
        dq_mask = gl.expand_dims(q0 + dq_rows < N_Q, 1) & gl.expand_dims(dq_cols < DQ_COLS, 0)
        if DQ_MODE == 0:  # relaxed float32 atomic adds, element by element
            for part in gl.static_range(DQ_PARTS):
                dq = warpgroup_mma(ds_tile.permute((1, 0)), k_tile.slice(part * DQ_COLS, DQ_COLS, dim=1), dq_zero,
                                   use_acc=False, is_async=True)
                dq = warpgroup_mma_wait(0, deps=[dq])
                gl.atomic_add(dq_tile + part * DQ_COLS + dq_offsets, dq * sm_scale, mask=dq_mask, sem="relaxed")
        elif DQ_MODE == 1:  # this consumer's 64 keys' share of every column, staged in shared memory, TMA reduce
            tma.store_wait(0)  # the last tile's reduces have read the staging tiles
            gl.thread_barrier()
            for part in gl.static_range(DQ_PARTS):
                dq = warpgroup_mma(ds_tile.permute((1, 0)), k_tile.slice(part * DQ_COLS, DQ_COLS, dim=1), dq_zero,
                                   use_acc=False, is_async=True)
                dq = warpgroup_mma_wait(0, deps=[dq])
                dq_smem.index(WHICH * DQ_PARTS + part).store(dq * sm_scale)
            fence_async_shared()
            gl.thread_barrier()
            for part in gl.static_range(DQ_PARTS):
                _tma_reduce_add(dq_desc, [head * N_Q + q0, part * DQ_COLS], dq_smem.index(WHICH * DQ_PARTS + part))
        else:  # 2: both consumers' dS^T; this one sums all 128 keys for its half of the columns, one TMA reduce
            mbarrier.wait(ds_full.index(buf), (t // 2) & 1)
            tma.store_wait(0)
            gl.thread_barrier()
            dq = warpgroup_mma(ds_smem.index(buf * 2).permute((1, 0)),
                               k_smem.index(0).slice(WHICH * DQ_COLS, DQ_COLS, dim=1), dq_zero,
                               use_acc=False, is_async=True)
            dq = warpgroup_mma(ds_smem.index(buf * 2 + 1).permute((1, 0)),
                               k_smem.index(1).slice(WHICH * DQ_COLS, DQ_COLS, dim=1), dq, is_async=True)
            dq = warpgroup_mma_wait(0, deps=[dq])
            mbarrier.arrive(ds_empty.index(buf), count=1)
            dq_smem.index(WHICH * DQ_PARTS).store(dq * sm_scale)
            fence_async_shared()
            gl.thread_barrier()
            _tma_reduce_add(dq_desc, [head * N_Q + q0, WHICH * DQ_COLS], dq_smem.index(WHICH * DQ_PARTS))

    _store_dk_dv(DK, DV, dk, dv, kv_row, first_key, N_K, sm_scale, acc_layout, HALF_N, HEAD_DIM, WHICH)
    if DQ_MODE != 0:
        tma.store_wait(0)


@gluon.jit
def _bwd_consumer_fused(q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                        dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale,
                        sm_scale, WHICH: gl.constexpr, HALF_N: gl.constexpr, BLOCK_M: gl.constexpr,
                        HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, DRAIN_DK: gl.constexpr,
                        SKIP_MASK: gl.constexpr, num_warps: gl.constexpr):
    """dQ modes 3 and 4 (DRAIN_DK): mode 2's dQ (both consumers' dS^T, half the columns each, one TMA
    reduce per tile) with fewer stalls: the next tile's lse and delta loaded while this tile computes,
    dK and dQ issued back to back and drained once (mode 4: dK and dV drained first, fewer live
    registers), and with SKIP_MASK the mask only on tiles that reach past an edge or the diagonal."""
    dtype: gl.constexpr = q_smem.dtype
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    key_layout: gl.constexpr = gl.SliceLayout(1, st_layout)
    query_layout: gl.constexpr = gl.SliceLayout(0, st_layout)
    DQ_COLS: gl.constexpr = HEAD_DIM // 2
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, DQ_COLS, 16])
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
        pt = gl.exp2(st * qk_scale - gl.expand_dims(lse, 0))
        if SKIP_MASK:  # a runtime branch: at d128 it costs more spills than the mask it saves
            needs_mask = (q0 + BLOCK_M > N_Q) | (first_key + HALF_N > N_K)
            if CAUSAL:
                needs_mask = needs_mask | (q0 + causal_offset < first_key + HALF_N - 1)
            if needs_mask:
                pt = gl.where(_visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL), pt, 0.0)
        else:
            pt = gl.where(_visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL), pt, 0.0)
        pt_op = gl.convert_layout(pt.to(dtype), a_layout)
        dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)  # dV += P^T dO
        dpt = warpgroup_mma_wait(1, deps=[dpt])
        dst = (pt * (dpt - gl.expand_dims(delta, 0))).to(dtype)
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
        dq = warpgroup_mma(ds_smem.index(buf * 2).permute((1, 0)),
                           k_smem.index(0).slice(WHICH * DQ_COLS, DQ_COLS, dim=1), dq_zero,
                           use_acc=False, is_async=True)
        dq = warpgroup_mma(ds_smem.index(buf * 2 + 1).permute((1, 0)),
                           k_smem.index(1).slice(WHICH * DQ_COLS, DQ_COLS, dim=1), dq, is_async=True)
        if DRAIN_DK:
            dq = warpgroup_mma_wait(0, deps=[dq])
        else:
            dv, dk, dq = warpgroup_mma_wait(0, deps=[dv, dk, dq])
        mbarrier.arrive(empty.index(slot), count=1)
        mbarrier.arrive(ds_empty.index(buf), count=1)
        tma.store_wait(0)  # the last tile's reduce has read the staging tile
        gl.thread_barrier()
        dq_smem.index(WHICH).store(dq * sm_scale)
        fence_async_shared()
        gl.thread_barrier()
        _tma_reduce_add(dq_desc, [head * N_Q + q0, WHICH * DQ_COLS], dq_smem.index(WHICH))

    _store_dk_dv(DK, DV, dk, dv, kv_row, first_key, N_K, sm_scale, acc_layout, HALF_N, HEAD_DIM, WHICH)
    tma.store_wait(0)


@gluon.jit
def _gluon_bwd(q_desc, k_desc, v_desc, do_desc, dq_desc, Lse, Delta, DQ, DK, DV, N_Q, N_K, KV_HEADS, GROUP,
               qk_scale, sm_scale, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
               CAUSAL: gl.constexpr, DQ_PARTS: gl.constexpr, DQ_MODE: gl.constexpr, DQ_TILES: gl.constexpr,
               num_warps: gl.constexpr):
    """A program: 2 x HALF_N keys of one (batch, kv head); warps: consumer 0 (the default partition),
    consumer 1 and the producer."""
    HALF: gl.constexpr = k_desc.block_type.shape[0]
    key0 = gl.program_id(0) * 2 * HALF
    off_hkv = gl.program_id(1)  # batch * KV_HEADS + kv head
    q_head0 = (off_hkv // KV_HEADS) * (KV_HEADS * GROUP) + (off_hkv % KV_HEADS) * GROUP
    kv_row = off_hkv * N_K + key0
    n_m_total = gl.cdiv(N_Q, BLOCK_M)
    if CAUSAL:  # the block's first key is visible from query key0 - (N_K - N_Q) on
        m_start = gl.maximum(key0 - (N_K - N_Q), 0) // BLOCK_M
    else:
        m_start = 0
    n_m = gl.maximum(n_m_total - m_start, 0)

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], v_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [4, HALF, BLOCK_M], ds_layout)  # 2 buffers x 2 consumers
    DQ_COLS: gl.constexpr = HEAD_DIM // DQ_PARTS
    dq_smem = gl.allocate_shared_memory(gl.float32, [DQ_TILES, BLOCK_M, DQ_COLS], dq_desc.layout)
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

    if DQ_MODE >= 3:
        gl.warp_specialize([
            (_bwd_consumer_fused, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full,
                                   ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K,
                                   m_start, n_m, qk_scale, sm_scale, 0, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL,
                                   DQ_MODE == 4, HEAD_DIM == 64, num_warps)),
            (_bwd_consumer_fused, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full,
                                   ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K,
                                   m_start, n_m, qk_scale, sm_scale, 1, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL,
                                   DQ_MODE == 4, HEAD_DIM == 64, num_warps)),
            (_bwd_producer, (q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_bar, ready, empty,
                             kv_row, q_head0, GROUP, N_Q, m_start, n_m, BLOCK_M, STAGES)),
        ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_bwd_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                             dq_desc, Lse, Delta, DQ, DK, DV,
                             key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale, sm_scale, 0, HALF,
                             BLOCK_M, HEAD_DIM, STAGES, CAUSAL, DQ_PARTS, DQ_MODE, num_warps)),
            (_bwd_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                             dq_desc, Lse, Delta, DQ, DK, DV,
                             key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale, sm_scale, 1, HALF,
                             BLOCK_M, HEAD_DIM, STAGES, CAUSAL, DQ_PARTS, DQ_MODE, num_warps)),
            (_bwd_producer, (q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_bar, ready, empty,
                             kv_row, q_head0, GROUP, N_Q, m_start, n_m, BLOCK_M, STAGES)),
        ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])


def gluon_backward(do, q, k, v, out, lse, softmax_scale: float, causal: bool, dq_mode: int = 3,
                   stages: int | None = None):
    """dq, dk, dv (q, k, v dense (B, H, N, D) fp16/bf16 at head dim 64 or 128, as the Hopper forward takes)."""
    from kernels._backward import _attn_bwd_delta
    from kernels._forward import strides

    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    do, out = do.contiguous(), out.contiguous()
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    dq_acc = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=torch.float32)
    _attn_bwd_delta[(triton.cdiv(n_q, 64) * batch * heads,)](
        out, do, delta, dq_acc, *strides(out, False), *strides(do, False), heads, n_q, delta, 0,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim, BLOCK_M=64, VARLEN=False, ZERO_DQ=True)
    grid = (triton.cdiv(n_k, BLOCK_N), batch * kv_heads)
    parts = 2 if dq_mode >= 2 else dq_parts(head_dim)
    _gluon_bwd[grid](_hopper._descriptor(q, BLOCK_M), _hopper._descriptor(k, HALF_N), _hopper._descriptor(v, HALF_N),
                     _hopper._descriptor(do, BLOCK_M), _dq_descriptor(dq_acc, head_dim // parts), lse.contiguous(),
                     delta, dq_acc, dk, dv, n_q, n_k, kv_heads,
                     heads // kv_heads, softmax_scale * _hopper.LOG2E, softmax_scale,
                     BLOCK_M=BLOCK_M, HEAD_DIM=head_dim, STAGES=stages or default_stages(head_dim, dq_mode),
                     CAUSAL=bool(causal), DQ_PARTS=parts, DQ_MODE=dq_mode, DQ_TILES=dq_tiles(dq_mode, parts),
                     num_warps=CONSUMER_WARPS, maxnreg=MAX_REGS)
    return dq_acc.to(q.dtype), dk, dv


def _dq_descriptor(dq_acc: torch.Tensor, cols: int):
    """The float32 dQ accumulator as one (B*H*N, D) matrix, tiles of BLOCK_M rows x `cols` columns. A query
    tile past its head's last row reaches into the next head's rows: those rows of dS are zero, so the
    reduce adds zeros there."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    b, h, n, d = dq_acc.shape
    layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, cols], gl.float32)
    return TensorDescriptor(dq_acc, [b * h * n, d], [d, 1], [BLOCK_M, cols], layout)


def dq_tiles(dq_mode: int, parts: int) -> int:
    """float32 dQ staging tiles in shared memory: one per consumer in mode 3, one per consumer and column block
    before it."""
    return 2 if dq_mode >= 3 else 2 * parts


def default_stages(head_dim: int, dq_mode: int) -> int:
    """Slots of the Q/dO ring: three where shared memory has room (mode 3 stages half the dQ tiles of mode 2)."""
    return 3 if dq_mode >= 3 or head_dim == 64 else 2


def dq_parts(head_dim: int) -> int:
    """Column blocks of each dQ tile: two at head dim 128, where one 64 x 128 float32 tile does not fit
    beside the dK and dV accumulators."""
    return 2 if head_dim == 128 else 1


def compile_report(head_dim: int, causal: bool, parts: int | None = None, dq_mode: int = 2) -> str:
    """Compile for sm_90a without a GPU and return ptxas' report (tests/hopper_compile.py's target and report)."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.compiler import make_backend
    from triton.experimental.gluon._runtime import GluonASTSource

    sys.path.insert(0, "tests")
    from hopper_compile import SM90, _ptxas_report

    parts = 2 if dq_mode >= 2 else parts or dq_parts(head_dim)
    x = torch.empty(1, 2, 4096, head_dim, dtype=torch.float16)
    f32 = torch.empty(1, dtype=torch.float32)
    args = dict(q_desc=_hopper._descriptor(x, BLOCK_M), k_desc=_hopper._descriptor(x, HALF_N),
                v_desc=_hopper._descriptor(x, HALF_N), do_desc=_hopper._descriptor(x, BLOCK_M),
                dq_desc=_dq_descriptor(torch.empty(1, 2, 4096, head_dim), head_dim // parts), Lse=f32, Delta=f32,
                DQ=f32, DK=x, DV=x)
    signature = {name: native_specialize_impl(BaseBackend, value, False, True, True)[0] for name, value in args.items()}
    signature.update(N_Q="i32", N_K="i32", KV_HEADS="i32", GROUP="i32", qk_scale="fp32", sm_scale="fp32")
    constants = dict(BLOCK_M=BLOCK_M, HEAD_DIM=head_dim, STAGES=default_stages(head_dim, dq_mode), CAUSAL=causal,
                     DQ_PARTS=parts, DQ_MODE=dq_mode, DQ_TILES=dq_tiles(dq_mode, parts), num_warps=CONSUMER_WARPS)
    signature.update({name: "constexpr" for name in constants})
    constexprs = {(_gluon_bwd.arg_names.index(name),): value for name, value in constants.items()}
    options = make_backend(SM90).parse_options(dict(num_warps=CONSUMER_WARPS, maxnreg=MAX_REGS))
    start = time.time()
    compiled = triton.compile(GluonASTSource(_gluon_bwd, signature, constexprs, {}), target=SM90,
                              options=options.__dict__)
    ptx = compiled.asm["ptx"]
    arch, info = _ptxas_report(ptx)
    return (f"gluon bwd d{head_dim} causal={causal} dq_mode={dq_mode} dq_parts={parts}: {arch} shared={compiled.metadata.shared} "
            f"wgmma={ptx.count('wgmma.mma_async')} setmaxnreg={ptx.count('setmaxnreg')} "
            f"atom={ptx.count('red.global') + ptx.count('atom.global')} tma_reduce={ptx.count('cp.reduce.async.bulk')} ({time.time() - start:.1f} s) | {info}")


MODES = (0, 1, 2, 3, 4)  # dQ: 0 element-wise atomic adds, 1 TMA reduce per consumer, 2 one TMA reduce per 128
#                        keys, 3 and 4 mode 2 with fewer stalls (_bwd_consumer_fused; 4 drains dK, dV before dQ)


def check() -> None:
    """On an sm_90 GPU: every gradient against the float64 reference with the tests' rule."""
    sys.path.insert(0, "tests")
    from test_kernels import assert_close_to_reference, make_inputs

    from kernels import attention_reference, flash_attention

    for shape in [(2, 4, 4, 1024, 1024, 128), (1, 8, 2, 1000, 1000, 64), (2, 3, 1, 129, 385, 128),
                  (1, 4, 4, 2048, 4096, 64)]:
        for causal in (False, True):
            q, k, v = make_inputs(*shape, torch.float16)
            out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
            do = torch.randn_like(out)
            ref = attention_reference(q, k, v, causal=causal, upcast=True)[0]
            low = attention_reference(q, k, v, causal=causal, upcast=False)[0]
            ref_grads = torch.autograd.grad(ref, (q, k, v), do.double())
            low_grads = torch.autograd.grad(low, (q, k, v), do)
            for mode in MODES:
                grads = gluon_backward(do, q.detach(), k.detach(), v.detach(), out.detach(), lse,
                                       shape[-1] ** -0.5, causal, dq_mode=mode)
                for name, ours, lo, re_ in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
                    assert_close_to_reference(name, ours, lo, re_)
                print(f"ok {shape} causal={causal} dq_mode={mode}", flush=True)


def bench() -> None:
    """On an sm_90 GPU: backward TFLOP/s (the paper's count, 2.5x the forward's) of this draft and of the
    engine's portable backward (autograd of flash_attention), fp16, on the paper's shapes."""
    from triton.testing import do_bench

    from kernels import flash_attention

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    print("head_dim,causal,seqlen," + ",".join(f"mode{m}_tflops" for m in MODES)
          + ",portable_tflops,cudnn_tflops,best_over_portable,best_over_cudnn", flush=True)
    for head_dim in (64, 128):
        for causal in (False, True):
            for n in (2048, 8192, 16384):
                shape = (16384 // n, 2048 // head_dim, n, head_dim)
                q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True)
                           for _ in range(3))
                out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
                do = torch.randn_like(out)
                args = (do, q.detach(), k.detach(), v.detach(), out.detach(), lse, head_dim ** -0.5, causal)
                drafts = [do_bench(lambda: gluon_backward(*args, dq_mode=m), warmup=10, rep=50, return_mode="median")
                          for m in MODES]
                portable = do_bench(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True),
                                    warmup=10, rep=50, return_mode="median")
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    ref_out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    cudnn = do_bench(lambda: torch.autograd.grad(ref_out, (q, k, v), do, retain_graph=True),
                                     warmup=10, rep=50, return_mode="median")
                flop = 2.5 * 4 * shape[0] * shape[1] * n * n * head_dim / (2 if causal else 1)
                best = min(drafts)
                print(f"{head_dim},{int(causal)},{n}," + ",".join(f"{flop / d / 1e9:.0f}" for d in drafts)
                      + f",{flop / portable / 1e9:.0f},{flop / cudnn / 1e9:.0f},{portable / best:.2f},{cudnn / best:.2f}",
                      flush=True)


def main() -> int:
    global MODES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="run on an sm_90 GPU against the reference")
    parser.add_argument("--bench", action="store_true", help="time it against the portable backward (sm_90 GPU)")
    parser.add_argument("--modes", default=",".join(map(str, MODES)), help="dQ modes to check and time, e.g. 2,3,4")
    parsed = parser.parse_args()
    MODES = tuple(int(m) for m in parsed.modes.split(","))
    if parsed.check or parsed.bench:
        if parsed.check:
            check()
        if parsed.bench:
            bench()
        return 0
    for head_dim in (64, 128):
        for causal in (False, True):
            for mode in MODES:
                print(compile_report(head_dim, causal, None, mode), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
