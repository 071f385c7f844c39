"""Split-KV decoding (Flash-Decoding): Triton kernels and their launcher.

Grid: (query-row block, batch x kv_head) on axis 0, split on axis 1. Each program owns ONE key/value
head and stacks every query head of its GQA group and every new query token as the M dimension
of its tile (row r = token r // GROUP, head kv_head * GROUP + r % GROUP), so the K/V bytes of a
head are read once for all GROUP query heads: decoding is bound by HBM bandwidth, and this is
what keeps GQA 8:1 at 1/8 of the traffic of MHA. The program walks its slice of the visible
keys with the online softmax (log2 domain, exp2) and writes

  - num_splits == 1: the normalised output (q's dtype) and the log-sum-exp directly;
  - num_splits > 1: a partial output (float32, already normalised by its own sum) and the
    partial log-sum-exp; `_decode_combine` then merges the splits of each row through their
    log-sum-exps: o = sum_s exp(lse_s - lse) o_s with lse = logsumexp_s lse_s.

The cache is read dense (B_cache, Ncache, Hkv, D), with an optional batch index per sequence
(`cache_batch_idx`), or paged (num_blocks, page_size, Hkv, D) through a block table: the page of
key j of sequence b is block_table[b, j // page_size], gathered per key, so pages may come in any
order and a split may start anywhere inside a page.

Per-sequence lengths: sequence b sees cache positions [leftpad[b], seqlen_k[b]) (seqlen_k is
cache_seqlens plus the appended tokens); inside it key p = j - leftpad[b] and the sequence has
Nk = seqlen_k[b] - leftpad[b] keys. Query row i (of Nq) sees key p when
    p <= i + Nk - Nq + right   (causal: right = 0; no limit when right < 0 and not causal)
    p >= i + Nk - Nq - left    (no limit when left < 0)
Scores: s = softmax_scale * q.k; with softcap c: s = c * tanh(s / c); with ALiBi slope m:
s -= m * |i + Nk - Nq - p|. Rows that see no key get an output of 0 and a log-sum-exp of -inf.
Offsets that can exceed 2^31 (page / batch bases) are int64.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels._features import _LOG2E, _tanh
from kernels._launch import cdiv, launch_kernel, next_power_of_2
from kernels.tiles import padded_head_dim

LN2 = 0.6931471805599453
_LN2 = tl.constexpr(LN2)

# SM count assumed for the split choice when there is no GPU (the interpreter): small, so the
# CPU tests exercise several splits with small shapes.
CPU_SM_COUNT = 8
MIN_KEYS_PER_SPLIT = 256
MAX_SPLITS = 128


@triton.jit
def _decode_fwd(Q, K, V, Out, Lse, OPart, LsePart,
                SeqlensK, Leftpad, BatchIdx, BlockTable, Alibi,
                stride_qb, stride_qm, stride_qh, stride_qd,
                stride_kb, stride_kn, stride_kh, stride_kd,
                stride_vb, stride_vn, stride_vh, stride_vd,
                stride_ob, stride_om, stride_oh, stride_od,
                stride_btb, stride_alb,
                B, HKV, N_Q, qk_scale, softcap, window_left, window_right,
                GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr,
                PAGED: tl.constexpr, HAS_BATCH_IDX: tl.constexpr, HAS_LEFTPAD: tl.constexpr,
                CAUSAL: tl.constexpr, LOCAL_LEFT: tl.constexpr, LOCAL_RIGHT: tl.constexpr,
                SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, NUM_SPLITS: tl.constexpr):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    pid = tl.program_id(0)
    split = tl.program_id(1)
    off_bh = pid % (B * HKV)
    start_m = pid // (B * HKV)
    off_b = off_bh // HKV
    off_hkv = off_bh % HKV
    off_b64 = tl.cast(off_b, tl.int64)
    off_hkv64 = tl.cast(off_hkv, tl.int64)

    # Rows of this block: token i, head h = off_hkv * GROUP + g.
    offs_r = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_i = offs_r // GROUP
    offs_h = off_hkv * GROUP + offs_r % GROUP
    row_ok = offs_i < N_Q
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    d_ok = offs_d < HEAD_DIM

    seqlen_k = tl.load(SeqlensK + off_b)
    start_k = 0
    if HAS_LEFTPAD:
        start_k = tl.load(Leftpad + off_b)
    n_k = seqlen_k - start_k  # keys this sequence sees, numbered p = j - start_k
    shift = n_k - N_Q  # row i's diagonal is at p = i + shift

    # Key range [lo, hi) (in p) the rows of this block can see, then this split's share of it.
    i_first = start_m * BLOCK_M // GROUP
    i_last = tl.minimum((start_m * BLOCK_M + BLOCK_M - 1) // GROUP, N_Q - 1)
    lo = 0
    hi = n_k
    if LOCAL_LEFT:
        lo = tl.maximum(i_first + shift - window_left, 0)
    if CAUSAL or LOCAL_RIGHT:
        hi = tl.minimum(i_last + shift + window_right + 1, n_k)
    hi = tl.maximum(hi, lo)
    chunk = tl.cdiv(tl.cdiv(hi - lo, NUM_SPLITS), BLOCK_N) * BLOCK_N
    s_lo = lo + split * chunk
    s_hi = tl.minimum(s_lo + chunk, hi)

    q_ptrs = (Q + off_b64 * stride_qb + tl.cast(offs_i, tl.int64)[:, None] * stride_qm
              + tl.cast(offs_h, tl.int64)[:, None] * stride_qh + offs_d[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    if HAS_BATCH_IDX:
        cache_b = tl.cast(tl.load(BatchIdx + off_b), tl.int64)
    else:
        cache_b = off_b64
    k_base = K + off_hkv64 * stride_kh + offs_d[None, :] * stride_kd
    v_base = V + off_hkv64 * stride_vh + offs_d[None, :] * stride_vd
    if not PAGED:
        k_base += cache_b * stride_kb
        v_base += cache_b * stride_vb
    if ALIBI:
        slope = tl.load(Alibi + off_b64 * stride_alb + offs_h, mask=row_ok, other=0.0) * _LOG2E

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    diag = offs_i + shift
    for start_n in tl.range(s_lo, s_hi, BLOCK_N):
        p_idx = start_n + offs_n
        key_ok = p_idx < s_hi
        j = p_idx + start_k  # position in the (logical) cache
        if PAGED:
            page = tl.load(BlockTable + off_b64 * stride_btb + j // PAGE_SIZE, mask=key_ok, other=0)
            row = tl.cast(page, tl.int64) * stride_kb + tl.cast(j % PAGE_SIZE, tl.int64) * stride_kn
            row_v = tl.cast(page, tl.int64) * stride_vb + tl.cast(j % PAGE_SIZE, tl.int64) * stride_vn
        else:
            row = tl.cast(j, tl.int64) * stride_kn
            row_v = tl.cast(j, tl.int64) * stride_vn
        kv_mask = key_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + row[:, None], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if SOFTCAP:
            x = qk * (qk_scale / softcap)  # scale / c, natural units
            t = _tanh(x)
            s = t * (softcap * _LOG2E)
        else:
            s = qk * (qk_scale * _LOG2E)
        if ALIBI:
            s -= slope[:, None] * tl.abs(diag[:, None] - p_idx[None, :]).to(tl.float32)
        visible = key_ok[None, :] & row_ok[:, None]
        if CAUSAL or LOCAL_RIGHT:
            visible = visible & (p_idx[None, :] <= diag[:, None] + window_right)
        if LOCAL_LEFT:
            visible = visible & (p_idx[None, :] >= diag[:, None] - window_left)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + row_v[:, None], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new

    seen = l_i > 0.0
    acc = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * _LN2, float("-inf"))
    out_mask = row_ok[:, None] & d_ok[None, :]
    if NUM_SPLITS == 1:
        o_ptrs = (Out + off_b64 * stride_ob + tl.cast(offs_i, tl.int64)[:, None] * stride_om
                  + tl.cast(offs_h, tl.int64)[:, None] * stride_oh + offs_d[None, :] * stride_od)
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=out_mask)
        # Lse is (B, H, Nq), contiguous
        tl.store(Lse + (off_b64 * (HKV * GROUP) + offs_h) * N_Q + offs_i, lse, mask=row_ok)
    else:
        # OPart (splits, B, Nq, H, HEAD_DIM_PAD) and LsePart (splits, B, H, Nq), contiguous
        split64 = tl.cast(split, tl.int64)
        h_all = HKV * GROUP
        row_base = ((split64 * B + off_b64) * N_Q + offs_i) * h_all + offs_h
        tl.store(OPart + row_base[:, None] * HEAD_DIM_PAD + offs_d[None, :], acc, mask=row_ok[:, None])
        tl.store(LsePart + ((split64 * B + off_b64) * h_all + offs_h) * N_Q + offs_i, lse, mask=row_ok)


@triton.jit
def _decode_combine(OPart, LsePart, Out, Lse,
                    stride_ob, stride_om, stride_oh, stride_od,
                    B, H, N_Q, num_splits,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr):
    """One program per (b, i, h) row: merge the partial outputs through their log-sum-exps."""
    pid = tl.cast(tl.program_id(0), tl.int64)
    off_h = pid % H
    off_i = (pid // H) % N_Q
    off_b = pid // (H * N_Q)
    offs_s = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    s_ok = offs_s < num_splits
    lse_s = tl.load(LsePart + ((offs_s * B + off_b) * H + off_h) * N_Q + off_i, mask=s_ok, other=float("-inf"))
    m = tl.max(lse_s, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse_s - m_safe)  # 0 for empty splits
    total = tl.sum(w, 0)
    o_s = tl.load(OPart + (((offs_s * B + off_b) * N_Q + off_i) * H + off_h)[:, None] * HEAD_DIM_PAD
                  + offs_d[None, :], mask=s_ok[:, None], other=0.0)
    o = tl.sum(o_s * w[:, None], 0) / tl.where(total > 0.0, total, 1.0)
    lse = tl.where(total > 0.0, m_safe + tl.log(tl.where(total > 0.0, total, 1.0)), float("-inf"))
    tl.store(Out + off_b * stride_ob + off_i * stride_om + off_h * stride_oh + offs_d * stride_od,
             o.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM)
    tl.store(Lse + (off_b * H + off_h) * N_Q + off_i, lse)


@functools.lru_cache(maxsize=None)
def sm_count(device: torch.device) -> int:
    """The device's SM count (read once per device: torch's property query costs ~9 us of host time a call)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_SM_COUNT


