"""The Hopper (sm_90) backward: one pass over the tile pairs, TMA loads, dQ by TMA reduce-add.

The portable backward (`_backward.py`) runs two kernels over the tile pairs: dK/dV (4 of the N x N x D
matmuls) and a separate dQ kernel that recomputes Q K^T and dO V^T (3 more), so 7 matmuls where
the FLOP count credits 5. This one runs a single kernel, one program per (key block, batch x kv
head), in the manner of FlashAttention-2's Algorithm 2 and FlashAttention-3's backward:

- K and V of the key block stay on chip; Q and dO tiles of every query block that sees the key
  block (of every query head sharing the K/V head, for grouped-query attention) stream in through
  tensor descriptors, which Triton lowers to TMA copies pipelined `num_stages` deep;
- P^T = exp2(K Q^T * scale - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta),
  dK += dS^T Q, and dQ_tile = dS K is added into a float32 dQ accumulator by a TMA reduce
  (`cp.reduce.async.bulk.tensor ... add`, from the descriptor's `atomic_add`), which holds no
  registers while it drains;
- the delta pre-pass of the portable backward zeroes the accumulator; a copy converts it to the
  inputs' dtype at the end. The additions land in any order: dQ is not bitwise reproducible
  (`deterministic=True` keeps the portable backward).
- causal: key blocks nearest the start see the most queries and are launched first.

It covers what the Hopper forward covers (float16 and bfloat16, head dims 64 and 128, causal with
seqlen_q <= seqlen_k and full masks, grouped-query attention, (B, H, N, D) inputs whose heads'
rows are contiguous) and none of the training features; `kernels._hopper.hopper_unsupported` names
the rest.
Descriptor tiles are 3-D (batch x head, rows, head dim): rows past a head's end read as zeros and
are dropped on store and reduce, so ragged lengths need no extra masking of memory. Nothing here
runs on Triton's interpreter.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels._backward import _attn_bwd_delta, _query_bounds
from kernels._forward import strides
from kernels._launch import launch_kernel
from kernels.tiles import TileConfig

LOG2E = 1.4426950408889634


def default_config(head_dim: int) -> TileConfig:
    """(query rows streamed, keys held, warps, stages) of the one-pass backward: the fastest of ten
    configs at head dims 64 and 128 on the H200 (notes/hopper_bwd_tiles.py; notes/perf.md, v12)."""
    return TileConfig(64, 128, 8, 3)


@triton.jit
def _hopper_bwd_inner(dk, dv, k, v, q_desc, do_desc, dq_desc, lse_ptr, delta_ptr, bh, offs_n, start, end,
                      qk_scale, sm_scale, N_Q, N_K, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                      MASK: tl.constexpr, CAUSAL: tl.constexpr, STAGES: tl.constexpr):
    """dK, dV of one key block over query rows [start, end) of head `bh`; dQ reduced into the accumulator."""
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in tl.range(start, end, BLOCK_M, num_stages=STAGES):
        q = q_desc.load([bh, start_m, 0]).reshape([BLOCK_M, HEAD_DIM])
        do = do_desc.load([bh, start_m, 0]).reshape([BLOCK_M, HEAD_DIM])
        offs_m = start_m + offs_m0
        if MASK:
            lse = tl.load(lse_ptr + offs_m, mask=offs_m < N_Q, other=0.0)
            delta = tl.load(delta_ptr + offs_m, mask=offs_m < N_Q, other=0.0)
        else:
            lse = tl.load(lse_ptr + offs_m)
            delta = tl.load(delta_ptr + offs_m)
        qk_t = tl.dot(k, tl.trans(q))  # [BLOCK_N, BLOCK_M]
        p_t = tl.math.exp2(qk_t * qk_scale - lse[None, :] * 1.4426950408889634)
        if MASK:
            visible = (offs_n[:, None] < N_K) & (offs_m[None, :] < N_Q)
            if CAUSAL:
                visible = visible & (offs_n[:, None] <= offs_m[None, :] + (N_K - N_Q))
            p_t = tl.where(visible, p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        dq = tl.dot(tl.trans(ds_t), k) * sm_scale  # [BLOCK_M, HEAD_DIM] float32
        dq_desc.atomic_add([bh, start_m, 0], dq.reshape([1, BLOCK_M, HEAD_DIM]))
    return dk, dv


@triton.jit
def _hopper_bwd(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, Lse, Delta,
                Z_HKV, H_KV, GROUP, N_Q, N_K, qk_scale, sm_scale,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, STAGES: tl.constexpr):
    # Key block slowest, (batch, kv head) fastest: every head's first key blocks (the longest under a
    # causal mask) are issued first.
    pid = tl.program_id(0)
    start_n = (pid // Z_HKV) * BLOCK_N
    off_zkv = pid % Z_HKV
    off_z = off_zkv // H_KV
    off_hkv = off_zkv % H_KV
    H = H_KV * GROUP
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = k_desc.load([off_zkv, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])
    v = v_desc.load([off_zkv, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # Query rows to visit: [lo, mid) the causal band (masked), [mid, even_end) unmasked unless the key
    # block is ragged, [even_end, N_Q) the ragged last query block (masked); as the portable dK/dV kernel.
    lo, mid, even_end = _query_bounds(start_n, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL, True, EVEN_M)
    for g in range(0, GROUP):
        bh = off_z * H + off_hkv * GROUP + g
        row0 = tl.cast(bh, tl.int64) * N_Q
        lse_ptr = Lse + row0
        delta_ptr = Delta + row0
        dk, dv = _hopper_bwd_inner(dk, dv, k, v, q_desc, do_desc, dq_desc, lse_ptr, delta_ptr, bh, offs_n, lo, mid,
                                   qk_scale, sm_scale, N_Q, N_K, HEAD_DIM, BLOCK_M, True, CAUSAL, STAGES)
        dk, dv = _hopper_bwd_inner(dk, dv, k, v, q_desc, do_desc, dq_desc, lse_ptr, delta_ptr, bh, offs_n, mid,
                                   even_end, qk_scale, sm_scale, N_Q, N_K, HEAD_DIM, BLOCK_M, not EVEN_N, CAUSAL,
                                   STAGES)
        dk, dv = _hopper_bwd_inner(dk, dv, k, v, q_desc, do_desc, dq_desc, lse_ptr, delta_ptr, bh, offs_n,
                                   even_end, N_Q, qk_scale, sm_scale, N_Q, N_K, HEAD_DIM, BLOCK_M, True, CAUSAL,
                                   STAGES)
    dk_desc.store([off_zkv, start_n, 0], (dk * sm_scale).to(dk_desc.dtype).reshape([1, BLOCK_N, HEAD_DIM]))
    dv_desc.store([off_zkv, start_n, 0], dv.to(dv_desc.dtype).reshape([1, BLOCK_N, HEAD_DIM]))


def _rows(t: torch.Tensor, block_rows: int) -> TensorDescriptor:
    """A (batch x head, rows, head dim) descriptor of a (B, H, N, D) tensor whose heads' rows are contiguous."""
    b, h, n, d = t.shape
    return TensorDescriptor(t, [b * h, n, d], [n * d, d, 1], [1, block_rows, d])


