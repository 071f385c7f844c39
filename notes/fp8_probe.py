"""Probe: an fp8 (e4m3) attention forward in Triton on the H200, its error beside fp16/bf16, its speed.

    python3 notes/fp8_probe.py notes/fp8_probe.csv        (a CUDA GPU with sm_90; about 90 s)
    python3 notes/fp8_probe.py --dry-run                  (CPU: inputs, quantisation, references, exit)
    TRITON_INTERPRET=1 python3 notes/fp8_probe.py --interpret-check   (CPU: the kernel on tiny shapes)

A standalone prototype, not part of the engine: a simplified copy of the forward kernel of
kernels/_forward.py (same tiling, online softmax in the log2 domain, causal tiles split into an
unmasked run and a masked band; no varlen, window, softcap, ALiBi or dropout) with fp8 operands:

  q, k, v      torch.float8_e4m3fn, (B, H, N, D); q_descale, k_descale, v_descale float32 (B, H)
               (FlashAttention-3's convention: the true value is fp8_value * descale).
  S = q k^T    fp8 x fp8 -> fp32 (wgmma), scaled by softmax_scale * q_descale * k_descale * log2(e)
  P            exp2 of the shifted scores, in [0, 1], cast to e4m3 for P @ V (as FA3 does); the
               row sums l are taken from the fp32 P before the cast (as FA3 does)
  O            fp32 accumulator, times v_descale / l at the end, written as bf16, plus the lse.

fp8 wgmma on Hopper wants both operands K-major; for P @ V that means V with the key dimension
contiguous. Variants (column `variant`):
  a           V as given, (B, H, N, D) contiguous, loaded as a (BLOCK_N, D) tile (Triton must
              change its layout before the wgmma)
  b           V pre-transposed on the host to (B, H, D, N) contiguous, loaded as a (D, BLOCK_N)
              tile and tl.trans'd into the dot (Triton's fused-attention tutorial does this for
              fp8); the transpose is timed on its own (provider `host_v_transpose`)
  b_precise   as b, with max_num_imprecise_acc=0 on both dots: Triton then adds each wgmma's
              partial result into the fp32 accumulator with full-precision adds. Triton's default
              on sm_90 is 2**30 (the tensor core's reduced-precision accumulation throughout,
              cuBLAS's "fast accumulation"); this variant shows what that costs in error and time.
The same kernel runs with fp16 q, k, v (P cast to fp16) when given fp16 tensors: that is how its
indexing and masking are checked on the CPU under TRITON_INTERPRET=1 (--interpret-check), since
Triton 3.6's interpreter converts float32 -> float8e4nv wrongly for some values.

Shapes: head dim 64 and 128, full and causal, seqlen 4096 and 16384, batch = 16384 // seqlen,
heads = 2048 // head_dim. Inputs: randn in float32, quantised per (batch, head) with
descale = amax / 448 (e4m3's largest finite value). Errors are measured on batch 0, heads 0-1
against float64 references computed on the GPU (kernels.reference.attention_reference):
  err_vs=dequantised  reference from the provider's own inputs (fp8 values * descale, or the
                      fp16 / bf16-rounded inputs): the kernel's own error
  err_vs=original     reference from the float32 inputs: the total error, quantisation included
Speed: triton.testing.do_bench median (each fn called once before, so no compile is timed).

Budget: the whole run is meant to finish in ~90 s (--budget, default 85 s of work after start-up);
once it is spent, the remaining cases are written as rows with note 'skipped: time budget'. A
watchdog (faulthandler) ends the process if it is still running 60 s after the budget, so a hung
kernel cannot stall the job; rows already written stay in the CSV. Every case catches its own
exception, prints the traceback and carries on (a row with the error in `note`).

A development run on an H200 (torch 2.11, triton 3.6.0) of the previous revision is in
notes/fp8_probe_trial_h200.csv: the same measurements, but its compile prewarm used one head and
so missed Triton's argument specialisation; the measured calls compiled again, the run took 92 s
and the last shape (d128, causal, 16k) was skipped by the budget. Fixed here, not re-run.

CSV columns (one row per measurement, written and flushed as it is measured):
  kind            error | speed | info (info: device, versions, compile times)
  provider        fp8_triton | ours_fp16 | sdpa_flash_fp16 | sdpa_flash_bf16 | sdpa_cudnn_fp16 |
                  host_v_transpose | probe
  variant         fp8: a | b | b_precise (see above); others empty
  head_dim, causal, seqlen, batch, heads        the shape (causal 0/1)
  block_m, block_n, num_warps, num_stages       the fp8 kernel's tile config (empty for others)
  ms              do_bench median, milliseconds (speed rows)
  tflops          4 * B * H * N^2 * D / time (halved when causal), in TFLOP/s
  speedup_vs_ours_fp16   ours_fp16 ms / this row's ms (same shape)
  max_abs_err     max |O - O_ref| over the checked heads (speed rows of fp8: vs the dequantised
                  reference, a check that every config computes the same thing)
  rel_rms_err     ||O - O_ref||_2 / ||O_ref||_2 over the checked heads
  err_vs          dequantised | original (see above)
  note            registers / spills / shared memory of the compiled fp8 kernel, lse error,
                  exceptions, skips
"""

