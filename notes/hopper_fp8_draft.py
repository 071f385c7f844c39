"""A draft of the Hopper forward for fp8 (e4m3) inputs in Gluon (issue 12: fp8 >= 1.5x our fp16 forward at
d128): kernels/_hopper.py's kernel with both matmuls on fp8 tensor cores. Compiled here for sm_90a; not yet
checked or timed on a GPU.

    PYTHONPATH=. .venv/bin/python notes/hopper_fp8_draft.py > notes/hopper_fp8_draft_compile.txt
    PYTHONPATH=. python3 notes/hopper_fp8_draft.py --check --bench   # sm_90 GPU: float64 checks, then timing

Today fp8 runs the portable Triton forward (kernels/_forward.py, FP8=True) at 1.03-1.16x the default fp16
forward, which at d128 on sm_90 is the Gluon Hopper kernel. This draft keeps that kernel's structure (a
producer warp streaming K and V by TMA into a ring, two consumer warpgroups of 64 query rows on
asynchronous wgmma, the softmax of one key tile overlapped with P V of the previous one) and changes:
- Q, K and V are float8_e4m3fn; S = Q K^T and O += P V run as fp8 wgmma (k = 32 an instruction), P
  rounded to e4m3 (as FlashAttention-3 does; the row sums are those of the float32 P) and passed through
  shared memory, one tile a consumer: Triton 3.6 cannot lower the wait on an 8-bit register operand
  ("Unexpected bitwidth in WGMMAWaitGroupOp: 8"), so P V reads P from shared memory; or, in the configs
  with P_IN_REGISTERS (notes/perf.md v21), from registers, the wait after P V naming only the accumulator;
- fp8 wgmma wants both operands K-major, so V comes transposed, (B, Hkv, D, Nk) with the keys contiguous
  (the copy kernels.attention's fp8 path already makes), streamed as (D, BLOCK_N) tiles;
- the per-(batch, head) descales: q_descale * k_descale folds into the scores' scale, v_descale into
  the final 1 / l; the output is bfloat16 and the lse float32, as the portable fp8 forward's.
"""
from __future__ import annotations

import argparse
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import _hopper
from kernels._hopper import _masked, _online_softmax

HALF_M = _hopper.HALF_M
BLOCK_M = _hopper.BLOCK_M
CONSUMER_WARPS = _hopper.CONSUMER_WARPS
MAX_REGS = _hopper.MAX_REGS
_CONSUMER_WARPS = gl.constexpr(CONSUMER_WARPS)
_CONSUMER_REGS = gl.constexpr(240)
_PRODUCER_REGS = gl.constexpr(24)
_LN2 = gl.constexpr(_hopper.LN2)


@gluon.jit
def _producer(q_desc, k_desc, vt_desc, q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
              q_row, kv_row, vt_row, n_tiles, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """One warp: both consumers' Q tiles once, then K tiles (BLOCK_N, D) and V^T tiles (D, BLOCK_N)."""
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_row + q_desc.block_type.shape[0], 0], q_bar, q_smem.index(1))
    for i in range(n_tiles):
        slot = i % STAGES
        phase = (i // STAGES) & 1
        mbarrier.wait(k_empty.index(slot), phase ^ 1)  # a fresh barrier passes the wait on phase 1
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + i * BLOCK_N, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), vt_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(vt_desc, [vt_row, i * BLOCK_N], v_ready.index(slot), vt_smem.index(slot))


@gluon.jit
def _p_operand(p, p_tile, p_op_layout: gl.constexpr, P_IN_REGISTERS: gl.constexpr):
    """P V's A operand from the probabilities p: p in the dot-operand layout (P_IN_REGISTERS), or p stored into
    this consumer's shared-memory tile and fenced for the MMA."""
    if P_IN_REGISTERS:
        operand = gl.convert_layout(p.to(p_tile.dtype), p_op_layout)
    else:
        p_tile.store(p.to(p_tile.dtype))
        fence_async_shared()
        gl.thread_barrier()
        operand = p_tile
    return operand