def decode_block_sizes(head_dim: int, rows: int, device: torch.device) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for `rows` = GROUP x Nq stacked query rows."""
    block_m = min(max(16, next_power_of_2(rows)), 64)
    block_n = 64 if padded_head_dim(head_dim) > 128 or device.type != "cuda" else 128
    return block_m, block_n, 4, 2 if padded_head_dim(head_dim) > 128 else 3


def choose_num_splits(batch: int, kv_heads: int, m_blocks: int, max_keys: int, device: torch.device,
                      block_n: int, *, paged: bool = False) -> int:
    """A power of two of key splits, within the caps: no split shorter than MIN_KEYS_PER_SPLIT keys or
    one key tile, and at most MAX_SPLITS (the cap rounded down to a power of two).

    A dense cache takes the largest count whose programs (batch x KV heads x query blocks x splits)
    fit in one wave over the SMs, at least 1. A paged cache takes the smallest count reaching two
    waves: its page-table lookups add latency that only more programs in flight hide. On the H200,
    over every decode cell with 8k keys or more, each was the fastest count of its layout, where the
    other layout's count ran up to 1.37x (dense) and 1.6x (paged) slower
    (notes/round17b/decode_wave_probe_f0db4f3_h200.csv, notes/perf.md v18). Powers of two divide
    the key tiles of a long cache evenly (notes/decode_split_rule_h200.csv)."""
    programs = max(batch * kv_heads * m_blocks, 1)
    sms = sm_count(device)
    if paged:
        want = next_power_of_2(cdiv(2 * sms, programs))
    else:
        fit = max(sms // programs, 1)
        want = 1 << (fit.bit_length() - 1)
    cap = max(1, min(max_keys // MIN_KEYS_PER_SPLIT, cdiv(max(max_keys, 1), block_n), MAX_SPLITS))
    cap = 1 << (cap.bit_length() - 1)
    return int(min(want, cap))


def launch_shape(batch: int, rows: int, kv_heads: int, head_dim: int, max_keys: int, device: torch.device,
                 num_splits: int = 0, *, paged: bool = False) -> tuple[int, int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages, query blocks, splits) of a decode launch over `rows` =
    GROUP x Nq stacked query rows per KV head, from a dense or a paged cache; num_splits 0 = choose."""
    block_m, block_n, num_warps, num_stages = decode_block_sizes(head_dim, rows, device)
    m_blocks = cdiv(rows, block_m)
    if num_splits <= 0:
        num_splits = choose_num_splits(batch, kv_heads, m_blocks, max_keys, device, block_n, paged=paged)
    return block_m, block_n, num_warps, num_stages, m_blocks, int(min(num_splits, MAX_SPLITS))