from __future__ import annotations

import argparse
import csv
import faulthandler
import math
import os
import sys
import time
import traceback

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LOG2E = 1.4426950408889634
FP8_MAX = 448.0  # largest finite float8_e4m3fn

# Tile configs per head dim (BLOCK_M, BLOCK_N, num_warps, num_stages); the first is the one whose
# errors are reported and the only one b_precise runs with.
CONFIGS = {
    64: [(128, 64, 4, 3), (128, 128, 8, 3), (128, 128, 4, 3), (128, 64, 8, 4)],
    128: [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2)],
}
VARIANTS = ("a", "b", "b_precise")

COLUMNS = ["kind", "provider", "variant", "head_dim", "causal", "seqlen", "batch", "heads", "block_m", "block_n",
           "num_warps", "num_stages", "ms", "tflops", "speedup_vs_ours_fp16", "max_abs_err", "rel_rms_err", "err_vs",
           "note"]


# --------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------

@triton.jit
def _fp8_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, start, end, qk_scale, N_Q, N_K,
                   stride_kn, stride_vn,
                   BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, V_TRANS: tl.constexpr,
                   PRECISE: tl.constexpr):
    """Online softmax over key tiles [start, end); pointers are positioned at key `start`.
    MASK: the tiles may hold keys past N_K or (CAUSAL) above the diagonal."""
    for start_n in tl.range(start, end, BLOCK_N):
        cols = start_n + offs_n
        if MASK:
            k = tl.load(k_ptrs, mask=cols[:, None] < N_K, other=0.0)
        else:
            k = tl.load(k_ptrs)
        if PRECISE:
            qk = tl.dot(q, tl.trans(k), max_num_imprecise_acc=0)
        else:
            qk = tl.dot(q, tl.trans(k))
        if MASK:
            visible = cols[None, :] < N_K
            if CAUSAL:  # bottom-right aligned: query i sees key j <= i + N_K - N_Q
                visible = visible & (cols[None, :] <= offs_m[:, None] + (N_K - N_Q))
            qk = tl.where(visible, qk * qk_scale, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        if V_TRANS:  # V^T in memory: a (D, BLOCK_N) tile with the keys contiguous, K-major after the trans
            if MASK:
                vt = tl.load(v_ptrs, mask=cols[None, :] < N_K, other=0.0)
            else:
                vt = tl.load(v_ptrs)
            v = tl.trans(vt)
        else:
            if MASK:
                v = tl.load(v_ptrs, mask=cols[:, None] < N_K, other=0.0)
            else:
                v = tl.load(v_ptrs)
        acc = acc * alpha[:, None]
        if PRECISE:
            acc = tl.dot(p.to(v.dtype), v, acc, max_num_imprecise_acc=0)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def _fp8_attn_fwd(Q, K, V, Out, Lse, QDescale, KDescale, VDescale,
                  stride_qz, stride_qh, stride_qm, stride_qd,
                  stride_kz, stride_kh, stride_kn, stride_kd,
                  stride_vz, stride_vh, stride_vn, stride_vd,
                  stride_oz, stride_oh, stride_om, stride_od,
                  stride_dz, stride_dh,
                  H, N_Q, N_K, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, V_TRANS: tl.constexpr, PRECISE: tl.constexpr):
    """One program per (query block, batch x head). V's strides are given in (n, d) order
    whatever its memory layout; V_TRANS says the keys are the contiguous dimension."""
    num_m_blocks = tl.cdiv(N_Q, BLOCK_M)
    pid = tl.program_id(0)
    off_hz = pid // num_m_blocks
    start_m = pid % num_m_blocks
    if CAUSAL:  # the longest rows first, so the last wave is short
        start_m = num_m_blocks - 1 - start_m
    off_z = tl.cast(off_hz // H, tl.int64)
    off_h = tl.cast(off_hz % H, tl.int64)
    row0 = tl.cast(start_m * BLOCK_M, tl.int64)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    q_descale = tl.load(QDescale + off_z * stride_dz + off_h * stride_dh)
    k_descale = tl.load(KDescale + off_z * stride_dz + off_h * stride_dh)
    v_descale = tl.load(VDescale + off_z * stride_dz + off_h * stride_dh)
    qk_scale = qk_scale * q_descale * k_descale

    q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh + row0 * stride_qm
              + tl.arange(0, BLOCK_M)[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    k_ptrs = K + off_z * stride_kz + off_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
    if V_TRANS:
        v_ptrs = V + off_z * stride_vz + off_h * stride_vh + offs_d[:, None] * stride_vd + offs_n[None, :] * stride_vn
    else:
        v_ptrs = V + off_z * stride_vz + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if CAUSAL:  # as _causal_key_bounds with SKIP_MASKED
        diag = start_m * BLOCK_M + N_K - N_Q + 1  # keys < diag are visible to the block's first row
        mid = tl.maximum(diag, 0) // BLOCK_N * BLOCK_N
        hi = tl.minimum((start_m + 1) * BLOCK_M + N_K - N_Q, N_K)
        hi = tl.maximum(hi, mid)
    else:
        mid = N_K // BLOCK_N * BLOCK_N
        hi = N_K
    acc, l_i, m_i = _fp8_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, 0, mid, qk_scale, N_Q, N_K,
                                   stride_kn, stride_vn, BLOCK_N, False, CAUSAL, V_TRANS, PRECISE)
    mid64 = tl.cast(mid, tl.int64)
    acc, l_i, m_i = _fp8_fwd_inner(acc, l_i, m_i, q, k_ptrs + mid64 * stride_kn, v_ptrs + mid64 * stride_vn,
                                   offs_m, offs_n, mid, hi, qk_scale, N_Q, N_K,
                                   stride_kn, stride_vn, BLOCK_N, True, CAUSAL, V_TRANS, PRECISE)

    acc = acc * (v_descale / l_i)[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # log2 domain -> natural log
    if CAUSAL:  # rows that see no key (N_Q > N_K): output 0, lse -inf
        sees_a_key = offs_m + N_K - N_Q >= 0
        acc = tl.where(sees_a_key[:, None], acc, 0.0)
        lse = tl.where(sees_a_key, lse, float("-inf"))
    o_ptrs = (Out + off_z * stride_oz + off_h * stride_oh + row0 * stride_om
              + tl.arange(0, BLOCK_M)[:, None] * stride_om + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)
    tl.store(Lse + off_hz.to(tl.int64) * N_Q + offs_m, lse, mask=offs_m < N_Q)


def fp8_attention(q, k, v, q_descale, k_descale, v_descale, causal, config, v_trans, precise=False,
                  out_dtype=torch.bfloat16, softmax_scale=None):
    """Launch the probe kernel. q, k (B, H, N, D); v (B, H, N, D), or (B, H, D, N) when v_trans;
    descales (B, H) float32. Returns (out (B, H, Nq, D) out_dtype, lse (B, H, Nq) float32, compiled)."""
    batch, heads, n_q, head_dim = q.shape
    n_k = k.shape[2]
    assert head_dim in (16, 32, 64, 128, 256), "the probe does not pad the head dim"
    block_m, block_n, num_warps, num_stages = config
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    out = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=out_dtype)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    if v_trans:  # (z, h, d, n) in memory: pass the strides in (n, d) order
        v_strides = (v.stride(0), v.stride(1), v.stride(3), v.stride(2))
    else:
        v_strides = tuple(v.stride())
    assert q_descale.stride() == k_descale.stride() == v_descale.stride()
    grid = (triton.cdiv(n_q, block_m) * batch * heads,)
    compiled = _fp8_attn_fwd[grid](
        q, k, v, out, lse, q_descale, k_descale, v_descale,
        *q.stride(), *k.stride(), *v_strides, *out.stride(), *q_descale.stride(),
        heads, n_q, n_k, scale * LOG2E,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal, V_TRANS=v_trans, PRECISE=precise,
        num_warps=num_warps, num_stages=num_stages)
    return out, lse, compiled


# --------------------------------------------------------------------------------------------
# Inputs, references, errors
# --------------------------------------------------------------------------------------------

def quantise(x: torch.Tensor):
    """Per-(batch, head) e4m3 quantisation of a (B, H, N, D) float tensor: (x8, descale (B, H) float32)
    with x ~= x8 * descale, descale = amax / 448."""
    amax = x.abs().amax(dim=(2, 3)).float().clamp_min(1e-12)
    descale = (amax / FP8_MAX).contiguous()
    x8 = (x.float() / descale[:, :, None, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return x8, descale


def dequantise(x8: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    return x8.to(torch.float64) * descale[:, :, None, None].to(torch.float64)


def reference(q, k, v, causal):
    """float64 (out, lse) on the given (sub)tensors."""
    from kernels.reference import attention_reference
    return attention_reference(q.double(), k.double(), v.double(), causal=causal)


def errors(out: torch.Tensor, ref: torch.Tensor):
    """(max abs error, relative RMS error) of out against the float64 ref."""
    diff = out.double() - ref
    return diff.abs().max().item(), (diff.norm() / ref.norm().clamp_min(1e-300)).item()


def flops(batch, heads, seqlen, head_dim, causal):
    f = 4.0 * batch * heads * seqlen * seqlen * head_dim
    return f / 2 if causal else f


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------

class Writer:
    def __init__(self, path):
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.file = open(path, "w", newline="")
        self.csv = csv.DictWriter(self.file, fieldnames=COLUMNS)
        self.csv.writeheader()
        self.file.flush()

    def row(self, **values):
        row = {name: "" for name in COLUMNS}
        for name, value in values.items():
            if name not in row:
                raise KeyError(name)
            if isinstance(value, bool):
                value = int(value)
            elif isinstance(value, float):
                value = f"{value:.6g}"
            row[name] = value
        self.csv.writerow(row)
        self.file.flush()
        print(",".join(str(row[name]) for name in COLUMNS), flush=True)


def kernel_note(compiled) -> str:
    try:
        return (f"regs={getattr(compiled, 'n_regs', 'na')} spills={getattr(compiled, 'n_spills', 'na')} "
                f"smem={compiled.metadata.shared}")
    except Exception:  # noqa: BLE001 - a note, never a failure
        return ""


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ").replace(",", ";")[:300]


def prewarm(shapes, deadline, writer):
    """Compile every fp8 kernel the run needs, in parallel threads (Triton's AsyncCompileMode);
    anything that fails here is compiled (and its error reported) on first use instead."""
    try:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode
    except Exception as exc:  # noqa: BLE001
        writer.row(kind="info", provider="probe", note=f"no parallel compile: {one_line(exc)}")
        return
    t0 = time.perf_counter()
    jobs = 0
    device = "cuda"
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        with AsyncCompileMode(pool, ignore_errors=True):
            for head_dim, causal in shapes:
                # Triton specialises integer arguments (== 1, divisible by 16) into the kernel: the
                # heads, the sequence length and every stride here must fall in the same classes
                # as the measured shapes', or the measured call compiles again.
                n, heads = 256, 2048 // head_dim
                q = torch.empty((1, heads, n, head_dim), device=device, dtype=torch.float8_e4m3fn)
                vt = torch.empty((1, heads, head_dim, n), device=device, dtype=torch.float8_e4m3fn)
                d = torch.ones((1, heads), device=device, dtype=torch.float32)
                out = torch.empty((1, heads, n, head_dim), device=device, dtype=torch.bfloat16)
                lse = torch.empty((1, heads, n), device=device, dtype=torch.float32)
                for ci, config in enumerate(CONFIGS[head_dim]):
                    for variant in VARIANTS:
                        if variant == "b_precise" and ci > 0:
                            continue
                        v_trans = variant != "a"
                        v = vt if v_trans else q
                        v_strides = (v.stride(0), v.stride(1), v.stride(3), v.stride(2)) if v_trans else v.stride()
                        block_m, block_n, num_warps, num_stages = config
                        try:
                            _fp8_attn_fwd.warmup(
                                q, q, v, out, lse, d, d, d, *q.stride(), *q.stride(), *v_strides, *out.stride(),
                                *d.stride(), heads, n, n, 1.0,
                                HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
                                V_TRANS=v_trans, PRECISE=variant == "b_precise",
                                num_warps=num_warps, num_stages=num_stages, grid=(1,))
                            jobs += 1
                        except Exception as exc:  # noqa: BLE001
                            print(f"prewarm submit failed: {one_line(exc)}", flush=True)
    writer.row(kind="info", provider="probe",
               note=f"parallel compile of {jobs} fp8 kernels: {time.perf_counter() - t0:.1f} s wall")
    return jobs


def bench(fn, rep_ms):
    from triton.testing import do_bench
    return do_bench(fn, warmup=max(10, rep_ms // 4), rep=rep_ms, return_mode="median")


def run_shape(writer, head_dim, causal, seqlen, deadline, rep_ms, subset_heads):
    batch, heads = 16384 // seqlen, 2048 // head_dim
    shape = dict(head_dim=head_dim, causal=causal, seqlen=seqlen, batch=batch, heads=heads)
    fl = flops(batch, heads, seqlen, head_dim, causal)

    def over_budget():
        return time.perf_counter() > deadline

    gen = torch.Generator(device="cuda").manual_seed(1000 * head_dim + 10 * seqlen // 1024 + int(causal))
    q32, k32, v32 = (torch.randn((batch, heads, seqlen, head_dim), device="cuda", dtype=torch.float32, generator=gen)
                     for _ in range(3))
    (q8, qd), (k8, kd), (v8, vd) = quantise(q32), quantise(k32), quantise(v32)
    sub = (slice(0, 1), slice(0, subset_heads))
    ref_orig, ref_orig_lse = reference(q32[sub], k32[sub], v32[sub], causal)
    ref_deq, ref_deq_lse = reference(dequantise(q8[sub], qd[sub]), dequantise(k8[sub], kd[sub]),
                                     dequantise(v8[sub], vd[sub]), causal)
    q16, k16, v16 = q32.half(), k32.half(), v32.half()
    qb, kb, vb = q32.bfloat16(), k32.bfloat16(), v32.bfloat16()
    del q32, k32, v32

    # ours fp16 first: the fp8 rows are compared with its time
    ours_ms = None
    try:
        from kernels import flash_attention
        out = flash_attention(q16, k16, v16, causal=causal)
        ref16, _ = reference(q16[sub], k16[sub], v16[sub], causal)
        for err_vs, ref in (("dequantised", ref16), ("original", ref_orig)):
            e_max, e_rms = errors(out[sub], ref)
            writer.row(kind="error", provider="ours_fp16", **shape, max_abs_err=e_max, rel_rms_err=e_rms, err_vs=err_vs)
        del out
        if over_budget():
            raise TimeoutError("skipped: time budget")
        ours_ms = bench(lambda: flash_attention(q16, k16, v16, causal=causal), rep_ms)
        writer.row(kind="speed", provider="ours_fp16", **shape, ms=ours_ms, tflops=fl / ours_ms / 1e9,
                   speedup_vs_ours_fp16=1.0)
    except Exception as exc:  # noqa: BLE001
        if not isinstance(exc, TimeoutError):
            traceback.print_exc()
        writer.row(kind="speed", provider="ours_fp16", **shape, note=one_line(exc))

    def speedup(ms):
        return ours_ms / ms if ours_ms else ""

    # torch SDPA: errors of flash fp16 / bf16, speed of flash fp16 and cuDNN fp16
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    for provider, backend, dtype, timed in (("sdpa_flash_fp16", SDPBackend.FLASH_ATTENTION, torch.float16, True),
                                            ("sdpa_flash_bf16", SDPBackend.FLASH_ATTENTION, torch.bfloat16, False),
                                            ("sdpa_cudnn_fp16", SDPBackend.CUDNN_ATTENTION, torch.float16, True)):
        try:
            qx, kx, vx = (q16, k16, v16) if dtype == torch.float16 else (qb, kb, vb)
            with sdpa_kernel(backend):
                out = sdpa(qx, kx, vx, is_causal=causal)
            if provider != "sdpa_cudnn_fp16":
                refx, _ = reference(qx[sub], kx[sub], vx[sub], causal)
                for err_vs, ref in (("dequantised", refx), ("original", ref_orig)):
                    e_max, e_rms = errors(out[sub], ref)
                    writer.row(kind="error", provider=provider, **shape, max_abs_err=e_max, rel_rms_err=e_rms,
                               err_vs=err_vs)
            del out
            if timed:
                if over_budget():
                    raise TimeoutError("skipped: time budget")

                def call():
                    with sdpa_kernel(backend):
                        return sdpa(qx, kx, vx, is_causal=causal)
                ms = bench(call, rep_ms)
                writer.row(kind="speed", provider=provider, **shape, ms=ms, tflops=fl / ms / 1e9,
                           speedup_vs_ours_fp16=speedup(ms))
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, TimeoutError):
                traceback.print_exc()
            writer.row(kind="speed" if timed else "error", provider=provider, **shape, note=one_line(exc))
    del q16, k16, v16, qb, kb, vb, qx, kx, vx

    # the host transpose variant b needs
    vt = None
    try:
        vt = v8.transpose(2, 3).contiguous()
        if not over_budget():
            ms = bench(lambda: v8.transpose(2, 3).contiguous(), rep_ms // 2)
            writer.row(kind="speed", provider="host_v_transpose", **shape, ms=ms,
                       note="v (B;H;N;D) fp8 -> (B;H;D;N) contiguous")
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        writer.row(kind="speed", provider="host_v_transpose", **shape, note=one_line(exc))

    # fp8: every variant and config
    for ci, config in enumerate(CONFIGS[head_dim]):
        block_m, block_n, num_warps, num_stages = config
        tiles = dict(block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages)
        for variant in VARIANTS:
            if variant == "b_precise" and ci > 0:
                continue
            v_trans = variant != "a"
            precise = variant == "b_precise"
            vv = vt if v_trans else v8
            try:
                if vv is None:
                    raise RuntimeError("no transposed V")
                if over_budget():
                    raise TimeoutError("skipped: time budget")
                out, lse, compiled = fp8_attention(q8, k8, vv, qd, kd, vd, causal, config, v_trans, precise)
                note = kernel_note(compiled)
                if ci == 0:
                    for err_vs, ref, ref_lse in (("dequantised", ref_deq, ref_deq_lse),
                                                 ("original", ref_orig, ref_orig_lse)):
                        e_max, e_rms = errors(out[sub], ref)
                        lse_err = (lse[sub].double() - ref_lse).abs().max().item()
                        writer.row(kind="error", provider="fp8_triton", variant=variant, **shape, **tiles,
                                   max_abs_err=e_max, rel_rms_err=e_rms, err_vs=err_vs,
                                   note=f"lse max abs err {lse_err:.3g}")
                e_max, e_rms = errors(out[sub], ref_deq)
                if not math.isfinite(e_max):
                    note += " NON-FINITE OUTPUT"
                del out, lse
                ms = bench(lambda: fp8_attention(q8, k8, vv, qd, kd, vd, causal, config, v_trans, precise), rep_ms)
                writer.row(kind="speed", provider="fp8_triton", variant=variant, **shape, **tiles, ms=ms,
                           tflops=fl / ms / 1e9, speedup_vs_ours_fp16=speedup(ms), max_abs_err=e_max,
                           rel_rms_err=e_rms, err_vs="dequantised", note=note)
            except Exception as exc:  # noqa: BLE001
                if not isinstance(exc, TimeoutError):
                    traceback.print_exc()
                writer.row(kind="speed", provider="fp8_triton", variant=variant, **shape, **tiles, note=one_line(exc))
    del q8, k8, v8, vt
    torch.cuda.empty_cache()


def gpu_main(args):
    start = time.perf_counter()
    faulthandler.dump_traceback_later(args.budget + 60, exit=True)  # a hung kernel ends the process
    writer = Writer(args.csv)
    deadline = start + args.budget
    props = torch.cuda.get_device_properties(0)
    writer.row(kind="info", provider="probe",
               note=f"{props.name} sm_{props.major}{props.minor}; torch {torch.__version__}; triton {triton.__version__}")
    if (props.major, props.minor) != (9, 0):
        writer.row(kind="info", provider="probe", note="not sm_90: the numbers are not the H200's")
    shapes = [(d, c) for d in (64, 128) for c in (False, True)]
    if not args.no_parallel_compile:
        try:
            prewarm(shapes, deadline, writer)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            writer.row(kind="info", provider="probe", note=f"prewarm failed: {one_line(exc)}")
    for head_dim, causal in shapes:
        for seqlen in (4096, 16384):
            t0 = time.perf_counter()
            try:
                run_shape(writer, head_dim, causal, seqlen, deadline, args.rep_ms, args.subset_heads)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                writer.row(kind="info", provider="probe", head_dim=head_dim, causal=causal, seqlen=seqlen,
                           note=f"shape failed: {one_line(exc)}")
            print(f"# shape d={head_dim} causal={causal} n={seqlen}: {time.perf_counter() - t0:.1f} s", flush=True)
    try:  # more kernels than prewarmed: some measured call compiled again (see prewarm)
        count = sum(len(cache[0]) for cache in _fp8_attn_fwd.device_caches.values())
        writer.row(kind="info", provider="probe", note=f"fp8 kernels compiled in all: {count}")
    except Exception as exc:  # noqa: BLE001
        writer.row(kind="info", provider="probe", note=f"kernel count unavailable: {one_line(exc)}")
    writer.row(kind="info", provider="probe", note=f"total {time.perf_counter() - start:.1f} s")
    faulthandler.cancel_dump_traceback_later()


# --------------------------------------------------------------------------------------------
# CPU checks
# --------------------------------------------------------------------------------------------

def dry_run():
    """Inputs, quantisation, dequantisation, references and error code on tiny CPU shapes."""
    torch.manual_seed(0)
    for causal in (False, True):
        q32, k32, v32 = (torch.randn(2, 3, 96, 64) for _ in range(3))
        (q8, qd), (k8, kd), (v8, vd) = quantise(q32), quantise(k32), quantise(v32)
        assert q8.dtype == torch.float8_e4m3fn and qd.shape == (2, 3)
        deq = dequantise(q8, qd)
        rel = ((deq - q32.double()).norm() / q32.double().norm()).item()
        assert rel < 0.05, rel
        assert deq.abs().amax().item() <= q32.abs().amax().item() * 1.0001
        sub = (slice(0, 1), slice(0, 2))
        ref_orig, _ = reference(q32[sub], k32[sub], v32[sub], causal)
        ref_deq, _ = reference(dequantise(q8[sub], qd[sub]), dequantise(k8[sub], kd[sub]),
                               dequantise(v8[sub], vd[sub]), causal)
        e_max, e_rms = errors(ref_deq.float(), ref_orig)
        print(f"dry run causal={causal}: quantisation rel err of q {rel:.4f}; reference from dequantised vs "
              f"original: max abs {e_max:.4g}, rel rms {e_rms:.4g}; flops(4096) {flops(4, 32, 4096, 64, causal):.3g}")
    print("dry run ok")


def interpret_check():
    """The kernel under TRITON_INTERPRET=1 on tiny shapes with fp16 operands (P cast to fp16) and
    non-trivial descales, against the float64 reference; then the fp8 path once, to see that it runs
    (its numbers are not checked: the interpreter's float32 -> float8e4nv cast is wrong)."""
    assert os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"), "set TRITON_INTERPRET=1"
    torch.manual_seed(0)
    worst = 0.0
    for n_q, n_k in ((64, 64), (80, 80), (48, 80), (80, 48)):
        for causal in (False, True):
            for v_trans in (False, True):
                for config in ((32, 16, 4, 1), (16, 32, 4, 1)):
                    q, k, v = (torch.randn(1, 2, n, 64) for n in (n_q, n_k, n_k))
                    qd, kd, vd = (torch.tensor([[0.5, 2.0]]), torch.tensor([[1.5, 0.25]]), torch.tensor([[3.0, 0.5]]))
                    q16, k16, v16 = q.half(), k.half(), v.half()
                    vv = v16.transpose(2, 3).contiguous() if v_trans else v16
                    out, lse, _ = fp8_attention(q16, k16, vv, qd, kd, vd, causal, config, v_trans,
                                                out_dtype=torch.float32)
                    sc = lambda x, d: x.double() * d[:, :, None, None].double()  # noqa: E731
                    ref, ref_lse = reference(sc(q16, qd), sc(k16, kd), sc(v16, vd), causal)
                    e_max, _ = errors(out, ref)
                    finite = torch.isfinite(ref_lse)
                    assert torch.equal(torch.isfinite(lse), finite), "rows without keys"
                    lse_err = (lse.double() - ref_lse)[finite].abs().max().item()
                    worst = max(worst, e_max)
                    print(f"interpret fp16 n_q={n_q} n_k={n_k} causal={causal} v_trans={v_trans} tiles={config}: "
                          f"max abs err {e_max:.3g}, lse err {lse_err:.3g}", flush=True)
                    assert e_max < 1e-2 and lse_err < 1e-3, (e_max, lse_err)
    print(f"interpret fp16 path ok (worst max abs err {worst:.3g})")
    for v_trans, precise in ((False, False), (True, False), (True, True)):
        q32, k32, v32 = (torch.randn(1, 1, 64, 64) for _ in range(3))
        (q8, qd), (k8, kd), (v8, vd) = quantise(q32), quantise(k32), quantise(v32)
        vv = v8.transpose(2, 3).contiguous() if v_trans else v8
        out, lse, _ = fp8_attention(q8, k8, vv, qd, kd, vd, True, (32, 16, 4, 1), v_trans, precise,
                                    out_dtype=torch.float32)
        ref, _ = reference(dequantise(q8, qd), dequantise(k8, kd), dequantise(v8, vd), True)
        e_max, _ = errors(out, ref)
        print(f"interpret fp8 path v_trans={v_trans} precise={precise} runs: finite={bool(torch.isfinite(out).all())}, "
              f"max abs err {e_max:.3g} (not meaningful: the interpreter's fp8 cast is wrong)", flush=True)
    print("interpret check ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="?", default="notes/fp8_probe.csv")
    parser.add_argument("--budget", type=float, default=85.0, help="seconds of work before the rest is skipped")
    parser.add_argument("--rep-ms", type=int, default=150, help="do_bench rep (ms) per measurement")
    parser.add_argument("--subset-heads", type=int, default=2, help="heads of batch 0 the errors are measured on")
    parser.add_argument("--no-parallel-compile", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="CPU: inputs, quantisation, references; no kernel")
    parser.add_argument("--interpret-check", action="store_true", help="CPU, TRITON_INTERPRET=1: the kernel, tiny")
    args = parser.parse_args()
    if args.dry_run:
        dry_run()
    elif args.interpret_check:
        interpret_check()
    else:
        if not torch.cuda.is_available():
            sys.exit("needs a CUDA GPU (or --dry-run / --interpret-check on the CPU)")
        gpu_main(args)


if __name__ == "__main__":
    main()