def hopper_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    lse: torch.Tensor, softmax_scale: float, causal: bool,
                    tiles: TileConfig | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of attention(q, k, v) given the output, its log-sum-exp and d_out (callers check
    `hopper_unsupported` first; do may have any strides: it is made contiguous here)."""
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    tiles = tiles or default_config(head_dim)
    do = do.contiguous()
    out = out.contiguous()
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    delta = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    dq_acc = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=torch.float32)
    delta_block = 64
    launch_kernel(_attn_bwd_delta, (triton.cdiv(n_q, delta_block) * batch * heads,),
                  out, do, delta, dq_acc, *strides(out, False), *strides(do, False), heads, n_q, delta, 0,
                  HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim, BLOCK_M=delta_block, VARLEN=False, ZERO_DQ=True)
    bm, bn = tiles.block_m, tiles.block_n
    grid = (triton.cdiv(n_k, bn) * batch * kv_heads,)
    # Through Triton's JIT: launch_kernel's direct path keys on argument values, and a descriptor
    # holds its tensor's address.
    _hopper_bwd[grid](_rows(q, bm), _rows(k, bn), _rows(v, bn), _rows(do, bm), _rows(dq_acc, bm), _rows(dk, bn),
                      _rows(dv, bn), lse.contiguous(), delta, batch * kv_heads, kv_heads, heads // kv_heads, n_q, n_k,
                      softmax_scale * LOG2E, softmax_scale,
                      HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal), EVEN_M=n_q % bm == 0,
                      EVEN_N=n_k % bn == 0, STAGES=tiles.num_stages, num_warps=tiles.num_warps, num_stages=1)
    dq.copy_(dq_acc)
    return dq, dk, dv
