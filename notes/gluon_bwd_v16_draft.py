"""A draft toward v16 (notes/perf.md): the Hopper backward of kernels/_hopper_bwd.py (at 8a451f2) with fewer
spills at head dim 128; compiled here for sm_90a, not yet checked or timed on a GPU.

    PYTHONPATH=. .venv/bin/python notes/gluon_bwd_v16_draft.py > notes/gluon_bwd_v16_draft_compile.txt
    PYTHONPATH=. python3 notes/gluon_bwd_v16_draft.py --check --bench   # sm_90 GPU: float64 checks, then timing

What the compiles show (notes/gluon_bwd_v16_draft_compile.txt, ptxas -v on the PTX Triton 3.6 emits):
- At d128 the kernel spills 172 bytes (full) and 308 (causal) because ptxas allocates it within the
  launch's `.maxnreg 168` (65536 registers over the 12 warps Triton gives two consumer warpgroups and
  a one-warp producer), although the consumers raise themselves to 240 and 256 with setmaxnreg (the
  SASS holds the USETMAXREG instructions, and the spill stores sit inside both consumer regions).
  Compiling the same PTX with .maxnreg 200 / 224 / 240 leaves 84 / 64 / 64 bytes.
- NO_PRODUCER: no producer warp; consumer 0 issues the TMA loads itself (K and V once, then each tile
  STAGES - 1 ahead, into the slot both consumers released). 8 warps, so the launch can give every
  thread 256 registers: d128 full spills nothing (255 registers), d128 causal 220 bytes.
- LATE_LOADS (lse loaded while the first MMAs run, delta just before dP^T is waited on): at d128 causal
  308 -> 252 bytes with the producer, 220 -> 112 without it; at d128 full 172 -> 136, and 0 -> 48 without
  the producer.
- Smaller effects: DS_SMEM (dK += dS^T Q reads dS^T from the shared-memory tile stored for dQ anyway,
  instead of a register operand) and P_SMEM (P^T through shared memory for dV += P^T dO) remove 8-16
  bytes of spills at 168 registers and none at 255; SKIP_MASK (the runtime branch that masks only edge
  and diagonal tiles) adds spills at d128 in every form tried, and so did a loop split in two (masked
  tiles first, then the rest; 400 bytes at d128 full) and masks applied one select at a time.
- d64 spills nothing in any variant.
Everything else is kernels/_hopper_bwd.py at 8a451f2 (three helpers come from notes/gluon_bwd_draft.py,
where they are the same).
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from gluon_bwd_draft import _store_dk_dv, _tma_reduce_add, _visible  # v14's draft, unchanged since
from kernels import _hopper
from kernels._backward import _attn_bwd_delta
from kernels._forward import strides
from kernels._launch import launch_kernel

HALF_N = 64  # keys of one consumer warpgroup; a program holds two
BLOCK_N = 2 * HALF_N
BLOCK_M = 64  # query rows of one streamed tile
CONSUMER_WARPS = 4
TOTAL_WARPS = 12  # two consumer warpgroups and the producer's warp, which takes a warpgroup's registers
MAX_REGS = 168  # per thread at launch, as the Hopper forward
# head dim -> (consumer schedule, Q/dO ring slots): "fused" at 64 (1.05-1.20x the portable backward in
# notes/gluon_bwd_draft_bench_v3_h200.csv, its mode 4), "plain" at 128 (0.95-1.09x, mode 2)
SCHEDULES = {64: ("fused", 3), 128: ("plain", 2)}
_CONSUMER_WARPS = gl.constexpr(CONSUMER_WARPS)
_CONSUMER_REGS = gl.constexpr(240)
_PRODUCER_REGS = gl.constexpr(24)
_LOG2E = gl.constexpr(_hopper.LOG2E)


def default_config(head_dim: int) -> dict:
    """The tiles at this head dim, for the record: query rows streamed, keys a program holds, warps (the
    producer's counted as a warpgroup, as the Hopper forward's are) and ring slots."""
    return dict(block_m=BLOCK_M, block_n=BLOCK_N, num_warps=TOTAL_WARPS, num_stages=SCHEDULES[head_dim][1])


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
def _consumer(q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, p_smem, kv_bar, ready, empty, ds_full, ds_empty,
              dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale, sm_scale,
              q_desc, k_desc, v_desc, do_desc,
              WHICH: gl.constexpr, HALF_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr, DS_SMEM: gl.constexpr, P_SMEM: gl.constexpr,
              LOADS: gl.constexpr, SKIP_MASK: gl.constexpr, LATE_LOADS: gl.constexpr,
              num_warps: gl.constexpr):
    """The plain schedule. One warpgroup, keys [key0 + WHICH * HALF_N, + HALF_N): dK and dV over every
    streamed query tile, and half of the columns of each tile's dQ over all 128 keys of the program."""
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
    if LOADS:  # no producer warp: this consumer issues K, V and the ring's first STAGES - 1 tiles
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
        if LOADS:  # the tile STAGES - 1 ahead, into the slot tile t - 1 used (once both consumers released it)
            if t + STAGES - 1 < GROUP * n_m:
                _issue_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, t + STAGES - 1, q_head0, N_Q, m_start,
                            n_m, BLOCK_M, STAGES)
        if not LATE_LOADS:
            lse = gl.load(Lse + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0) * _LOG2E
            delta = gl.load(Delta + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0)
        mbarrier.wait(ready.index(slot), phase)
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        # S^T = K Q^T and dP^T = V dO^T, K and V from shared memory as the A operand.
        st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        if LATE_LOADS:  # lse while the MMAs run, delta later: shorter live ranges
            lse = gl.load(Lse + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0) * _LOG2E
        st = warpgroup_mma_wait(1, deps=[st])
        pt = gl.exp2(st * qk_scale - gl.expand_dims(lse, 0))
        if SKIP_MASK:  # a runtime branch: the mask only on tiles that reach past an edge or the diagonal
            needs_mask = (q0 + BLOCK_M > N_Q) | (first_key + HALF_N > N_K)
            if CAUSAL:
                needs_mask = needs_mask | (q0 + causal_offset < first_key + HALF_N - 1)
            if needs_mask:
                pt = gl.where(_visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL), pt, 0.0)
        else:
            pt = gl.where(_visible(keys, queries, N_Q, N_K, causal_offset, CAUSAL), pt, 0.0)
        if P_SMEM:
            p_smem.index(WHICH).store(pt.to(dtype))
            fence_async_shared()
            gl.thread_barrier()
            dv = warpgroup_mma(p_smem.index(WHICH), do_tile, dv, is_async=True)  # dV += P^T dO
        else:
            pt_op = gl.convert_layout(pt.to(dtype), a_layout)
            dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)  # dV += P^T dO
        if LATE_LOADS:
            delta = gl.load(Delta + (head * N_Q + queries).to(gl.int64), mask=in_q, other=0.0)
        dpt = warpgroup_mma_wait(1, deps=[dpt])
        dst = (pt * (dpt - gl.expand_dims(delta, 0))).to(dtype)
        buf = t % 2
        mbarrier.wait(ds_empty.index(buf), ((t // 2) & 1) ^ 1)  # the other consumer has read tile t - 2's
        ds_smem.index(buf * 2 + WHICH).store(dst)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(ds_full.index(buf), count=1)
        if DS_SMEM:
            dk = warpgroup_mma(ds_smem.index(buf * 2 + WHICH), q_tile, dk, is_async=True)  # dK += dS^T Q
        else:
            dst_op = gl.convert_layout(dst, a_layout)
            dk = warpgroup_mma(dst_op, q_tile, dk, is_async=True)  # dK += dS^T Q
        dv, dk = warpgroup_mma_wait(0, deps=[dv, dk])
        mbarrier.arrive(empty.index(slot), count=1)
        # dQ: both consumers' dS^T; this one sums all 128 keys for its half of the columns, one TMA reduce
        mbarrier.wait(ds_full.index(buf), (t // 2) & 1)
        tma.store_wait(0)  # the last tile's reduce has read the staging tile
        gl.thread_barrier()
        dq = warpgroup_mma(ds_smem.index(buf * 2).permute((1, 0)),
                           k_smem.index(0).slice(WHICH * DQ_COLS, DQ_COLS, dim=1), dq_zero,
                           use_acc=False, is_async=True)
        dq = warpgroup_mma(ds_smem.index(buf * 2 + 1).permute((1, 0)),
                           k_smem.index(1).slice(WHICH * DQ_COLS, DQ_COLS, dim=1), dq, is_async=True)
        dq = warpgroup_mma_wait(0, deps=[dq])
        mbarrier.arrive(ds_empty.index(buf), count=1)
        dq_smem.index(WHICH).store(dq * sm_scale)
        fence_async_shared()
        gl.thread_barrier()
        _tma_reduce_add(dq_desc, [head * N_Q + q0, WHICH * DQ_COLS], dq_smem.index(WHICH))

    _store_dk_dv(DK, DV, dk, dv, kv_row, first_key, N_K, sm_scale, acc_layout, HALF_N, HEAD_DIM, WHICH)
    tma.store_wait(0)


@gluon.jit
def _consumer_fused(q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full, ds_empty,
                    dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m, qk_scale,
                    sm_scale, WHICH: gl.constexpr, HALF_N: gl.constexpr, BLOCK_M: gl.constexpr,
                    HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, DRAIN_DK: gl.constexpr,
                    SKIP_MASK: gl.constexpr, DS_SMEM: gl.constexpr, num_warps: gl.constexpr):
    """The fused schedule: the plain one's work (`_consumer`) with fewer stalls: the next tile's lse and
    delta loaded while this tile computes; dK and dQ issued back to back and drained once, or with
    DRAIN_DK dK and dV drained before dQ starts (fewer live registers); and with SKIP_MASK the mask only
    on tiles that reach past an edge or the diagonal."""
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
        if DS_SMEM:
            dk = warpgroup_mma(ds_smem.index(buf * 2 + WHICH), q_tile, dk, is_async=True)  # dK += dS^T Q
        else:
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
def _hopper_bwd(q_desc, k_desc, v_desc, do_desc, dq_desc, Lse, Delta, DK, DV, N_Q, N_K, KV_HEADS, GROUP,
                qk_scale, sm_scale, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, FUSED: gl.constexpr, DS_SMEM: gl.constexpr, P_SMEM: gl.constexpr,
                SKIP_MASK: gl.constexpr, NO_PRODUCER: gl.constexpr, LATE_LOADS: gl.constexpr,
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
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_DIM // 2], dq_desc.layout)  # a consumer each
    p_smem = gl.allocate_shared_memory(dtype, [2 if P_SMEM else 1, HALF, BLOCK_M], ds_layout)  # P^T, a consumer each
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

    if NO_PRODUCER:  # two partitions of 4 warps: 8 warps, all registers to the consumers
        gl.warp_specialize([
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, p_smem, kv_bar, ready, empty, ds_full,
                         ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, 0, HALF, BLOCK_M, HEAD_DIM, STAGES,
                         CAUSAL, DS_SMEM, P_SMEM, True, SKIP_MASK, LATE_LOADS, num_warps)),
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, p_smem, kv_bar, ready, empty, ds_full,
                         ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, 1, HALF, BLOCK_M, HEAD_DIM, STAGES,
                         CAUSAL, DS_SMEM, P_SMEM, False, SKIP_MASK, LATE_LOADS, num_warps)),
        ], [_CONSUMER_WARPS], [_CONSUMER_REGS])
    elif FUSED:
        gl.warp_specialize([
            (_consumer_fused, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full,
                               ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K,
                               m_start, n_m, qk_scale, sm_scale, 0, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL,
                               True, SKIP_MASK, DS_SMEM, num_warps)),
            (_consumer_fused, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, kv_bar, ready, empty, ds_full,
                               ds_empty, dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K,
                               m_start, n_m, qk_scale, sm_scale, 1, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL,
                               True, SKIP_MASK, DS_SMEM, num_warps)),
            (_producer, (q_desc, k_desc, v_desc, do_desc, q_smem, do_smem, k_smem, v_smem, kv_bar, ready, empty,
                         kv_row, q_head0, GROUP, N_Q, m_start, n_m, BLOCK_M, STAGES)),
        ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, p_smem, kv_bar, ready, empty, ds_full, ds_empty,
                         dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, 0, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL,
                         DS_SMEM, P_SMEM, False, SKIP_MASK, LATE_LOADS, num_warps)),
            (_consumer, (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, p_smem, kv_bar, ready, empty, ds_full, ds_empty,
                         dq_desc, Lse, Delta, DK, DV, key0, q_head0, kv_row, GROUP, N_Q, N_K, m_start, n_m,
                         qk_scale, sm_scale, q_desc, k_desc, v_desc, do_desc, 1, HALF, BLOCK_M, HEAD_DIM, STAGES, CAUSAL,
                         DS_SMEM, P_SMEM, False, SKIP_MASK, LATE_LOADS, num_warps)),
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
                schedule: str | None = None, stages: int | None = None, ds_smem: bool = False, p_smem: bool = False,
                skip_mask: bool | None = None, no_producer: bool = False,
                late_loads: bool = False) -> tuple[tuple, dict]:
    """The positional and keyword arguments of one `_hopper_bwd` launch (tests/hopper_compile.py
    compiles from them too)."""
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    default_schedule, default_stages = SCHEDULES[head_dim]
    args = (_hopper._descriptor(q, BLOCK_M), _hopper._descriptor(k, HALF_N), _hopper._descriptor(v, HALF_N),
            _hopper._descriptor(do, BLOCK_M), dq_descriptor(dq_acc), lse, delta, dk, dv, n_q, n_k, kv_heads,
            heads // kv_heads, softmax_scale * _hopper.LOG2E, softmax_scale)
    constants = dict(BLOCK_M=BLOCK_M, HEAD_DIM=head_dim, STAGES=stages or default_stages, CAUSAL=bool(causal),
                     FUSED=(schedule or default_schedule) == "fused", DS_SMEM=ds_smem, P_SMEM=p_smem,
                     SKIP_MASK=head_dim == 64 if skip_mask is None else skip_mask, NO_PRODUCER=no_producer, LATE_LOADS=late_loads,
                     num_warps=CONSUMER_WARPS)
    return args, constants


def compile_report(head_dim: int, causal: bool, schedule: str, stages: int, **switches) -> str:
    """One configuration compiled for sm_90a: a line with shared memory, MMA counts and ptxas' report."""
    from gluon_compile import compile_sm90

    n = 4096
    x = torch.empty(1, 2, n, head_dim, dtype=torch.float16)
    f32 = torch.empty(1, dtype=torch.float32)
    args, constants = kernel_args(x, x, x, x, torch.empty(1, 2, n, head_dim), f32, f32, x, x, head_dim ** -0.5,
                                  causal, schedule, stages, **switches)
    compiled, ptx, arch, info, seconds = compile_sm90(_hopper_bwd, args, constants, max_regs(**switches))
    flags = " ".join(f"{k}={v}" for k, v in switches.items())
    return (f"d{head_dim} causal={causal} {schedule} stages={stages} {flags}: {arch} shared={compiled.metadata.shared} "
            f"wgmma={ptx.count('wgmma.mma_async')} ({seconds:.1f} s) | {info}")


def max_regs(no_producer: bool = False, **_) -> int:
    """Registers a thread at launch: 65536 over 12 warps (the producer's warp takes a warpgroup's), or over
    8 without the producer."""
    return 256 if no_producer else MAX_REGS


def gluon_backward(do, q, k, v, out, lse, softmax_scale: float, causal: bool, schedule: str, stages: int,
                   **switches):
    """dq, dk, dv by this draft's kernel (launched through Triton's JIT), as kernels._hopper_bwd.hopper_backward."""
    batch, heads, n_q, head_dim = q.shape
    do, out = do.contiguous(), out.contiguous()
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    dq_acc = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=torch.float32)
    launch_kernel(_attn_bwd_delta, (triton.cdiv(n_q, 64) * batch * heads,),
                  out, do, delta, dq_acc, *strides(out, False), *strides(do, False), heads, n_q, delta, 0,
                  HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim, BLOCK_M=64, VARLEN=False, ZERO_DQ=True)
    args, constants = kernel_args(q, k, v, do, dq_acc, lse.contiguous(), delta, dk, dv, softmax_scale, causal,
                                  schedule, stages, **switches)
    _hopper_bwd[(triton.cdiv(k.shape[2], BLOCK_N), batch * k.shape[1])](*args, **constants,
                                                                       maxnreg=max_regs(**switches))
    return dq_acc.to(q.dtype), dk, dv


