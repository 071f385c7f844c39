"""FlashAttention-2 forward pass: Triton kernels and their launcher.

Grid: one program per (query block, batch x head), flattened into one axis. Each program keeps
its BLOCK_M x D query tile on chip and walks the key/value tiles with the online softmax
(running max `m_i`, running sum `l_i`, un-normalised accumulator `acc`), normalising once at
the end and writing the output and the log-sum-exp (natural log) per query row.

Causal attention is aligned to the bottom-right corner, as flash-attn does: query i sees keys
j <= i + Nk - Nq. Key tiles wholly above that diagonal are skipped; tiles wholly below it run
the unmasked loop; only the band in between pays for the mask. Query rows that see no key at
all (Nq > Nk) get an output of zero and a log-sum-exp of -inf.

Training features (compile-time switches; the score transform and the masks are the shared
helpers of `_features.py`, also used by the backward):
  WINDOW   sliding window (left, right) aligned to the bottom-right corner. Key tiles outside
           every row's window are skipped by the loop bounds; the block walks [lo, a) masked,
           [a, b) unmasked, [b, hi) masked. Rows whose window holds no key give 0 and lse -inf.
  SOFTCAP  scores = softcap * tanh(scale * q.k / softcap)
  ALIBI    scores -= slope * |i + Nk - Nq - j| (slopes (B, H) float32, stride 0 over B for (H,))
  DROPOUT  Philox keep mask on P after the row sums: l and lse are those of the undropped P,
           the output is scaled by 1 / (1 - p). `attention_probs` is a slow debug kernel that
           writes P with dropped entries negated (flash-attn's S_dmask convention).

Switches for the ablations (compile-time constants, so the default path pays nothing):
  DEFERRED_RESCALE=False  rescale and normalise the accumulator on every step (FlashAttention-1)
  SEQ_PARALLEL=False      one program per (batch, head) looping over all query blocks
  SKIP_MASKED=False       causal: compute every key tile and mask it
  STORE_SCORES=True       also write the scaled scores (fp32, Nq x Nk per head) for the
                          backward to read instead of recomputing them

fp8 (FP8=True; `fp8_forward`, reached from `flash_attention` with float8_e4m3fn q, k, v): the
same kernel with per-(batch, head) descales (FlashAttention-3's q/k/v_descale: true value = fp8
value * descale; k and v per K/V head). The scores are scaled by softmax_scale * q_descale *
k_descale; P is cast to V's dtype (e4m3) for P @ V, the row sums are taken from the float32 P;
the output is multiplied by v_descale / l and written as bfloat16. fp8 tensor cores want both
operands K-major, so V is passed transposed, (B, Hkv, D, Nk) contiguous (a copy the launcher
makes on every call), and loaded as a (D, BLOCK_N) tile that tl.trans hands to the dot; with V
as given the H200 probe ran 2x slower (notes/fp8_probe.py). No ablation switch or training
feature goes with it. The switch works with any dtype (P is then cast to that dtype), which is
how the interpreter tests check its indexing exactly; with it off, the fp16/bf16 kernels compile
to the same code as before it existed (registers, spills, shared memory: tests/sm90_compile.py).

Head dims: tl.arange and tl.dot need powers of two, so a head dim is computed in one chunk of
columns padded to the next power of two (masked loads, zero columns), or, where
`tiles.head_dim_chunks` says so (96 = 64 + 32, 160 = 128 + 32, 176 and 192 = 128 + 64), in two
chunks (HEAD_DIM_B > 0): Q K^T is the sum of the chunks' dots and P V fills one accumulator per
chunk, so no tensor-core work goes to padding. At 192 the pad was a quarter of the MMA work, and
at sm_90 the padded kernel spills where the chunked one does not (tests/sm90_compile.py).

Scores are kept in the log2 domain (scaled by softmax_scale * log2(e)) so the softmax is exp2.
Offsets that can exceed 2^31 (batch/head bases, row starts) are computed in int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._features import (LOG2E, _dropout_keep, _scores, _sees_a_key, _visible,  # noqa: F401
                               _window_key_bounds)
from kernels._launch import cdiv, launch_kernel
from kernels.errors import InputError
from kernels.options import AttentionOptions, feature_switches
from kernels.tiles import TileConfig, head_dim_chunks, launch_fitting, padded_head_dim


@triton.jit
def _load_tile(ptrs, rows, n_rows, cols, n_cols, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    """Load a (rows x cols) tile, masking only the edges the caller says can be ragged."""
    if CHECK_ROWS and CHECK_COLS:
        tile = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0)
    elif CHECK_ROWS:
        tile = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
    elif CHECK_COLS:
        tile = tl.load(ptrs, mask=cols[None, :] < n_cols, other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


@triton.jit
def _causal_key_bounds(start_m, N_Q, N_K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr):
    """Key range [0, hi) a query block must visit, and `mid`: keys below it need no mask.

    Every key tile in [0, mid) is fully visible to every row of the block and lies inside
    Nk; tiles in [mid, hi) need the causal and/or the sequence-end mask.
    """
    if CAUSAL:
        if SKIP_MASKED:
            diag = start_m * BLOCK_M + N_K - N_Q + 1  # keys < diag are visible to the block's first row
            mid = tl.maximum(diag, 0) // BLOCK_N * BLOCK_N
            hi = tl.minimum((start_m + 1) * BLOCK_M + N_K - N_Q, N_K)
            hi = tl.maximum(hi, mid)
        else:
            mid = 0
            hi = N_K
    else:
        mid = N_K // BLOCK_N * BLOCK_N
        hi = N_K
    return mid, hi


@triton.jit
def _attn_fwd_inner(acc, acc_b, l_i, m_i, q, q_b, k_ptrs, v_ptrs, kb_ptrs, vb_ptrs, s_ptrs, offs_m, offs_n,
                    offs_d, offs_db, start, end, qk_scale, N_Q, N_K,
                    stride_kn, stride_vn,
                    off_hz, slope_log2, seed, win_left, win_right, softcap_scale, softcap_log2, dropout_p,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_B: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                    CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                    DEFERRED_RESCALE: tl.constexpr, STORE_SCORES: tl.constexpr,
                    WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, DROPOUT: tl.constexpr,
                    FP8: tl.constexpr):
    """Online softmax over key tiles [start, end); pointers are positioned at key `start`.
    FP8: `v_ptrs` address a (HEAD_DIM_PAD, BLOCK_N) tile of V^T (keys contiguous).
    HEAD_DIM_B > 0: the head dim's second column chunk (`offs_db`) runs beside the first: q_b, the
    kb/vb pointers and its accumulator acc_b (unused, and never touched, when HEAD_DIM_B == 0)."""
    for start_n in tl.range(start, end, BLOCK_N):
        cols = start_n + offs_n
        k = _load_tile(k_ptrs, cols, N_K, offs_d, HEAD_DIM, MASK, not EVEN_D and HEAD_DIM_B == 0)
        qk = tl.dot(q, tl.trans(k))
        if HEAD_DIM_B > 0:  # the dot over the head dim in two chunks: Q_a K_a^T + Q_b K_b^T
            kb = _load_tile(kb_ptrs, cols, N_K, offs_db, HEAD_DIM, MASK, not EVEN_D)
            qk = tl.dot(q_b, tl.trans(kb), qk)
        if STORE_SCORES:
            tl.store(s_ptrs + start_n, qk * qk_scale,
                     mask=(offs_m[:, None] < N_Q) & (cols[None, :] < N_K))
        if SOFTCAP or ALIBI:
            qk, _ = _scores(qk, offs_m[:, None], cols[None, :], qk_scale, softcap_scale, softcap_log2, slope_log2,
                            N_Q, N_K, SOFTCAP, ALIBI)
            if MASK:
                visible = _visible(offs_m[:, None], cols[None, :], N_Q, N_K, win_left, win_right, False,
                                   CAUSAL, WINDOW)
                qk = tl.where(visible, qk, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        elif MASK:
            visible = _visible(offs_m[:, None], cols[None, :], N_Q, N_K, win_left, win_right, False, CAUSAL, WINDOW)
            # A finite fill keeps fully-masked rows NaN-free; rows that see no key at all are
            # zeroed in the epilogue, every other row has a visible key that dominates it.
            qk = tl.where(visible, qk * qk_scale, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        if FP8:  # V^T in memory: K-major for the fp8 wgmma after the trans
            v = tl.trans(_load_tile(v_ptrs, offs_d, HEAD_DIM, cols, N_K, not EVEN_D, MASK))
        else:
            v = _load_tile(v_ptrs, cols, N_K, offs_d, HEAD_DIM, MASK, not EVEN_D and HEAD_DIM_B == 0)
        if DROPOUT:  # l_i sums the undropped P; the output sees the kept entries only
            p = tl.where(_dropout_keep(seed, off_hz, offs_m[:, None], cols[None, :], dropout_p), p, 0.0)
        if DEFERRED_RESCALE:
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(v.dtype), v, acc)
            if HEAD_DIM_B > 0:
                vb = _load_tile(vb_ptrs, cols, N_K, offs_db, HEAD_DIM, MASK, not EVEN_D)
                acc_b = acc_b * alpha[:, None]
                acc_b = tl.dot(p.to(vb.dtype), vb, acc_b)
            l_i = l_i * alpha + l_ij
        else:
            l_new = l_i * alpha + l_ij
            acc = acc * (l_i * alpha / l_new)[:, None]
            acc += tl.dot(p.to(v.dtype), v) / l_new[:, None]
            if HEAD_DIM_B > 0:
                vb = _load_tile(vb_ptrs, cols, N_K, offs_db, HEAD_DIM, MASK, not EVEN_D)
                acc_b = acc_b * (l_i * alpha / l_new)[:, None]
                acc_b += tl.dot(p.to(vb.dtype), vb) / l_new[:, None]
            l_i = l_new
        m_i = m_ij
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
        if HEAD_DIM_B > 0:
            kb_ptrs += BLOCK_N * stride_kn
            vb_ptrs += BLOCK_N * stride_vn
    return acc, acc_b, l_i, m_i


@triton.jit
def _attn_fwd_block(Q, K, V, Out, Lse, Scores, start_m, off_hz,
                    stride_qz, stride_qh, stride_qm, stride_qd,
                    stride_kz, stride_kh, stride_kn, stride_kd,
                    stride_vz, stride_vh, stride_vn, stride_vd,
                    stride_oz, stride_oh, stride_om, stride_od,
                    H, GROUP, N_Q, N_K, qk_scale,
                    Alibi, stride_az, stride_ah, Seed, win_left, win_right, softcap_scale, softcap_log2,
                    dropout_p, dropout_scale, QDescale, KDescale, VDescale,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_B: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr, DEFERRED_RESCALE: tl.constexpr,
                    STORE_SCORES: tl.constexpr, EVEN_M: tl.constexpr, EVEN_D: tl.constexpr,
                    WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, DROPOUT: tl.constexpr,
                    FP8: tl.constexpr):
    """One query block of one (batch, head): the FlashAttention-2 forward. `Lse` points at the
    (batch, head)'s first row. FP8 and HEAD_DIM_B: see `_attn_fwd`."""
    off_z = tl.cast(off_hz // H, tl.int64)
    off_h = off_hz % H
    off_hkv = tl.cast(off_h // GROUP, tl.int64)
    off_h = tl.cast(off_h, tl.int64)
    row0 = tl.cast(start_m * BLOCK_M, tl.int64)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)

    q_rows = Q + off_z * stride_qz + off_h * stride_qh + row0 * stride_qm + tl.arange(0, BLOCK_M)[:, None] * stride_qm
    q_ptrs = q_rows + offs_d[None, :] * stride_qd
    k_rows = K + off_z * stride_kz + off_hkv * stride_kh + offs_n[:, None] * stride_kn
    k_ptrs = k_rows + offs_d[None, :] * stride_kd
    if FP8:  # V^T (B, Hkv, D, Nk): a (HEAD_DIM_PAD, BLOCK_N) tile; the descales of this (batch, head)
        v_ptrs = (V + off_z * stride_vz + off_hkv * stride_vh + offs_d[:, None] * stride_vd
                  + offs_n[None, :] * stride_vn)
        qk_scale = qk_scale * tl.load(QDescale + off_z * H + off_h) * tl.load(KDescale + off_z * (H // GROUP) + off_hkv)
    else:
        v_rows = V + off_z * stride_vz + off_hkv * stride_vh + offs_n[:, None] * stride_vn
        v_ptrs = v_rows + offs_d[None, :] * stride_vd
    s_ptrs = Scores
    if STORE_SCORES:
        s_ptrs = (Scores + tl.cast(off_hz, tl.int64) * N_Q * N_K + row0 * N_K
                  + tl.arange(0, BLOCK_M)[:, None] * N_K + offs_n[None, :])

    q = _load_tile(q_ptrs, offs_m, N_Q, offs_d, HEAD_DIM, not EVEN_M, not EVEN_D and HEAD_DIM_B == 0)
    if HEAD_DIM_B > 0:  # columns [HEAD_DIM_PAD, HEAD_DIM_PAD + HEAD_DIM_B): the second chunk
        offs_db = HEAD_DIM_PAD + tl.arange(0, HEAD_DIM_B)
        q_b = _load_tile(q_rows + offs_db[None, :] * stride_qd, offs_m, N_Q, offs_db, HEAD_DIM, not EVEN_M,
                         not EVEN_D)
        kb_ptrs = k_rows + offs_db[None, :] * stride_kd
        vb_ptrs = v_rows + offs_db[None, :] * stride_vd
        acc_b = tl.zeros([BLOCK_M, HEAD_DIM_B], dtype=tl.float32)
    else:  # placeholders the inner loop never reads
        offs_db = offs_d
        q_b = q
        kb_ptrs = k_ptrs
        vb_ptrs = v_ptrs
        acc_b = 0.0

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)

    slope_log2 = 0.0
    if ALIBI:
        slope_log2 = tl.load(Alibi + off_z * stride_az + off_h * stride_ah).to(tl.float32) * 1.4426950408889634
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)
    if WINDOW:
        # Key tiles outside every row's window are never visited; [a, b) needs no mask.
        lo, a, b, hi = _window_key_bounds(start_m, N_Q, N_K, win_left, win_right, BLOCK_M, BLOCK_N, SKIP_MASKED)
        lo64 = tl.cast(lo, tl.int64)
        a64 = tl.cast(a, tl.int64)
        b64 = tl.cast(b, tl.int64)
        acc, acc_b, l_i, m_i = _attn_fwd_inner(acc, acc_b, l_i, m_i, q, q_b, k_ptrs + lo64 * stride_kn, v_ptrs + lo64 * stride_vn,
                                                kb_ptrs + lo64 * stride_kn, vb_ptrs + lo64 * stride_vn,
                                                s_ptrs, offs_m, offs_n, offs_d, offs_db, lo, a, qk_scale, N_Q, N_K,
                                                stride_kn, stride_vn, off_hz, slope_log2, seed, win_left, win_right,
                                                softcap_scale, softcap_log2, dropout_p,
                                                HEAD_DIM, HEAD_DIM_B, BLOCK_N, True, CAUSAL, EVEN_D, DEFERRED_RESCALE,
                                                STORE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT, FP8)
        acc, acc_b, l_i, m_i = _attn_fwd_inner(acc, acc_b, l_i, m_i, q, q_b, k_ptrs + a64 * stride_kn, v_ptrs + a64 * stride_vn,
                                                kb_ptrs + a64 * stride_kn, vb_ptrs + a64 * stride_vn,
                                                s_ptrs, offs_m, offs_n, offs_d, offs_db, a, b, qk_scale, N_Q, N_K,
                                                stride_kn, stride_vn, off_hz, slope_log2, seed, win_left, win_right,
                                                softcap_scale, softcap_log2, dropout_p,
                                                HEAD_DIM, HEAD_DIM_B, BLOCK_N, False, CAUSAL, EVEN_D, DEFERRED_RESCALE,
                                                STORE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT, FP8)
        acc, acc_b, l_i, m_i = _attn_fwd_inner(acc, acc_b, l_i, m_i, q, q_b, k_ptrs + b64 * stride_kn, v_ptrs + b64 * stride_vn,
                                                kb_ptrs + b64 * stride_kn, vb_ptrs + b64 * stride_vn,
                                                s_ptrs, offs_m, offs_n, offs_d, offs_db, b, hi, qk_scale, N_Q, N_K,
                                                stride_kn, stride_vn, off_hz, slope_log2, seed, win_left, win_right,
                                                softcap_scale, softcap_log2, dropout_p,
                                                HEAD_DIM, HEAD_DIM_B, BLOCK_N, True, CAUSAL, EVEN_D, DEFERRED_RESCALE,
                                                STORE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT, FP8)
    else:
        mid, hi = _causal_key_bounds(start_m, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL, SKIP_MASKED)
        # Tiles below the diagonal (all of them when not causal): no mask.
        acc, acc_b, l_i, m_i = _attn_fwd_inner(acc, acc_b, l_i, m_i, q, q_b, k_ptrs, v_ptrs, kb_ptrs, vb_ptrs,
                                                s_ptrs, offs_m, offs_n, offs_d, offs_db, 0, mid, qk_scale, N_Q, N_K,
                                                stride_kn, stride_vn, off_hz, slope_log2, seed, win_left, win_right,
                                                softcap_scale, softcap_log2, dropout_p,
                                                HEAD_DIM, HEAD_DIM_B, BLOCK_N, False, CAUSAL, EVEN_D, DEFERRED_RESCALE,
                                                STORE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT, FP8)
        # The diagonal band and the ragged end of the keys: masked.
        mid64 = tl.cast(mid, tl.int64)
        acc, acc_b, l_i, m_i = _attn_fwd_inner(acc, acc_b, l_i, m_i, q, q_b, k_ptrs + mid64 * stride_kn, v_ptrs + mid64 * stride_vn,
                                                kb_ptrs + mid64 * stride_kn, vb_ptrs + mid64 * stride_vn,
                                                s_ptrs, offs_m, offs_n, offs_d, offs_db, mid, hi, qk_scale, N_Q, N_K,
                                                stride_kn, stride_vn, off_hz, slope_log2, seed, win_left, win_right,
                                                softcap_scale, softcap_log2, dropout_p,
                                                HEAD_DIM, HEAD_DIM_B, BLOCK_N, True, CAUSAL, EVEN_D, DEFERRED_RESCALE,
                                                STORE_SCORES, WINDOW, SOFTCAP, ALIBI, DROPOUT, FP8)

    if FP8:  # deferred rescale only; v_descale folded into the normalisation
        acc = acc * (tl.load(VDescale + off_z * (H // GROUP) + off_hkv) / l_i)[:, None]
    elif DEFERRED_RESCALE:
        acc = acc / l_i[:, None]
        if HEAD_DIM_B > 0:
            acc_b = acc_b / l_i[:, None]
    if DROPOUT:
        acc = acc * dropout_scale
        if HEAD_DIM_B > 0:
            acc_b = acc_b * dropout_scale
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # log2 domain -> natural log
    if CAUSAL or WINDOW:
        sees_a_key = _sees_a_key(offs_m, N_Q, N_K, win_left, win_right, CAUSAL, WINDOW)
        acc = tl.where(sees_a_key[:, None], acc, 0.0)
        if HEAD_DIM_B > 0:
            acc_b = tl.where(sees_a_key[:, None], acc_b, 0.0)
        lse = tl.where(sees_a_key, lse, float("-inf"))

    o_rows = (Out + off_z * stride_oz + off_h * stride_oh + row0 * stride_om
              + tl.arange(0, BLOCK_M)[:, None] * stride_om)
    tl.store(o_rows + offs_d[None, :] * stride_od, acc.to(Out.dtype.element_ty),
             mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_DIM))
    if HEAD_DIM_B > 0:
        tl.store(o_rows + offs_db[None, :] * stride_od, acc_b.to(Out.dtype.element_ty),
                 mask=(offs_m[:, None] < N_Q) & (offs_db[None, :] < HEAD_DIM))
    tl.store(Lse + offs_m, lse, mask=offs_m < N_Q)


@triton.jit
def _varlen_bounds(Cu_q, Cu_k, off_z):
    """Sequence `off_z` of a packed batch: its first query and key tokens and its lengths."""
    seq_q0 = tl.load(Cu_q + off_z)
    seq_k0 = tl.load(Cu_k + off_z)
    n_q = tl.load(Cu_q + off_z + 1) - seq_q0
    n_k = tl.load(Cu_k + off_z + 1) - seq_k0
    return tl.cast(seq_q0, tl.int64), tl.cast(seq_k0, tl.int64), n_q, n_k


@triton.heuristics({
    "EVEN_M": lambda args: not args["VARLEN"] and args["N_Q"] % args["BLOCK_M"] == 0,
    "EVEN_D": lambda args: args["HEAD_DIM"] == args["HEAD_DIM_PAD"] + args["HEAD_DIM_B"],
})
@triton.jit
def _attn_fwd(Q, K, V, Out, Lse, Scores,
              stride_qz, stride_qh, stride_qm, stride_qd,
              stride_kz, stride_kh, stride_kn, stride_kd,
              stride_vz, stride_vh, stride_vn, stride_vd,
              stride_oz, stride_oh, stride_om, stride_od,
              H, GROUP, N_Q, N_K, qk_scale,
              Alibi, stride_az, stride_ah, Seed, win_left, win_right, softcap_scale, softcap_log2,
              dropout_p, dropout_scale, Cu_q, Cu_k, TOTAL_Q, QDescale, KDescale, VDescale,
              HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_B: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, SKIP_MASKED: tl.constexpr, DEFERRED_RESCALE: tl.constexpr,
              SEQ_PARALLEL: tl.constexpr, STORE_SCORES: tl.constexpr,
              WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, DROPOUT: tl.constexpr,
              VARLEN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_D: tl.constexpr, FP8: tl.constexpr):
    """VARLEN: a packed batch; (batch) is the sequence index, N_Q and N_K the longest sequences
    (the grid), Cu_q / Cu_k (B + 1,) int32 token offsets, the batch strides 0, Lse (H, TOTAL_Q).
    Each program reads its sequence's offsets and lengths; blocks past its end do nothing.

    FP8: the fp8 forward (any dtype runs it; fp8 is what it is for). V is passed as V^T, (B, Hkv,
    D, Nk) with the keys contiguous, its strides still in (z, h, n, d) order; QDescale (B, H) and
    KDescale, VDescale (B, Hkv) are contiguous float32. The scores are scaled by
    qk_scale * q_descale * k_descale, P is cast to V's dtype for P @ V (e4m3 for fp8 inputs), the
    row sums are those of the float32 P, and the output is multiplied by v_descale / l.
    Off, the descale pointers are never read and the code is that of the fp16/bf16 forward.

    HEAD_DIM_B > 0: the head dim in two column chunks of powers of two, [0, HEAD_DIM_PAD) and
    [HEAD_DIM_PAD, HEAD_DIM_PAD + HEAD_DIM_B) (`tiles.head_dim_chunks`: 192 = 128 + 64, 96 = 64 + 32),
    instead of one padded to the next power of two: Q K^T is the sum of the chunks' two dots and P V
    fills two accumulators, so no tensor core works on padding columns. Not with FP8.
    HEAD_DIM_B == 0: one chunk of HEAD_DIM_PAD columns, the code as before the switch existed."""
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    tl.static_assert(not FP8 or (DEFERRED_RESCALE and not (STORE_SCORES or WINDOW or SOFTCAP or ALIBI or DROPOUT
                                                           or VARLEN)),
                     "the fp8 forward has no ablation switches or training features")
    tl.static_assert(HEAD_DIM <= HEAD_DIM_PAD + HEAD_DIM_B, "head dim is padded up, never down")
    tl.static_assert(HEAD_DIM_B == 0 or (HEAD_DIM_PAD < HEAD_DIM and not FP8),
                     "a second column chunk starts inside the head dim, and not in the fp8 forward")
    num_m_blocks = tl.cdiv(N_Q, BLOCK_M)
    if SEQ_PARALLEL:
        pid = tl.program_id(0)
        off_hz = pid // num_m_blocks
        start_m = pid % num_m_blocks
        if CAUSAL or WINDOW:  # the longest rows first, so the last wave is short
            start_m = num_m_blocks - 1 - start_m
        n_q = N_Q
        n_k = N_K
        if VARLEN:  # this program's sequence: its offsets and lengths
            seq_q0, seq_k0, n_q, n_k = _varlen_bounds(Cu_q, Cu_k, off_hz // H)
            Q += seq_q0 * stride_qm
            K += seq_k0 * stride_kn
            V += seq_k0 * stride_vn
            Out += seq_q0 * stride_om
            Lse += tl.cast(off_hz % H, tl.int64) * TOTAL_Q + seq_q0
        else:
            Lse += tl.cast(off_hz, tl.int64) * N_Q
        if start_m * BLOCK_M < n_q:  # always, unless a packed sequence ends before this block
            _attn_fwd_block(Q, K, V, Out, Lse, Scores, start_m, off_hz,
                            stride_qz, stride_qh, stride_qm, stride_qd,
                            stride_kz, stride_kh, stride_kn, stride_kd,
                            stride_vz, stride_vh, stride_vn, stride_vd,
                            stride_oz, stride_oh, stride_om, stride_od,
                            H, GROUP, n_q, n_k, qk_scale,
                            Alibi, stride_az, stride_ah, Seed, win_left, win_right, softcap_scale, softcap_log2,
                            dropout_p, dropout_scale, QDescale, KDescale, VDescale,
                            HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_B, BLOCK_M, BLOCK_N,
                            CAUSAL, SKIP_MASKED, DEFERRED_RESCALE, STORE_SCORES, EVEN_M, EVEN_D,
                            WINDOW, SOFTCAP, ALIBI, DROPOUT, FP8)
    else:
        tl.static_assert(not VARLEN, "a packed batch needs SEQ_PARALLEL")
        off_hz = tl.program_id(0)
        for start_m in range(0, num_m_blocks):
            _attn_fwd_block(Q, K, V, Out, Lse + tl.cast(off_hz, tl.int64) * N_Q, Scores, start_m, off_hz,
                            stride_qz, stride_qh, stride_qm, stride_qd,
                            stride_kz, stride_kh, stride_kn, stride_kd,
                            stride_vz, stride_vh, stride_vn, stride_vd,
                            stride_oz, stride_oh, stride_om, stride_od,
                            H, GROUP, N_Q, N_K, qk_scale,
                            Alibi, stride_az, stride_ah, Seed, win_left, win_right, softcap_scale, softcap_log2,
                            dropout_p, dropout_scale, QDescale, KDescale, VDescale,
                            HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_B, BLOCK_M, BLOCK_N,
                            CAUSAL, SKIP_MASKED, DEFERRED_RESCALE, STORE_SCORES, EVEN_M, EVEN_D,
                            WINDOW, SOFTCAP, ALIBI, DROPOUT, FP8)


def check_varlen(opts: AttentionOptions, cu_seqlens_q: torch.Tensor | None, cu_seqlens_k: torch.Tensor | None):
    """Whether the call is a packed batch; refuses the switches the packed kernels do not have."""
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise InputError("cu_seqlens_q and cu_seqlens_k go together: pass both or neither")
    if cu_seqlens_q is None:
        return False
    refused = [name for name, on in (("algorithm='fa1'", opts.algorithm == "fa1"),
                                     ("recompute=False", not opts.recompute),
                                     ("seq_parallel=False", not opts.seq_parallel)) if on]
    if refused:
        raise NotImplementedError(f"variable-length (packed) batches are not supported with {', '.join(refused)}")
    return True


def varlen_shape(q: torch.Tensor, k: torch.Tensor, opts: AttentionOptions, cu_seqlens_q: torch.Tensor | None):
    """(batch, n_q, n_k) of the grid: the tensors' own, or for a packed batch (q, k of shape
    (1, H, total, D)) the number of sequences and the longest ones."""
    if cu_seqlens_q is None:
        return q.shape[0], q.shape[2], k.shape[2]
    return cu_seqlens_q.shape[0] - 1, opts.max_seqlen_q, opts.max_seqlen_k


def varlen_args(cu_seqlens_q: torch.Tensor | None, cu_seqlens_k: torch.Tensor | None, total_q: int,
                dummy: torch.Tensor) -> dict:
    """The kernels' packed-batch arguments (VARLEN off: placeholders)."""
    varlen = cu_seqlens_q is not None
    return dict(Cu_q=cu_seqlens_q if varlen else dummy, Cu_k=cu_seqlens_k if varlen else dummy,
                TOTAL_Q=total_q, VARLEN=varlen)


def strides(t: torch.Tensor, varlen: bool) -> tuple:
    """A tensor's strides for the kernels; a packed batch's batch stride is 0 (the kernels offset
    each sequence by its first token instead)."""
    return (0, *t.stride()[1:]) if varlen else tuple(t.stride())


@triton.jit
def _transpose_rows(Src, Dst, N, D, stride_sz, stride_sh, stride_sn, stride_sd, stride_dz, stride_dh, stride_dd,
                    H, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Dst[b, h, d, n] = Src[b, h, n, d] for one (BLOCK_N x BLOCK_D) tile; Dst's last stride is 1."""
    off_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    off_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    off_z = tl.program_id(2) // H
    off_h = tl.program_id(2) % H
    mask = (off_n[:, None] < N) & (off_d[None, :] < D)
    src = (Src + off_z.to(tl.int64) * stride_sz + off_h.to(tl.int64) * stride_sh
           + off_n[:, None].to(tl.int64) * stride_sn + off_d[None, :] * stride_sd)
    tile = tl.load(src, mask=mask)
    dst = (Dst + off_z.to(tl.int64) * stride_dz + off_h.to(tl.int64) * stride_dh
           + off_d[:, None].to(tl.int64) * stride_dd + off_n[None, :])
    tl.store(dst, tl.trans(tile), mask=tl.trans(mask))


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def transposed_keys(v: torch.Tensor) -> torch.Tensor:
    """v (B, Hkv, Nk, D) as a (B, Hkv, D, Nk) view of a copy whose rows are padded to a multiple
    of 16 elements (the padding is never read). One tiled Triton kernel moves the bytes (as
    integers of the element's size): PyTorch's strided copy of a one-byte transpose ran at about
    160 GB/s on the H200 (notes/fp8_engine_bench_h200.csv: 0.21 ms for 16k tokens at d128)."""
    batch, heads, n_k, head_dim = v.shape
    padded = torch.empty((batch, heads, head_dim, -(-n_k // 16) * 16), device=v.device, dtype=v.dtype)
    vt = padded[..., :n_k]
    if v.numel() == 0:
        return vt
    as_int = _SAME_SIZE_INT[v.element_size()]
    src, dst = v.view(as_int), padded.view(as_int)
    block_n, block_d = 64, 64
    grid = (cdiv(n_k, block_n), cdiv(head_dim, block_d), batch * heads)
    launch_kernel(_transpose_rows, grid, src, dst, n_k, head_dim, *src.stride(), dst.stride(0), dst.stride(1),
                  dst.stride(2), heads, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=4)
    return vt


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, opts: AttentionOptions,
                      alibi_slopes: torch.Tensor | None = None, dropout_seed: torch.Tensor | None = None,
                      cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None,
                      descales: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                      out_dtype: torch.dtype | None = None):
    """Launch the forward. Inputs and options are validated by the caller (kernels.attention).

    Tiles come from `opts.fwd_tiles`; `opts.fit_fwd_tiles` steps down from them if they do not
    fit the GPU (default configs). Returns (out, lse, scores): out like q (same strides where q
    is dense), lse (B, H, Nq) float32, scores (B, H, Nq, Nk) float32 in the log2 domain if
    `not opts.recompute`, else an empty tensor.

    A packed batch (cu_seqlens_q, cu_seqlens_k int32 (B + 1,)): q (1, H, total_q, D), k, v
    (1, Hkv, total_k, D), sequence b at tokens cu_seqlens[b]:cu_seqlens[b + 1], max lengths in
    `opts.max_seqlen_q / _k`; out is like q and lse (1, H, total_q). One launch for the batch.

    `descales` (q_descale (B, H), k_descale, v_descale (B, Hkv), float32) runs the FP8 kernels
    (see `_attn_fwd`; `fp8_forward` is the entry): V is transposed here into a (B, Hkv, D, Nk)
    contiguous copy, and out has dtype `out_dtype` (default: q's).
    """
    varlen = check_varlen(opts, cu_seqlens_q, cu_seqlens_k)
    heads, total_q, head_dim = q.shape[1:]
    batch, n_q, n_k = varlen_shape(q, k, opts, cu_seqlens_q)
    kv_heads = k.shape[1]
    store_scores = not opts.recompute
    out = torch.empty_like(q, dtype=out_dtype or q.dtype)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    if store_scores:
        scores = torch.empty((batch, heads, n_q, n_k), device=q.device, dtype=torch.float32)
    else:
        scores = torch.empty((0,), device=q.device, dtype=torch.float32)
    head_dim_pad, head_dim_b = head_dim_chunks(head_dim)
    if descales is not None:  # an fp8 tl.dot needs K >= 32 (sm_90: Q K^T at head dim 16 does not compile)
        head_dim_pad, head_dim_b = max(padded_head_dim(head_dim), 32), 0
    features = opts.kernel_args(n_q, n_k, alibi_slopes, dropout_seed, lse)
    features.update(varlen_args(cu_seqlens_q, cu_seqlens_k, total_q, lse))
    switches = dict(SKIP_MASKED=opts.skip_masked_tiles, DEFERRED_RESCALE=opts.deferred_rescale,
                    SEQ_PARALLEL=opts.seq_parallel, STORE_SCORES=store_scores, FP8=descales is not None)
    v_strides = strides(v, varlen)
    if descales is not None:
        # fp8 wgmma wants P @ V's V K-major: the keys contiguous. A copy of V per call (a
        # transpose kernel, ~0.1 ms for 4 x 32 x 4096 x 64 on the H200: notes/fp8_probe_trial_h200.csv).
        # Its rows start on 16-element boundaries whatever Nk is: Triton specialises strides
        # divisible by 16, and without that its V loads are not vectorised or pipelined (sm_90:
        # 544 bytes of spills at d128 with Nk = 300, none with the padded stride).
        v = transposed_keys(v)
        v_strides = (v.stride(0), v.stride(1), v.stride(3), v.stride(2))  # (z, h, n, d) order
        q_descale, k_descale, v_descale = (d.contiguous() for d in descales)
    else:
        q_descale = k_descale = v_descale = lse  # placeholders, never read

    def launch(config: TileConfig) -> None:
        grid = (cdiv(n_q, config.block_m) * batch * heads,) if opts.seq_parallel else (batch * heads,)
        launch_kernel(_attn_fwd, grid,
            q, k, v, out, lse, scores,
            *strides(q, varlen), *strides(k, varlen), *v_strides, *strides(out, varlen),
            heads, heads // kv_heads, n_q, n_k, opts.softmax_scale * LOG2E,
            HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, HEAD_DIM_B=head_dim_b, BLOCK_M=config.block_m,
            BLOCK_N=config.block_n, QDescale=q_descale, KDescale=k_descale, VDescale=v_descale,
            num_warps=config.num_warps, num_stages=config.num_stages, **switches, **features)

    key = ("fwd", q.dtype, (head_dim_pad, head_dim_b), tuple(switches.items()) + feature_switches(features) + (varlen,))
    launch_fitting(launch, TileConfig(*opts.fwd_tiles), opts.fit_fwd_tiles, key)
    return out, lse, scores


def fp8_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor, k_descale: torch.Tensor,
                v_descale: torch.Tensor, opts: AttentionOptions, out_dtype: torch.dtype = torch.bfloat16):
    """The fp8 forward: (out (B, H, Nq, D) out_dtype, lse (B, H, Nq) float32). q, k, v
    (B, H|Hkv, N, D) of one dtype: torch.float8_e4m3fn from `flash_attention` (checked there),
    or any dtype the kernels take, which runs the same code with P cast to that dtype instead
    (how the tests check it in the interpreter). The true inputs are q * q_descale[b, h] and so
    on. `opts` holds the scale, the causal flag and the tiles, nothing else."""
    out, lse, _ = attention_forward(q, k, v, opts, descales=(q_descale, k_descale, v_descale), out_dtype=out_dtype)
    return out, lse


# --------------------------------------------------------------------------------------------
# Debug: the attention probabilities with the dropout mask, as flash-attn's S_dmask.
# --------------------------------------------------------------------------------------------

@triton.jit
def _attn_probs(Q, K, Lse, Probs,
                stride_qz, stride_qh, stride_qm, stride_qd,
                stride_kz, stride_kh, stride_kn, stride_kd,
                H, GROUP, N_Q, N_K, qk_scale,
                Alibi, stride_az, stride_ah, Seed, win_left, win_right, softcap_scale, softcap_log2,
                dropout_p, dropout_scale, Cu_q, Cu_k, TOTAL_Q,
                HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
                DROPOUT: tl.constexpr, VARLEN: tl.constexpr):
    """P = exp(S - lse) of one query block over every key, 0 where masked, negated where dropped.

    Probs is (B, H, N_Q, N_K); VARLEN (see `_attn_fwd`): N_Q, N_K are the longest sequences and
    each sequence's block sits at the top left of its (N_Q, N_K) slice."""
    num_m_blocks = tl.cdiv(N_Q, BLOCK_M)
    off_hz = tl.program_id(0) // num_m_blocks
    start_m = tl.program_id(0) % num_m_blocks
    off_z = tl.cast(off_hz // H, tl.int64)
    off_h = off_hz % H
    off_hkv = tl.cast(off_h // GROUP, tl.int64)
    off_h = tl.cast(off_h, tl.int64)
    Probs += tl.cast(off_hz, tl.int64) * N_Q * N_K
    stride_pm = N_K
    if VARLEN:
        seq_q0, seq_k0, N_Q, N_K = _varlen_bounds(Cu_q, Cu_k, off_z)
        Q += seq_q0 * stride_qm
        K += seq_k0 * stride_kn
        Lse += off_h * TOTAL_Q + seq_q0
    else:
        Lse += tl.cast(off_hz, tl.int64) * N_Q
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    rows = tl.cast(offs_m, tl.int64)
    q = _load_tile(Q + off_z * stride_qz + off_h * stride_qh + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                   offs_m, N_Q, offs_d, HEAD_DIM, True, True)
    lse = tl.load(Lse + offs_m, mask=offs_m < N_Q, other=0.0) * 1.4426950408889634
    slope_log2 = 0.0
    if ALIBI:
        slope_log2 = tl.load(Alibi + off_z * stride_az + off_h * stride_ah).to(tl.float32) * 1.4426950408889634
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)
    for start_n in range(0, N_K, BLOCK_N):
        cols = start_n + offs_n
        k = _load_tile(K + off_z * stride_kz + off_hkv * stride_kh + tl.cast(cols, tl.int64)[:, None] * stride_kn
                       + offs_d[None, :] * stride_kd, cols, N_K, offs_d, HEAD_DIM, True, True)
        s, _ = _scores(tl.dot(q, tl.trans(k)), offs_m[:, None], cols[None, :], qk_scale, softcap_scale,
                       softcap_log2, slope_log2, N_Q, N_K, SOFTCAP, ALIBI)
        visible = _visible(offs_m[:, None], cols[None, :], N_Q, N_K, win_left, win_right, True, CAUSAL, WINDOW)
        p = tl.where(visible, tl.math.exp2(s - lse[:, None]), 0.0)
        if DROPOUT:
            p = tl.where(_dropout_keep(seed, off_hz, offs_m[:, None], cols[None, :], dropout_p), p, -p)
        tl.store(Probs + rows[:, None] * stride_pm + cols[None, :], p,
                 mask=(offs_m[:, None] < N_Q) & (cols[None, :] < N_K))


def attention_probs(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, opts: AttentionOptions,
                    alibi_slopes: torch.Tensor | None = None, dropout_seed: torch.Tensor | None = None,
                    cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None):
    """(B, H, Nq, Nk) float32: the softmax probabilities the forward used (before dropout), 0
    where masked, and negated where dropout dropped them (flash-attn's S_dmask convention).
    A slow debug launch that materialises Nq x Nk per head; only for return_attn_probs.
    A packed batch (see `attention_forward`) gives (B, H, max_seqlen_q, max_seqlen_k), each
    sequence at the top left, zeros elsewhere."""
    varlen = check_varlen(opts, cu_seqlens_q, cu_seqlens_k)
    heads, total_q, head_dim = q.shape[1:]
    batch, n_q, n_k = varlen_shape(q, k, opts, cu_seqlens_q)
    kv_heads = k.shape[1]
    probs = torch.zeros((batch, heads, n_q, n_k), device=q.device, dtype=torch.float32)
    block_m, block_n = 16, 32
    launch_kernel(_attn_probs, (cdiv(n_q, block_m) * batch * heads,),
        q, k, lse, probs, *strides(q, varlen), *strides(k, varlen), heads, heads // kv_heads, n_q, n_k,
        opts.softmax_scale * LOG2E,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=padded_head_dim(head_dim), BLOCK_M=block_m, BLOCK_N=block_n,
        **opts.kernel_args(n_q, n_k, alibi_slopes, dropout_seed, lse),
        **varlen_args(cu_seqlens_q, cu_seqlens_k, total_q, lse))
    return probs