@gluon.jit
def _consumer(q_smem, k_smem, vt_smem, p_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
              block_row, out_block_row, n_total, N_Q, N_K, qk_scale, v_scale, WHICH: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, P_IN_REGISTERS: gl.constexpr, num_warps: gl.constexpr):
    """One warpgroup, query rows [block_row + WHICH * BLOCK_M, + BLOCK_M), as kernels/_hopper.py's
    overlapped consumer, on fp8 operands. P V reads P from this consumer's shared-memory tile, or with
    P_IN_REGISTERS from registers (the wait after it then names only the accumulator as its dependency)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 32])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 32])
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    q_tile = q_smem.index(WHICH)
    p_tile = p_smem.index(WHICH)  # P in shared memory: Triton 3.6 cannot wait on an 8-bit register operand
    row0 = block_row + WHICH * BLOCK_M
    rows = row0 + gl.arange(0, BLOCK_M, layout=row_layout)
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    causal_offset = N_K - N_Q
    if CAUSAL:
        n_tiles = gl.cdiv(gl.minimum(N_K, row0 + BLOCK_M + causal_offset), BLOCK_N)
        mask_from = gl.minimum(N_K, row0 + causal_offset + 1)
    else:
        n_tiles = n_total
        mask_from = N_K

    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q_tile, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=[s])
    mbarrier.arrive(k_empty.index(0), count=1)
    s = _masked(s, 0, rows, cols, mask_from, N_K, causal_offset, BLOCK_N, CAUSAL)
    m_i = gl.max(s, axis=1) * qk_scale
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_i, 1))
    l_i = gl.sum(p, axis=1)
    p_op = _p_operand(p, p_tile, p_op_layout, P_IN_REGISTERS)
    for i in range(1, n_tiles):
        slot = i % STAGES
        prev = (i - 1) % STAGES
        mbarrier.wait(k_ready.index(slot), (i // STAGES) & 1)
        s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(prev), ((i - 1) // STAGES) & 1)
        acc = warpgroup_mma(p_op, vt_smem.index(prev).permute((1, 0)), acc, is_async=True)
        s = warpgroup_mma_wait(1, deps=[s])
        mbarrier.arrive(k_empty.index(slot), count=1)
        s = _masked(s, i, rows, cols, mask_from, N_K, causal_offset, BLOCK_N, CAUSAL)
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, qk_scale)
        acc = warpgroup_mma_wait(0, deps=[acc])  # P_{i-1} V_{i-1} is done: P's tile is free
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        p_op = _p_operand(p, p_tile, p_op_layout, P_IN_REGISTERS)
    last = (n_tiles - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
    acc = warpgroup_mma(p_op, vt_smem.index(last).permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    mbarrier.arrive(v_empty.index(last), count=1)
    for i in range(n_tiles, n_total):  # the other consumer's tiles: release them unread
        slot = i % STAGES
        phase = (i // STAGES) & 1
        mbarrier.wait(k_ready.index(slot), phase)
        mbarrier.arrive(k_empty.index(slot), count=1)
        mbarrier.wait(v_ready.index(slot), phase)
        mbarrier.arrive(v_empty.index(slot), count=1)

    o_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    o_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    inv_l = gl.convert_layout(v_scale / l_i, gl.SliceLayout(1, o_layout))
    o = (acc * gl.expand_dims(inv_l, 1)).to(Out.dtype.element_ty)
    out_row = out_block_row + WHICH * BLOCK_M
    in_rows = gl.expand_dims(row0 + o_rows < N_Q, 1) & gl.expand_dims(o_cols < HEAD_DIM, 0)
    offsets = (out_row + gl.expand_dims(o_rows, 1)).to(gl.int64) * HEAD_DIM + gl.expand_dims(o_cols, 0)
    gl.store(Out + offsets, o, mask=in_rows)
    lse = (m_i + gl.log2(l_i)) * _LN2
    gl.store(Lse + (out_row + gl.arange(0, BLOCK_M, layout=row_layout)).to(gl.int64), lse, mask=rows < N_Q)


@gluon.jit
def _hopper_fp8_fwd(q_desc, k_desc, vt_desc, Out, Lse, QDescale, KDescale, VDescale, N_Q, N_K, HEADS, GROUP,
                    qk_scale, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                    CAUSAL: gl.constexpr, P_IN_REGISTERS: gl.constexpr, num_warps: gl.constexpr):
    """A program: 2 x HALF query rows of one (batch, head), as kernels/_hopper.py's `_hopper_fwd`."""
    HALF: gl.constexpr = q_desc.block_type.shape[0]
    pid_m = gl.program_id(0)
    if CAUSAL:  # longest first
        pid_m = gl.num_programs(0) - 1 - pid_m
    off_hz = gl.program_id(1)  # batch * HEADS + head
    kv_hz = (off_hz // HEADS) * (HEADS // GROUP) + (off_hz % HEADS) // GROUP  # batch * Hkv + kv head
    block_row = pid_m * 2 * HALF
    q_row = off_hz * N_Q + block_row
    kv_row = kv_hz * N_K
    vt_row = kv_hz * HEAD_DIM
    if CAUSAL:
        n_total = gl.cdiv(gl.minimum(N_K, block_row + 2 * HALF + N_K - N_Q), BLOCK_N)
    else:
        n_total = gl.cdiv(N_K, BLOCK_N)
    # descales: the true scores are s * q_descale * k_descale, the true output o * v_descale
    scale = qk_scale * gl.load(QDescale + off_hz) * gl.load(KDescale + kv_hz)
    v_scale = gl.load(VDescale + kv_hz)

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    vt_smem = gl.allocate_shared_memory(dtype, [STAGES, HEAD_DIM, BLOCK_N], vt_desc.layout)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, BLOCK_N], dtype)
    p_smem = gl.allocate_shared_memory(dtype, [2, HALF, BLOCK_N], p_layout)  # a consumer each
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(v_empty.index(i), count=2)

    gl.warp_specialize([
        (_consumer, (q_smem, k_smem, vt_smem, p_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                     block_row, q_row, n_total, N_Q, N_K, scale, v_scale, 0, HALF, BLOCK_N, HEAD_DIM, STAGES, CAUSAL,
                     P_IN_REGISTERS, num_warps)),
        (_consumer, (q_smem, k_smem, vt_smem, p_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                     block_row, q_row, n_total, N_Q, N_K, scale, v_scale, 1, HALF, BLOCK_N, HEAD_DIM, STAGES, CAUSAL,
                     P_IN_REGISTERS, num_warps)),
        (_producer, (q_desc, k_desc, vt_desc, q_smem, k_smem, vt_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                     q_row, kv_row, vt_row, n_total, BLOCK_N, STAGES)),
    ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])


