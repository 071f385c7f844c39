"""Draft: the fp8 (e4m3) forward in Gluon for sm_90, at head dims 64 and 128.

The engine's fp8 forward is the portable kernel (`kernels/_forward.py`, FP8=True): Triton's pipeliner
and `tl.dot` at e4m3. On the H200 it runs at 1.03-1.11x our fp16 forward (the `fp8` ablation), where the
fp8 tensor cores do twice the fp16 rate. This draft is the Hopper forward (`kernels/_hopper.py`: a
producer warp streaming K and V by TMA into a ring of mbarrier-guarded slots, two consumer warpgroups
running asynchronous wgmma, the softmax of tile j+1 overlapped with P_j V_j) with e4m3 operands:

- Q and K tiles are e4m3 in shared memory; S = Q K^T is an fp8 wgmma (K = head dim, contiguous in both);
- V goes in as V^T, (B, Hkv, D, Nk) with the keys contiguous (`kernels._forward.transposed_keys`, one
  copy per call, inside the timed call as in the engine): fp8 wgmma wants its B operand K-major, and the
  K of P V is the key index. A slot holds a D x BLOCK_N tile of V^T; the MMA reads its transpose;
- P is cast to e4m3 in registers (the A operand from registers, 4 bytes of K per thread), the row sums
  are those of the float32 P, as FlashAttention-3 and the portable fp8 kernel do;
- the descales (FlashAttention-3's: true value = fp8 value x descale, q per (batch, head), k and v per
  (batch, kv head)) scale the scores' exponent (qk_scale x q_descale x k_descale) and the output
  (v_descale / l); the output is bfloat16, the log-sum-exp float32 natural log, as the engine's.

Head dims 64 and 128 only: V^T's rows are the head dim, so a tile of 128 rows at head dim 96 would read
the next head's rows (the fp16 kernel pads 96 to 128 along columns, which TMA fills with zeros).

    PYTHONPATH=. python3 notes/round21/gluon_fwd_fp8_draft.py            # compile for sm_90a (no GPU)
    PYTHONPATH=. python3 notes/round21/gluon_fwd_fp8_draft.py --check    # on the H200: against the reference
    PYTHONPATH=. python3 notes/round21/gluon_fwd_fp8_draft.py --bench    # on the H200: against the engine
"""
from __future__ import annotations

import math
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import _hopper
from kernels._forward import transposed_keys
from kernels._hopper import _masked, _online_softmax

HEAD_DIMS = (64, 128)
E4M3 = torch.float8_e4m3fn
_LN2 = gl.constexpr(_hopper.LN2)
_CONSUMER_WARPS = gl.constexpr(_hopper.CONSUMER_WARPS)
_CONSUMER_REGS = gl.constexpr(240)
_PRODUCER_REGS = gl.constexpr(24)
# (BLOCK_N, STAGES) variants per head dim: an e4m3 K or V^T tile of 128 keys is 16 KB at head dim 128, so the
# ring can be deeper than the fp16 kernel's two slots. (256-key tiles at head dim 64 spill about 2 KB.)
VARIANTS = {64: [(128, 2), (128, 3), (128, 4)], 128: [(128, 2), (128, 3), (128, 4)]}


@gluon.jit
def _producer(q_desc, k_desc, vt_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
              q_row, kv_row, vt_row, n_tiles, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """One warp: both consumers' Q tiles once, then K tiles and V^T tiles into the ring."""
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_row + q_desc.block_type.shape[0], 0], q_bar, q_smem.index(1))
    for i in range(n_tiles):
        slot = i % STAGES
        phase = (i // STAGES) & 1
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + i * BLOCK_N, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), vt_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(vt_desc, [vt_row, i * BLOCK_N], v_ready.index(slot), v_smem.index(slot))