def check(variants=None, head_dims=(128, 64)) -> None:
    """On an sm_90 GPU: every variant's gradients against the float64 reference with the tests' rule."""
    import sys

    sys.path.insert(0, "tests")
    from test_kernels import assert_close_to_reference, make_inputs

    from kernels import attention_reference, flash_attention

    for shape in [(2, 4, 4, 1024, 1024, 128), (1, 8, 2, 1000, 1000, 64), (2, 3, 1, 129, 385, 128),
                  (1, 4, 2, 700, 900, 128)]:
        if shape[-1] not in head_dims:
            continue
        for causal in (False, True):
            q, k, v = make_inputs(*shape, torch.float16)
            out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
            do = torch.randn_like(out)
            ref = attention_reference(q, k, v, causal=causal, upcast=True)[0]
            low = attention_reference(q, k, v, causal=causal, upcast=False)[0]
            ref_grads = torch.autograd.grad(ref, (q, k, v), do.double())
            low_grads = torch.autograd.grad(low, (q, k, v), do)
            for schedule, stages, switches in variants or VARIANTS:
                if shape[-1] == 64 and switches.get("p_smem"):
                    continue
                grads = gluon_backward(do, q.detach(), k.detach(), v.detach(), out.detach(), lse,
                                       shape[-1] ** -0.5, causal, schedule, stages, **switches)
                for name, ours, lo, re_ in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
                    assert_close_to_reference(name, ours, lo, re_)
                print(f"ok {shape} causal={causal} {schedule} stages={stages} {switches}", flush=True)