def _rows_descriptor(t: torch.Tensor, block_rows: int, block_cols: int) -> TensorDescriptor:
    """A (B, H, R, C) fp8 tensor as one (B*H*R, C) matrix in (block_rows, block_cols) tiles."""
    b, h, r, c = t.shape
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_cols], gl.float8e4nv)
    return TensorDescriptor(t, [b * h * r, c], [c, 1], [block_rows, block_cols], layout)


def kernel_args(q, k, v_t, out, lse, q_descale, k_descale, v_descale, softmax_scale: float, causal: bool,
                block_n: int = 128, stages: int = 3, p_in_registers: bool = False):
    """The arguments of one launch; v_t is V transposed, (B, Hkv, D, Nk) contiguous."""
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    args = (_rows_descriptor(q, HALF_M, head_dim), _rows_descriptor(k, block_n, head_dim),
            _rows_descriptor(v_t, head_dim, block_n), out, lse, q_descale, k_descale, v_descale, n_q, n_k, heads,
            heads // kv_heads, softmax_scale * _hopper.LOG2E)
    return args, dict(BLOCK_N=block_n, HEAD_DIM=head_dim, STAGES=stages, CAUSAL=bool(causal),
                      P_IN_REGISTERS=bool(p_in_registers), num_warps=CONSUMER_WARPS)


def hopper_fp8_forward(q, k, v, q_descale, k_descale, v_descale, softmax_scale: float, causal: bool,
                       block_n: int = 128, stages: int = 3, p_in_registers: bool = False):
    """(out (B, H, Nq, D) bfloat16, lse (B, H, Nq) float32) of fp8 q, k, v (B, H|Hkv, N, D) dense, with float32
    (B, H) / (B, Hkv) descales; Nk a multiple of 16 (V^T's rows must be 16-byte aligned for TMA)."""
    batch, heads, n_q, head_dim = q.shape
    v_t = v.transpose(2, 3).contiguous()
    out = torch.empty(q.shape, device=q.device, dtype=torch.bfloat16)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    args, constants = kernel_args(q, k, v_t, out, lse, q_descale.contiguous(), k_descale.contiguous(),
                                  v_descale.contiguous(), softmax_scale, causal, block_n, stages, p_in_registers)
    _hopper_fp8_fwd[(triton.cdiv(n_q, BLOCK_M), batch * heads)](*args, **constants, maxnreg=MAX_REGS)
    return out, lse


def compile_report(head_dim: int, causal: bool, block_n: int = 128, stages: int = 3, p_in_registers: bool = False) -> str:
    """One configuration compiled for sm_90a: shared memory, MMA counts and ptxas' report."""
    from gluon_compile import compile_sm90

    n = 4096
    x = torch.empty(1, 2, n, head_dim, dtype=torch.float8_e4m3fn)
    xt = torch.empty(1, 2, head_dim, n, dtype=torch.float8_e4m3fn)
    f32 = torch.empty(2, dtype=torch.float32)
    args, constants = kernel_args(x, x, xt, torch.empty(1, 2, n, head_dim, dtype=torch.bfloat16), f32, f32, f32,
                                  f32, head_dim ** -0.5, causal, block_n, stages, p_in_registers)
    compiled, ptx, arch, info, seconds = compile_sm90(_hopper_fp8_fwd, args, constants, MAX_REGS)
    return (f"fp8 d{head_dim} causal={causal} block_n={block_n} stages={stages} p_regs={p_in_registers}: {arch} "
            f"shared={compiled.metadata.shared} wgmma={ptx.count('wgmma.mma_async')} "
            f"e4m3={ptx.count('e4m3')} ({seconds:.1f} s) | {info}")


# (block_n, stages, P in registers): P through shared memory (measured in v15), and P kept in registers
# (notes/perf.md v21; 256-key tiles spill there)
CONFIGS = [(128, 3, False), (128, 2, False), (256, 2, False), (128, 2, True), (128, 3, True), (128, 4, True)]


def check() -> None:
    """On an sm_90 GPU: out and lse against the float64 attention of the dequantised inputs, beside the
    engine's portable fp8 forward's error on the same inputs (the error rule of tests/test_fp8.py is
    relative to it)."""
    from kernels import attention_reference, flash_attention

    torch.manual_seed(0)
    for batch, heads, kv_heads, n_q, n_k, head_dim in [(2, 4, 4, 1024, 1024, 128), (1, 8, 2, 1000, 1008, 128),
                                                      (2, 3, 1, 129, 384, 64), (1, 4, 4, 2048, 4096, 64)]:
        for causal in (False, True):
            q = torch.randn(batch, heads, n_q, head_dim, device="cuda")
            k, v = (torch.randn(batch, kv_heads, n_k, head_dim, device="cuda") for _ in range(2))
            qd = torch.rand(batch, heads, device="cuda") + 0.5
            kd, vd = (torch.rand(batch, kv_heads, device="cuda") + 0.5 for _ in range(2))
            q8, k8, v8 = ((t / d[..., None, None]).to(torch.float8_e4m3fn) for t, d in ((q, qd), (k, kd), (v, vd)))
            deq = [t8.double() * d[..., None, None].double() for t8, d in ((q8, qd), (k8, kd), (v8, vd))]
            ref, ref_lse = attention_reference(*deq, causal=causal, softmax_scale=head_dim ** -0.5)
            portable, portable_lse = flash_attention(q8, k8, v8, causal=causal, return_lse=True, q_descale=qd,
                                                     k_descale=kd, v_descale=vd)
            for block_n, stages, p_regs in CONFIGS:
                out, lse = hopper_fp8_forward(q8, k8, v8, qd, kd, vd, head_dim ** -0.5, causal, block_n, stages,
                                              p_regs)
                rel = ((out.double() - ref).norm() / ref.norm()).item()
                rel_portable = ((portable.double() - ref).norm() / ref.norm()).item()
                lse_err = (lse.double() - ref_lse).abs().max().item()
                ok = rel <= 1.5 * rel_portable + 1e-3 and lse_err <= 2 * (portable_lse.double() - ref_lse).abs().max().item() + 1e-3
                print(f"{'ok' if ok else 'FAIL'} {batch}x{heads}/{kv_heads}x{n_q}x{n_k} d{head_dim} causal={causal} "
                      f"block_n={block_n} stages={stages} p_regs={p_regs}: rel rms {rel:.4f} (portable fp8 {rel_portable:.4f}), "
                      f"lse max err {lse_err:.2e}", flush=True)


def bench(head_dims=(128, 64)) -> None:
    """On an sm_90 GPU: forward TFLOP/s of each config beside the engine's portable fp8 forward and its
    default fp16 forward (the Hopper kernel at d128), the paper's shapes, do_bench medians, one process."""
    from triton.testing import do_bench

    from kernels import flash_attention

    print("head_dim,causal,seqlen," + ",".join(f"gluon_fp8_n{n}s{s}{'r' if r else ''}" for n, s, r in CONFIGS)
          + ",portable_fp8,default_fp16,best_over_fp16", flush=True)
    for head_dim in head_dims:
        for causal in (False, True):
            for n in (2048, 4096, 8192, 16384):
                shape = (16384 // n, 2048 // head_dim, n, head_dim)
                q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16) for _ in range(3))
                q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
                ones = torch.ones(shape[:2], device="cuda")
                flop = 4 * shape[0] * shape[1] * n * n * head_dim / (2 if causal else 1)
                times = [do_bench(lambda: hopper_fp8_forward(q8, k8, v8, ones, ones, ones, head_dim ** -0.5, causal,
                                                             bn, st, r), warmup=10, rep=50, return_mode="median")
                         for bn, st, r in CONFIGS]
                portable = do_bench(lambda: flash_attention(q8, k8, v8, causal=causal), warmup=10, rep=50,
                                    return_mode="median")
                fp16 = do_bench(lambda: flash_attention(q, k, v, causal=causal), warmup=10, rep=50,
                                return_mode="median")
                print(f"{head_dim},{int(causal)},{n}," + ",".join(f"{flop / t / 1e9:.0f}" for t in times)
                      + f",{flop / portable / 1e9:.0f},{flop / fp16 / 1e9:.0f},{fp16 / min(times):.2f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="run on an sm_90 GPU against the reference")
    parser.add_argument("--bench", action="store_true", help="time it (sm_90 GPU)")
    parser.add_argument("--head-dims", default="128,64", help="comma-separated head dims to time (default: 128,64)")
    parsed = parser.parse_args()
    if parsed.check:
        check()
    if parsed.bench:
        bench(tuple(int(d) for d in parsed.head_dims.split(",")))
    if parsed.check or parsed.bench:
        return 0
    for head_dim in (128, 64):
        for causal in (False, True):
            for block_n, stages, p_regs in CONFIGS:
                try:
                    print(compile_report(head_dim, causal, block_n, stages, p_regs), flush=True)
                except Exception as error:  # noqa: BLE001 - report and go on (shared memory, layouts)
                    print(f"fp8 d{head_dim} causal={causal} block_n={block_n} stages={stages} p_regs={p_regs}: "
                          f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