@gluon.jit
def _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
              block_row, out_block_row, n_total, N_Q, N_K, qk_scale, v_scale, WHICH: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, num_warps: gl.constexpr):
    """One warpgroup, query rows [block_row + WHICH * BLOCK_M, + BLOCK_M), as kernels._hopper._consumer,
    with e4m3 operands: P cast to e4m3 for P V, V^T's slots read transposed, O scaled by v_scale / l."""
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 32])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 32])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    q_tile = q_smem.index(WHICH)
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
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
    mbarrier.wait(q_bar, 0)

    if OVERLAP:
        mbarrier.wait(k_ready.index(0), 0)
        s = warpgroup_mma(q_tile, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s])
        mbarrier.arrive(k_empty.index(0), count=1)
        s = _masked(s, 0, rows, cols, mask_from, N_K, causal_offset, BLOCK_N, CAUSAL)
        m_i = gl.max(s, axis=1) * qk_scale
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_i, 1))
        l_i = gl.sum(p, axis=1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        for i in range(1, n_tiles):
            slot = i % STAGES
            prev = (i - 1) % STAGES
            mbarrier.wait(k_ready.index(slot), (i // STAGES) & 1)
            s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(prev), ((i - 1) // STAGES) & 1)
            acc = warpgroup_mma(p_op, v_smem.index(prev).permute((1, 0)), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=[s])
            mbarrier.arrive(k_empty.index(slot), count=1)
            s = _masked(s, i, rows, cols, mask_from, N_K, causal_offset, BLOCK_N, CAUSAL)
            p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, qk_scale)
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(v_empty.index(prev), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
        acc = warpgroup_mma(p_op, v_smem.index(last).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(v_empty.index(last), count=1)
    else:
        for i in range(n_tiles):
            slot = i % STAGES
            phase = (i // STAGES) & 1
            mbarrier.wait(k_ready.index(slot), phase)
            s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=[s])
            mbarrier.arrive(k_empty.index(slot), count=1)
            s = _masked(s, i, rows, cols, mask_from, N_K, causal_offset, BLOCK_N, CAUSAL)
            p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, qk_scale)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(slot), phase)
            acc = warpgroup_mma(p_op, v_smem.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(v_empty.index(slot), count=1)
    for i in range(n_tiles, n_total):  # the other consumer's tiles: release them unread
        slot = i % STAGES
        phase = (i // STAGES) & 1
        mbarrier.wait(k_ready.index(slot), phase)
        mbarrier.arrive(k_empty.index(slot), count=1)
        mbarrier.wait(v_ready.index(slot), phase)
        mbarrier.arrive(v_empty.index(slot), count=1)

    o_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    o_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    scale_l = gl.convert_layout(v_scale / l_i, gl.SliceLayout(1, o_layout))
    o = (acc * gl.expand_dims(scale_l, 1)).to(Out.dtype.element_ty)
    out_row = out_block_row + WHICH * BLOCK_M
    in_rows = gl.expand_dims(row0 + o_rows < N_Q, 1) & gl.expand_dims(o_cols < HEAD_DIM, 0)
    offsets = (out_row + gl.expand_dims(o_rows, 1)).to(gl.int64) * HEAD_DIM + gl.expand_dims(o_cols, 0)
    gl.store(Out + offsets, o, mask=in_rows)
    lse = (m_i + gl.log2(l_i)) * _LN2
    gl.store(Lse + (out_row + gl.arange(0, BLOCK_M, layout=row_layout)).to(gl.int64), lse, mask=rows < N_Q)


@gluon.jit
def _fp8_fwd(q_desc, k_desc, vt_desc, Out, Lse, QDescale, KDescale, VDescale, N_Q, N_K, HEADS, GROUP, qk_scale,
             BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
             OVERLAP: gl.constexpr, num_warps: gl.constexpr):
    """A program: 2 x HALF query rows of one (batch, head). kv_head is the flat (batch, kv head) index:
    K's rows start at kv_head * N_K, V^T's at kv_head * HEAD_DIM."""
    HALF: gl.constexpr = q_desc.block_type.shape[0]
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    off_hz = gl.program_id(1)
    kv_head = (off_hz // HEADS) * (HEADS // GROUP) + (off_hz % HEADS) // GROUP
    block_row = pid_m * 2 * HALF
    q_row = off_hz * N_Q + block_row
    kv_row = kv_head * N_K
    vt_row = kv_head * HEAD_DIM
    if CAUSAL:
        n_total = gl.cdiv(gl.minimum(N_K, block_row + 2 * HALF + N_K - N_Q), BLOCK_N)
    else:
        n_total = gl.cdiv(N_K, BLOCK_N)
    scale = qk_scale * gl.load(QDescale + off_hz) * gl.load(KDescale + kv_head)
    v_scale = gl.load(VDescale + kv_head)

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, HEAD_DIM, BLOCK_N], vt_desc.layout)
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
        (_consumer, (q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                     block_row, q_row, n_total, N_Q, N_K, scale, v_scale, 0, HALF, BLOCK_N, HEAD_DIM, STAGES,
                     CAUSAL, OVERLAP, num_warps)),
        (_consumer, (q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                     block_row, q_row, n_total, N_Q, N_K, scale, v_scale, 1, HALF, BLOCK_N, HEAD_DIM, STAGES,
                     CAUSAL, OVERLAP, num_warps)),
        (_producer, (q_desc, k_desc, vt_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                     q_row, kv_row, vt_row, n_total, BLOCK_N, STAGES)),
    ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])


def _layout(block: list[int]):
    return gl.NVMMASharedLayout.get_default_for(block, gl.float8e4nv)


def descriptors(q8, k8, vt, block_n: int):
    """TMA descriptors: q (B*H*Nq, D) in 64-row boxes, k (B*Hkv*Nk, D) in block_n-row boxes, V^T
    (B*Hkv*D, Nk) (its rows padded in memory to a multiple of 16 keys) in D x block_n boxes."""
    b, h, n_q, d = q8.shape
    hkv, n_k = k8.shape[1], k8.shape[2]
    q_desc = TensorDescriptor(q8, [b * h * n_q, d], [d, 1], [_hopper.HALF_M, d], _layout([_hopper.HALF_M, d]))
    k_desc = TensorDescriptor(k8, [b * hkv * n_k, d], [d, 1], [block_n, d], _layout([block_n, d]))
    vt_desc = TensorDescriptor(vt, [b * hkv * d, n_k], [vt.stride(2), 1], [d, block_n], _layout([d, block_n]))
    return q_desc, k_desc, vt_desc


def fp8_hopper_forward(q8, k8, v8, q_descale, k_descale, v_descale, softmax_scale: float, causal: bool,
                       block_n: int = 128, stages: int = 3, overlap: bool = True):
    """(out (B, H, Nq, D) bfloat16, lse (B, H, Nq) float32) of e4m3 q (B, H, Nq, D), k, v (B, Hkv, Nk, D),
    each contiguous; descales float32 (B, H) and (B, Hkv). Causal needs Nq <= Nk (as the fp16 kernel)."""
    batch, heads, n_q, head_dim = q8.shape
    kv_heads, n_k = k8.shape[1], k8.shape[2]
    assert head_dim in HEAD_DIMS and q8.dtype == k8.dtype == v8.dtype == E4M3
    assert not causal or n_q <= n_k
    vt = transposed_keys(v8)
    out = torch.empty((batch, heads, n_q, head_dim), device=q8.device, dtype=torch.bfloat16)
    lse = torch.empty((batch, heads, n_q), device=q8.device, dtype=torch.float32)
    grid = (triton.cdiv(n_q, _hopper.BLOCK_M), batch * heads)
    _fp8_fwd[grid](*descriptors(q8, k8, vt, block_n), out, lse, q_descale, k_descale, v_descale, n_q, n_k, heads,
                   heads // kv_heads, softmax_scale * _hopper.LOG2E, BLOCK_N=block_n, HEAD_DIM=head_dim,
                   STAGES=stages, CAUSAL=bool(causal), OVERLAP=bool(overlap), num_warps=_hopper.CONSUMER_WARPS,
                   maxnreg=_hopper.MAX_REGS)
    return out, lse


def compile_report(head_dim: int, causal: bool, block_n: int, stages: int, overlap: bool = True) -> str:
    """Compile one configuration for sm_90a on a machine without a GPU; a line with ptxas' report."""
    sys.path.insert(0, "tests")
    from hopper_compile import compile_sm90

    n = 4096
    x = torch.empty(1, 2, n, head_dim, dtype=E4M3)
    vt = torch.empty(1, 2, head_dim, n, dtype=E4M3)
    f32 = torch.empty(2, dtype=torch.float32)
    args = (*descriptors(x, x, vt, block_n), torch.empty(1, dtype=torch.bfloat16), f32, f32, f32, f32, n, n, 2, 1,
            head_dim ** -0.5 * _hopper.LOG2E)
    constants = dict(BLOCK_N=block_n, HEAD_DIM=head_dim, STAGES=stages, CAUSAL=causal, OVERLAP=overlap,
                     num_warps=_hopper.CONSUMER_WARPS)
    compiled, ptx, arch, info, seconds = compile_sm90(_fp8_fwd, args, constants, _hopper.MAX_REGS)
    return (f"fp8 d{head_dim} causal={causal} block_n={block_n} stages={stages} overlap={overlap}: {arch} "
            f"shared={compiled.metadata.shared} wgmma={ptx.count('wgmma.mma_async')} "
            f"e4m3_wgmma={ptx.count('e4m3.e4m3')} ({seconds:.1f} s) | {info}")


# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim): odd lengths, Nq < Nk and Nq > Nk (full only), GQA and
# MQA, a single query, lengths below one tile.
SHAPES = [(2, 4, 2, 1000, 1000, 128), (1, 3, 1, 511, 1537, 64), (1, 2, 2, 300, 300, 128), (2, 8, 2, 2048, 2048, 64),
          (1, 4, 4, 129, 4000, 128), (1, 2, 1, 1, 300, 128), (1, 2, 2, 700, 45, 64), (1, 2, 2, 16, 16, 128)]


def check() -> int:
    """On an sm_90 GPU, each variant and both masks against test_fp8's rule: relative RMS error <= 4 % and <= twice
    that of the float64 reference with P rounded to e4m3 (plus bf16 rounding), lse within the accumulation bound,
    -inf exactly where a row sees no key. One line per case ("ok" or "FAIL"); returns the number failed."""
    sys.path.insert(0, "tests")
    from test_fp8 import BF16_RMS, dequantise, quantise, rel_rms, rounded_p_reference

    from kernels import attention_reference, flash_attention

    failed = 0
    for shape in SHAPES:
        batch, heads, kv_heads, n_q, n_k, head_dim = shape
        torch.manual_seed(hash(shape) % 2**31)
        (q8, qd), (k8, kd), (v8, vd) = (quantise(torch.randn(batch, h, n, head_dim, device="cuda"))
                                        for h, n in ((heads, n_q), (kv_heads, n_k), (kv_heads, n_k)))
        exact = [dequantise(q8, qd), dequantise(k8, kd), dequantise(v8, vd)]
        scale = 1.0 / math.sqrt(head_dim)
        for causal in (False, True):
            if causal and n_q > n_k:
                continue
            ref_out, ref_lse = attention_reference(*exact, causal=causal)
            err_rounded = rel_rms(rounded_p_reference(*exact, causal, scale), ref_out)
            engine = rel_rms(flash_attention(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd),
                             ref_out)
            abs_k = exact[1].abs().repeat_interleave(heads // kv_heads, dim=1)
            bound = scale * (exact[0].abs() @ abs_k.transpose(-1, -2)).amax(dim=-1) * 2.0 ** -11 + 1e-5
            for block_n, stages in VARIANTS[head_dim]:
                for overlap in (True, False):
                    name = f"{shape} causal={causal} block_n={block_n} stages={stages} overlap={overlap}"
                    try:
                        out, lse = fp8_hopper_forward(q8, k8, v8, qd, kd, vd, scale, causal, block_n, stages, overlap)
                        torch.cuda.synchronize()
                        assert not torch.isnan(out).any(), "NaN in out"
                        err = rel_rms(out, ref_out)
                        assert err <= 0.04, f"relative RMS error {err:.4f} over 4 %"
                        assert err <= 2 * err_rounded + BF16_RMS, f"error {err:.4f} vs rounded-P {err_rounded:.4f}"
                        finite = torch.isfinite(ref_lse)
                        assert torch.equal(torch.isfinite(lse), finite), "lse: -inf where no key is seen"
                        excess = ((lse.double() - ref_lse).abs() - bound)[finite]
                        assert excess.numel() == 0 or excess.max().item() <= 0, f"lse off by {excess.max().item():.2e}"
                        print(f"ok {name}: err {err:.4f} (rounded-P reference {err_rounded:.4f}, engine {engine:.4f})",
                              flush=True)
                    except Exception as error:  # noqa: BLE001 - report every case and go on
                        failed += 1
                        print(f"FAIL {name}: {type(error).__name__}: {str(error)[:400]}", flush=True)
    print(f"check: {failed} failed", flush=True)
    return failed


def bench() -> None:
    """On an sm_90 GPU: forward TFLOP/s of each draft variant (the V^T copy inside the call), the engine's fp8
    forward (flash_attention with e4m3 inputs), the engine's fp16 forward and cuDNN's fp16, the `fp8` ablation's
    shapes (16k tokens, model width 2048), do_bench medians in one process."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from kernels import flash_attention

    for head_dim in HEAD_DIMS:
        names = [f"draft_n{n}s{s}" for n, s in VARIANTS[head_dim]]
        print("head_dim,causal,seqlen," + ",".join(names) + ",engine_fp8,engine_fp16,cudnn_fp16", flush=True)
        for causal in (False, True):
            for n in (1024, 2048, 4096, 8192, 16384):
                shape = (16384 // n, 2048 // head_dim, n, head_dim)
                x16 = [torch.randn(*shape, device="cuda", dtype=torch.float16) for _ in range(3)]
                x8 = [t.to(E4M3) for t in x16]
                ones = torch.ones(shape[0], shape[1], device="cuda")
                flop = 4 * shape[0] * shape[1] * n * n * head_dim / (2 if causal else 1)
                scale = head_dim ** -0.5
                times = [do_bench(lambda: fp8_hopper_forward(*x8, ones, ones, ones, scale, causal, bn, st), warmup=20,
                                  rep=80, return_mode="median") for bn, st in VARIANTS[head_dim]]
                times.append(do_bench(lambda: flash_attention(*x8, causal=causal), warmup=20, rep=80,
                                      return_mode="median"))
                times.append(do_bench(lambda: flash_attention(*x16, causal=causal), warmup=20, rep=80,
                                      return_mode="median"))
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    times.append(do_bench(lambda: F.scaled_dot_product_attention(*x16, is_causal=causal), warmup=20,
                                          rep=80, return_mode="median"))
                print(f"{head_dim},{int(causal)},{n}," + ",".join(f"{flop / t / 1e9:.0f}" for t in times), flush=True)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="run on an sm_90 GPU against the reference")
    parser.add_argument("--bench", action="store_true", help="time it (sm_90 GPU)")
    parsed = parser.parse_args()
    failed = check() if parsed.check else 0
    if parsed.bench:
        bench()
    if parsed.check or parsed.bench:
        sys.exit(1 if failed else 0)
    for head_dim in HEAD_DIMS:
        for causal in (False, True):
            for block_n, stages in VARIANTS[head_dim]:
                try:
                    print(compile_report(head_dim, causal, block_n, stages), flush=True)
                except Exception as error:  # noqa: BLE001 - report and go on (shared memory, layouts)
                    print(f"fp8 d{head_dim} causal={causal} block_n={block_n} stages={stages}: "
                          f"{type(error).__name__}: {str(error)[:600]}", flush=True)


if __name__ == "__main__":
    main()