def bench(variants=None, head_dims=(128, 64)) -> None:
    """On an sm_90 GPU: backward TFLOP/s (2.5x the forward's FLOPs) of each variant beside the kernel in
    kernels/_hopper_bwd.py and cuDNN's backward, fp16, the paper's shapes (do_bench medians, same process)."""
    from triton.testing import do_bench

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import _hopper_bwd as engine
    from kernels import flash_attention

    variants = variants or VARIANTS
    names = [f"{sch}{st}" + "".join(f"+{k}" for k in sw) for sch, st, sw in variants]
    print("head_dim,causal,seqlen," + ",".join(names) + ",engine,cudnn", flush=True)
    for head_dim in head_dims:
        for causal in (False, True):
            for n in (2048, 8192, 16384):
                shape = (16384 // n, 2048 // head_dim, n, head_dim)
                q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True)
                           for _ in range(3))
                out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
                do = torch.randn_like(out)
                args = (do, q.detach(), k.detach(), v.detach(), out.detach(), lse, head_dim ** -0.5, causal)
                flop = 2.5 * 4 * shape[0] * shape[1] * n * n * head_dim / (2 if causal else 1)
                times = []
                for schedule, stages, switches in variants:
                    if head_dim == 64 and switches.get("p_smem"):
                        times.append(float("nan"))
                        continue
                    times.append(do_bench(lambda: gluon_backward(*args, schedule, stages, **switches), warmup=10,
                                          rep=50, return_mode="median"))
                times.append(do_bench(lambda: engine.hopper_backward(*args), warmup=10, rep=50, return_mode="median"))
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    ref_out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    times.append(do_bench(lambda: torch.autograd.grad(ref_out, (q, k, v), do, retain_graph=True),
                                          warmup=10, rep=50, return_mode="median"))
                print(f"{head_dim},{int(causal)},{n}," + ",".join(f"{flop / t / 1e9:.0f}" for t in times), flush=True)