def decode_forward(q, k_cache, v_cache, seqlens_k, leftpad, batch_idx, block_table, alibi, softmax_scale,
                   causal, window, softcap, num_splits, max_keys):
    """Launch the split-KV kernels. Inputs are validated by the caller (kernels.kvcache).

    q (B, Nq, H, D); k_cache/v_cache (B_cache, Ncache, Hkv, D) dense or (pages, page, Hkv, D) paged
    with block_table (B, max_pages) int32; seqlens_k (B,) int32: keys per sequence after the
    append; leftpad (B,) int32 or None; batch_idx (B,) int32 or None; alibi (B, H) float32 or
    None; window (left, right) with -1 for no limit; num_splits 0 = choose; max_keys: the longest
    visible key range (host int, for the split choice). Returns out (B, Nq, H, D) like q and
    lse (B, H, Nq) float32, natural log.
    """
    batch, n_q, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    paged = block_table is not None
    out = torch.empty((batch, n_q, heads, head_dim), device=q.device, dtype=q.dtype)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    head_dim_pad = padded_head_dim(head_dim)
    block_m, block_n, num_warps, num_stages, m_blocks, num_splits = launch_shape(
        batch, group * n_q, kv_heads, head_dim, max_keys, q.device, num_splits, paged=paged)
    if num_splits > 1:
        o_part = torch.empty((num_splits, batch, n_q, heads, head_dim_pad), device=q.device, dtype=torch.float32)
        lse_part = torch.empty((num_splits, batch, heads, n_q), device=q.device, dtype=torch.float32)
    else:
        o_part = lse_part = lse  # unused
    dummy = seqlens_k
    left, right = window
    if causal:
        right = 0
    launch_kernel(_decode_fwd, (m_blocks * batch * kv_heads, num_splits),
        q, k_cache, v_cache, out, lse, o_part, lse_part,
        seqlens_k, leftpad if leftpad is not None else dummy, batch_idx if batch_idx is not None else dummy,
        block_table if paged else dummy, alibi if alibi is not None else lse,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *out.stride(),
        block_table.stride(0) if paged else 0, alibi.stride(0) if alibi is not None else 0,
        batch, kv_heads, n_q, float(softmax_scale), float(softcap), max(left, 0), max(right, 0),
        GROUP=group, HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, BLOCK_M=block_m, BLOCK_N=block_n,
        PAGE_SIZE=k_cache.shape[1] if paged else 1, PAGED=paged, HAS_BATCH_IDX=batch_idx is not None,
        HAS_LEFTPAD=leftpad is not None, CAUSAL=bool(causal), LOCAL_LEFT=left >= 0, LOCAL_RIGHT=right >= 0,
        SOFTCAP=softcap > 0, ALIBI=alibi is not None, NUM_SPLITS=num_splits,
        num_warps=num_warps, num_stages=num_stages)
    if num_splits > 1:
        launch_kernel(_decode_combine, (batch * n_q * heads,),
            o_part, lse_part, out, lse, *out.stride(), batch, heads, n_q, num_splits,
            HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, SPLITS_PAD=max(16, next_power_of_2(num_splits)),
            num_warps=4)
    return out, lse, num_splits