VARIANTS = [  # (schedule, stages, switches)
    ("plain", 2, {}),
    ("plain", 2, dict(ds_smem=True)),
    ("plain", 2, dict(ds_smem=True, p_smem=True)),
    ("plain", 2, dict(no_producer=True)),
    ("plain", 2, dict(no_producer=True, ds_smem=True)),
    ("plain", 2, dict(no_producer=True, skip_mask=True)),
    ("plain", 2, dict(late_loads=True)),
    ("plain", 2, dict(no_producer=True, late_loads=True)),
    ("plain", 3, dict(no_producer=True)),
    ("fused", 2, {}),
    ("fused", 3, {}),
    ("fused", 3, dict(ds_smem=True)),
]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="run on an sm_90 GPU against the reference")
    parser.add_argument("--bench", action="store_true", help="time the variants (sm_90 GPU)")
    parser.add_argument("--variants", help="comma-separated indices into VARIANTS (default: all)")
    parser.add_argument("--head-dims", default="128,64", help="comma-separated head dims (default: 128,64)")
    parsed = parser.parse_args()
    variants = [VARIANTS[int(i)] for i in parsed.variants.split(",")] if parsed.variants else None
    head_dims = tuple(int(d) for d in parsed.head_dims.split(","))
    if parsed.check:
        check(variants, head_dims)
    if parsed.bench:
        bench(variants, head_dims)
    if parsed.check or parsed.bench:
        return
    for head_dim in (128, 64):
        for causal in (False, True):
            for schedule, stages, switches in VARIANTS:
                if head_dim == 64 and switches.get("p_smem"):
                    continue
                try:
                    print(compile_report(head_dim, causal, schedule, stages, **switches), flush=True)
                except Exception as error:  # noqa: BLE001 - report and go on (shared memory, layouts)
                    print(f"d{head_dim} causal={causal} {schedule} stages={stages} {switches}: "
                          f"{type(error).__name__}: {str(error).splitlines()[-1][:200]}", flush=True)


if __name__ == "__main__":
    main()
