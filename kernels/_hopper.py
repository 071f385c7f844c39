"""The Hopper (sm_90) forward: TMA loads, a warp-specialised producer and asynchronous wgmma.

The portable kernels (`_forward.py`) load tiles through pointers and leave the overlap of memory
and arithmetic to Triton's software pipeliner. This forward is written in Triton's Gluon dialect
(`triton.experimental.gluon`), which exposes Hopper's pieces directly, in the manner of
FlashAttention-3:

- one producer warp streams K and V tiles by TMA (the bulk tensor copy engine) into a ring of
  `STAGES` shared-memory slots, each guarded by a "ready" and an "empty" mbarrier;
- the consumer partition (two warpgroups, 64 query rows each, 128 rows a program) runs
  S = Q K^T and O += P V as asynchronous warpgroup MMAs, with P passed from registers;
- with `OVERLAP`, the consumers issue S_{j+1} = Q K_{j+1}^T and O += P_j V_j back to back and
  compute the softmax of S_{j+1} while P_j V_j is still running on the tensor cores
  (FlashAttention-3's intra-warpgroup pipelining);
- causal programs are launched longest first (the query blocks nearest the end of the sequence
  have the most keys).

It covers float16 and bfloat16, head dims 64, 96, 128, 192 and 256, any sequence lengths (causal
with seqlen_q <= seqlen_k, aligned bottom-right as flash-attn does), grouped-query attention, and the
(B, H, N, D) layout with N rows of one head contiguous; and three of the training features, with
the portable kernels' meaning (kernels/_features.py): a sliding window (each program loads only the
key tiles its rows' windows reach, and masks only the tiles at the window's edges), softcap (the
hardware's tanh) and ALiBi. Head dims 96 and 192 are computed in the
tiles of 128 and 256 (`kernels.tiles.padded_head_dim`): the TMA boxes reach past the head's last
column, the copy engine fills those columns with zeros, so Q K^T sums zeros there and P V fills
columns that are not stored. `hopper_unsupported` names what a call needs beyond that;
`kernels.attention` raises NotImplementedError with it. The output and the
log-sum-exp follow the portable forward's conventions, so the portable backward runs unchanged
after it. Nothing here runs on Triton's interpreter: the kernel needs an sm_90 GPU.
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels._launch import cdiv, launch_keyed, row_descriptor
from kernels.tiles import padded_head_dim

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
HEAD_DIMS = (64, 96, 128, 192, 256)
# The training features (flash_attention's argument names) this forward has, and at which head dims
FEATURES = ("window_size", "softcap", "alibi_slopes")
FEATURE_HEAD_DIMS = HEAD_DIMS
HALF_M = 64  # query rows of one consumer warpgroup; a program holds two
BLOCK_M = 2 * HALF_M
CONSUMER_WARPS = 4  # one warpgroup: the default partition, and the second consumer
TOTAL_WARPS = 12  # two consumer warpgroups and the producer's warp, which takes a warpgroup's registers
MAX_REGS = 168  # per thread at launch: 65536 registers over 3 x 4 warps, rounded down to 8
# Read inside the kernels (module-level constants a Gluon kernel sees must be constexprs):
_LN2 = gl.constexpr(LN2)
_LOG2E = gl.constexpr(LOG2E)
_CONSUMER_WARPS = gl.constexpr(CONSUMER_WARPS)
_CONSUMER_REGS = gl.constexpr(240)  # then setmaxnreg: 2 x 128 threads x 240 + 128 x 24 <= 65536
_PRODUCER_REGS = gl.constexpr(24)  # the producer only computes coordinates


# (BLOCK_N, STAGES) per padded head dim: the K/V ring must fit beside Q in 227 KB of shared memory
# (at 256: Q 64 KB and two stages of 64-key K and V tiles, 128 KB; the consumers' O accumulator takes
# 128 of their 240 registers).
_CONFIGS = {64: (128, 3), 128: (128, 2), 256: (64, 2)}


def default_config(head_dim: int) -> tuple[int, int]:
    """(BLOCK_N, STAGES) of the forward at this head dim."""
    return _CONFIGS[padded_head_dim(head_dim)]


def hopper_unsupported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       head_dims: tuple[int, ...] = HEAD_DIMS, window_right: int = -1,
                       alibi: bool = False) -> list[str]:
    """What this call needs that the Hopper forward (or a Hopper kernel covering `head_dims`) lacks
    (empty: it can run). `window_right`: the window's right bound (-1: none; causal is 0), under
    which every query must see a key; `alibi`: ALiBi's distances are exact in float32 below 2^24."""
    missing = []
    right = 0 if causal else window_right
    if not (q.is_cuda and _capability(q.device.index) == (9, 0)):
        missing.append("a compute capability 9.0 (Hopper) GPU")
    if q.dtype not in (torch.float16, torch.bfloat16):
        missing.append(f"dtype {q.dtype} (float16 and bfloat16 only)")
    if q.shape[-1] not in head_dims:
        missing.append(f"head dim {q.shape[-1]} ({spoken(head_dims)} only)")
    if causal and q.shape[2] > k.shape[2]:
        missing.append("causal attention with seqlen_q > seqlen_k")
    elif right >= 0 and q.shape[2] > k.shape[2] + right:
        missing.append("a window whose first queries see no key (seqlen_q > seqlen_k + window_size[1])")
    if alibi and max(q.shape[2], k.shape[2]) >= 2 ** 24:
        missing.append("ALiBi with 2^24 or more queries or keys")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not _rows_flatten(t):
            missing.append(f"{name}'s strides {tuple(t.stride())} ((B, H, N, D) with each head's rows contiguous, "
                           "16-byte aligned)")
    return missing


def spoken(head_dims: tuple[int, ...]) -> str:
    """(64, 96, 128) -> "64, 96 and 128"."""
    return ", ".join(map(str, head_dims[:-1])) + f" and {head_dims[-1]}" if len(head_dims) > 1 else str(head_dims[0])


@functools.lru_cache(maxsize=None)
def _capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


def _rows_flatten(t: torch.Tensor) -> bool:
    """True if the (B, H, N, D) tensor is one (B*H*N, D) matrix that TMA can address. Under
    torch.compile an address is not known while tracing: the alignment is left to `aligned`."""
    b, h, n, d = t.shape
    sb, sh, sn, sd = t.stride()
    return (sd == 1 and sn == d and (sh == n * d or h == 1) and (sb == h * n * d or b == 1)
            and (torch.compiler.is_compiling() or t.data_ptr() % 16 == 0))


def aligned(t: torch.Tensor) -> torch.Tensor:
    """t, or a copy of it where its address is not 16-byte aligned (TMA reads aligned addresses only;
    eager calls never reach here with one, compiled graphs may)."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
              q_row, kv_row, n_tiles, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """One warp: both consumers' Q tiles once, then K and V tile by tile into the ring, each slot
    refilled once both consumers have released it."""
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_row + q_desc.block_type.shape[0], 0], q_bar, q_smem.index(1))
    for i in range(n_tiles):
        slot = i % STAGES
        phase = (i // STAGES) & 1
        row = kv_row + i * BLOCK_N
        mbarrier.wait(k_empty.index(slot), phase ^ 1)  # a fresh barrier passes the wait on phase 1
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, 0], v_ready.index(slot), v_smem.index(slot))


@gluon.jit
def _masked(s, i, rows, cols, mask_from, N_K, causal_offset, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Scores of key tile i with the invisible entries at -inf (only tiles from mask_from on
    hold any: past the last key, or above the causal diagonal)."""
    start = i * BLOCK_N
    if start + BLOCK_N > mask_from:
        key = gl.expand_dims(start + cols, 0)
        visible = key < N_K
        if CAUSAL:
            visible = visible & (key <= gl.expand_dims(rows, 1) + causal_offset)
        s = gl.where(visible, s, float("-inf"))
    return s


@gluon.jit
def _masked_window(s, i, rows, cols, full_from, mask_from, N_K, causal_offset, win_left, win_right,
                   BLOCK_N: gl.constexpr):
    """Scores of key tile i under a sliding window (query r sees keys r + Nk - Nq - win_left ..
    r + Nk - Nq + win_right): only tiles starting before full_from (left of some row's window) or
    reaching past mask_from (right of some row's window, or past the last key) hold invisible entries."""
    start = i * BLOCK_N
    if (start < full_from) | (start + BLOCK_N > mask_from):
        key = gl.expand_dims(start + cols, 0)
        diag = gl.expand_dims(rows, 1) + causal_offset
        visible = (key < N_K) & (key >= diag - win_left) & (key <= diag + win_right)
        s = gl.where(visible, s, float("-inf"))
    return s


@gluon.jit
def _scores(s, i, rows, cols, mask_from, full_from, N_K, causal_offset, qk_scale, win_left, win_right,
            softcap_scale, softcap_log2, slope_log2, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
            WINDOW: gl.constexpr, SOFTCAP: gl.constexpr, ALIBI: gl.constexpr):
    """Key tile i's raw products q.k as the online softmax takes them, invisible entries at -inf.
    Without softcap and ALiBi they stay raw (the softmax scales them by qk_scale); with either they
    become log2-domain scores (kernels/_features.py's transform: softcap * tanh(scale * q.k /
    softcap), then -slope * |r + Nk - Nq - j|) and the softmax takes them at scale 1."""
    if SOFTCAP:
        # the hardware's tanh, as the portable kernels use on a GPU (relative error <= 2^-10.99)
        t = gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [s * softcap_scale], dtype=gl.float32,
                                      is_pure=True, pack=1)
        s = t * softcap_log2
    elif ALIBI:
        s = s * qk_scale
    if ALIBI:
        # the distance in float32 from the row and column indices (exact below 2^24), converted once
        # per row and per column rather than per entry: the integer form spills beside a window
        key = (i * BLOCK_N + cols).to(gl.float32)
        diag = (rows + causal_offset).to(gl.float32)
        s = s - slope_log2 * gl.abs(gl.expand_dims(diag, 1) - gl.expand_dims(key, 0))
    if WINDOW:
        s = _masked_window(s, i, rows, cols, full_from, mask_from, N_K, causal_offset, win_left, win_right, BLOCK_N)
    else:
        s = _masked(s, i, rows, cols, mask_from, N_K, causal_offset, BLOCK_N, CAUSAL)
    return s


@gluon.jit
def _online_softmax(s, m_i, l_i, qk_scale, GUARD: gl.constexpr = False):
    """One key tile's step of the online softmax (log2 domain): its probabilities, the factor that
    rescales what was accumulated before, and the new running max and row sums. GUARD: a row may
    have seen no visible key yet (a sliding window's first tiles); its max stays -inf and it
    subtracts 0 instead, so its probabilities and rescale factor are 0, not NaN."""
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    if GUARD:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))
    alpha = gl.exp2(m_i - m_use)
    return p, alpha, m_new, l_i * alpha + gl.sum(p, axis=1)


@gluon.jit
def _consumer(q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
              block_row, out_block_row, n_total, first_tile, N_Q, N_K, qk_scale, win_left, win_right,
              softcap_scale, softcap_log2, slope_log2, WHICH: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, OUT_DIM: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, SOFTCAP: gl.constexpr,
              ALIBI: gl.constexpr, OVERLAP: gl.constexpr, num_warps: gl.constexpr):
    """One warpgroup, query rows [block_row + WHICH * BLOCK_M, + BLOCK_M): the online softmax over
    the key tiles it can see, then O / l and the lse. It releases every slot the producer fills,
    also those of tiles outside its own causal or window bounds. HEAD_DIM is the tiles' head dim,
    OUT_DIM the output's (its first OUT_DIM columns are stored). The ring's tile t holds key tile
    first_tile + t (first_tile is 0 but under a window)."""
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    q_tile = q_smem.index(WHICH)
    row0 = block_row + WHICH * BLOCK_M
    rows = row0 + gl.arange(0, BLOCK_M, layout=row_layout)
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    causal_offset = N_K - N_Q  # bottom-right: query i sees keys j <= i + N_K - N_Q
    if WINDOW:
        # This warpgroup's ring tiles [t0, n_tiles), from its first and last query rows (clamped to
        # the last query, which sees at least one key: hopper_unsupported refuses calls where a
        # query would see none); tiles before full_from or past mask_from hold invisible entries.
        first = gl.minimum(row0, N_Q - 1) + causal_offset
        last = gl.minimum(row0 + BLOCK_M - 1, N_Q - 1) + causal_offset
        base = first_tile
        t0 = gl.maximum(first - win_left, 0) // BLOCK_N - base
        n_tiles = gl.cdiv(gl.minimum(last + win_right + 1, N_K), BLOCK_N) - base
        full_from = last - win_left
        mask_from = gl.minimum(first + win_right + 1, N_K)
        for i in range(0, t0):  # the other consumer's first tiles: release them unread
            slot = i % STAGES
            phase = (i // STAGES) & 1
            mbarrier.wait(k_ready.index(slot), phase)
            mbarrier.arrive(k_empty.index(slot), count=1)
            mbarrier.wait(v_ready.index(slot), phase)
            mbarrier.arrive(v_empty.index(slot), count=1)
    else:
        base = 0
        t0 = 0
        full_from = 0
        if CAUSAL:
            n_tiles = gl.cdiv(gl.minimum(N_K, row0 + BLOCK_M + causal_offset), BLOCK_N)
            mask_from = gl.minimum(N_K, row0 + causal_offset + 1)  # the first row's first invisible key
        else:
            n_tiles = n_total
            mask_from = N_K
    if SOFTCAP or ALIBI:
        sm_scale = 1.0  # _scores returns log2-domain scores
    else:
        sm_scale = qk_scale

    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
    mbarrier.wait(q_bar, 0)

    if OVERLAP:
        # The first tile: its scores and probabilities, before the pipelined loop.
        slot = t0 % STAGES
        mbarrier.wait(k_ready.index(slot), (t0 // STAGES) & 1)
        s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=[s])
        mbarrier.arrive(k_empty.index(slot), count=1)
        s = _scores(s, base + t0, rows, cols, mask_from, full_from, N_K, causal_offset, qk_scale, win_left, win_right,
                    softcap_scale, softcap_log2, slope_log2, BLOCK_N, CAUSAL, WINDOW, SOFTCAP, ALIBI)
        if WINDOW:  # a row may see no key of its first tile
            p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, sm_scale, True)
        else:
            m_i = gl.max(s, axis=1) * sm_scale
            p = gl.exp2(s * sm_scale - gl.expand_dims(m_i, 1))
            l_i = gl.sum(p, axis=1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        for i in range(t0 + 1, n_tiles):
            slot = i % STAGES
            prev = (i - 1) % STAGES
            mbarrier.wait(k_ready.index(slot), (i // STAGES) & 1)
            s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(prev), ((i - 1) // STAGES) & 1)
            acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=[s])  # S_i is done; P_{i-1} V_{i-1} may still run
            mbarrier.arrive(k_empty.index(slot), count=1)
            s = _scores(s, base + i, rows, cols, mask_from, full_from, N_K, causal_offset, qk_scale, win_left,
                        win_right, softcap_scale, softcap_log2, slope_log2, BLOCK_N, CAUSAL, WINDOW, SOFTCAP, ALIBI)
            p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, sm_scale, WINDOW)
            acc, p_op = warpgroup_mma_wait(0, deps=[acc, p_op])
            mbarrier.arrive(v_empty.index(prev), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
        last = (n_tiles - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
        acc = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
        acc, p_op = warpgroup_mma_wait(0, deps=[acc, p_op])
        mbarrier.arrive(v_empty.index(last), count=1)
    else:
        for i in range(t0, n_tiles):
            slot = i % STAGES
            phase = (i // STAGES) & 1
            mbarrier.wait(k_ready.index(slot), phase)
            s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=[s])
            mbarrier.arrive(k_empty.index(slot), count=1)
            s = _scores(s, base + i, rows, cols, mask_from, full_from, N_K, causal_offset, qk_scale, win_left,
                        win_right, softcap_scale, softcap_log2, slope_log2, BLOCK_N, CAUSAL, WINDOW, SOFTCAP, ALIBI)
            p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, sm_scale, WINDOW)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(slot), phase)
            acc = warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)
            acc, p_op = warpgroup_mma_wait(0, deps=[acc, p_op])
            mbarrier.arrive(v_empty.index(slot), count=1)
    for i in range(n_tiles, n_total):  # the other consumer's tiles: release them unread
        slot = i % STAGES
        phase = (i // STAGES) & 1
        mbarrier.wait(k_ready.index(slot), phase)
        mbarrier.arrive(k_empty.index(slot), count=1)
        mbarrier.wait(v_ready.index(slot), phase)
        mbarrier.arrive(v_empty.index(slot), count=1)

    # Epilogue: O / l, and lse = ln(sum exp(scaled scores)) (m is in the log2 domain).
    o_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    o_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    inv_l = gl.convert_layout(1.0 / l_i, gl.SliceLayout(1, o_layout))
    o = (acc * gl.expand_dims(inv_l, 1)).to(dtype)
    out_row = out_block_row + WHICH * BLOCK_M
    in_rows = gl.expand_dims(row0 + o_rows < N_Q, 1) & gl.expand_dims(o_cols < OUT_DIM, 0)  # (rows, cols) shape
    offsets = (out_row + gl.expand_dims(o_rows, 1)).to(gl.int64) * OUT_DIM + gl.expand_dims(o_cols, 0)
    gl.store(Out + offsets, o, mask=in_rows)
    lse = (m_i + gl.log2(l_i)) * _LN2
    gl.store(Lse + (out_row + gl.arange(0, BLOCK_M, layout=row_layout)).to(gl.int64), lse, mask=rows < N_Q)


@gluon.jit(do_not_specialize=["stride_az", "stride_ah", "win_left", "win_right"],
           do_not_specialize_on_alignment=["Alibi"])
def _hopper_fwd(q_desc, k_desc, v_desc, Out, Lse, N_Q, N_K, HEADS, GROUP, qk_scale,
                Alibi, stride_az, stride_ah, win_left, win_right, softcap_scale, softcap_log2,
                BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, OUT_DIM: gl.constexpr, STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, WINDOW: gl.constexpr, SOFTCAP: gl.constexpr, ALIBI: gl.constexpr,
                OVERLAP: gl.constexpr, num_warps: gl.constexpr):
    """A program: 2 x HALF query rows of one (batch, head); warps: consumer 0 (the default
    partition), consumer 1 and the producer. The feature arguments are those of the portable
    kernels (kernels/options.py, `kernel_args`); the window's and ALiBi's integers are not
    specialised on, so one compiled kernel serves every window and slopes tensor."""
    HALF: gl.constexpr = q_desc.block_type.shape[0]
    pid_m = gl.program_id(0)
    if CAUSAL:  # longest first: the last query blocks see the most keys
        pid_m = gl.num_programs(0) - 1 - pid_m
    off_hz = gl.program_id(1)
    kv_head = (off_hz // HEADS) * (HEADS // GROUP) + (off_hz % HEADS) // GROUP
    block_row = pid_m * 2 * HALF
    q_row = off_hz * N_Q + block_row
    kv_row = kv_head * N_K
    if WINDOW:  # the key tiles some row of the program sees (hopper_unsupported: every query sees one)
        first_tile = gl.maximum(gl.minimum(block_row, N_Q - 1) + N_K - N_Q - win_left, 0) // BLOCK_N
        last_row = gl.minimum(block_row + 2 * HALF - 1, N_Q - 1)
        n_total = gl.cdiv(gl.minimum(last_row + N_K - N_Q + win_right + 1, N_K), BLOCK_N) - first_tile
        kv_row = kv_row + first_tile * BLOCK_N
    else:
        first_tile = 0
        if CAUSAL:
            n_total = gl.cdiv(gl.minimum(N_K, block_row + 2 * HALF + N_K - N_Q), BLOCK_N)
        else:
            n_total = gl.cdiv(N_K, BLOCK_N)
    if ALIBI:
        slope_log2 = gl.load(Alibi + (off_hz // HEADS) * stride_az + (off_hz % HEADS) * stride_ah).to(gl.float32)
        slope_log2 = slope_log2 * _LOG2E
    else:
        slope_log2 = 0.0

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # both consumers release a slot
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(v_empty.index(i), count=2)

    gl.warp_specialize([
        (_consumer, (q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                     block_row, q_row, n_total, first_tile, N_Q, N_K, qk_scale, win_left, win_right,
                     softcap_scale, softcap_log2, slope_log2, 0, HALF, BLOCK_N, HEAD_DIM, OUT_DIM, STAGES,
                     CAUSAL, WINDOW, SOFTCAP, ALIBI, OVERLAP, num_warps)),
        (_consumer, (q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                     block_row, q_row, n_total, first_tile, N_Q, N_K, qk_scale, win_left, win_right,
                     softcap_scale, softcap_log2, slope_log2, 1, HALF, BLOCK_N, HEAD_DIM, OUT_DIM, STAGES,
                     CAUSAL, WINDOW, SOFTCAP, ALIBI, OVERLAP, num_warps)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                     q_row, kv_row, n_total, BLOCK_N, STAGES)),
    ], [_CONSUMER_WARPS, 1], [_CONSUMER_REGS, _PRODUCER_REGS])


def _descriptor(t: torch.Tensor, block_rows: int, block_cols: int | None = None) -> TensorDescriptor:
    """t as one (B*H*N, D) matrix, in blocks of block_rows x block_cols (D by default; wider blocks
    read zeros past column D)."""
    b, h, n, d = t.shape
    block_cols = block_cols or d
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_cols], gl.float16 if t.dtype == torch.float16
                                                  else gl.bfloat16)
    return TensorDescriptor(t, [b * h * n, d], [d, 1], [block_rows, block_cols], layout)


def _features(n_q: int, n_k: int, softmax_scale: float, causal: bool, window_size: tuple[int, int], softcap: float,
              alibi_slopes: torch.Tensor | None, dummy: torch.Tensor) -> tuple[tuple, tuple]:
    """The feature arguments of a launch after the scale (Alibi, its strides, the window, the softcap's
    two factors) and the switches (CAUSAL, WINDOW, SOFTCAP, ALIBI), from
    `AttentionOptions.kernel_args`, as the portable kernels take them; a plain call skips building options."""
    if window_size == (-1, -1) and not softcap and alibi_slopes is None:
        return (dummy, 0, 0, 0, 0, 0.0, 0.0), (bool(causal), False, False, False)
    from kernels.options import AttentionOptions

    opts = AttentionOptions(softmax_scale=softmax_scale, causal=bool(causal), window_left=window_size[0],
                            window_right=window_size[1], softcap=float(softcap))
    f = opts.kernel_args(n_q, n_k, alibi_slopes, None, dummy)
    return ((f["Alibi"], f["stride_az"], f["stride_ah"], f["win_left"], f["win_right"], f["softcap_scale"],
             f["softcap_log2"]), (f["CAUSAL"], f["WINDOW"], f["SOFTCAP"], f["ALIBI"]))


def kernel_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                softmax_scale: float, causal: bool, overlap: bool = True, block_n: int | None = None,
                stages: int | None = None, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                alibi_slopes: torch.Tensor | None = None) -> tuple[tuple, dict]:
    """The positional and keyword arguments of one `_hopper_fwd` launch through Triton's JIT
    (tests/hopper_compile.py compiles from them too); `alibi_slopes` is the (B, H) float32 view
    kernels.attention makes."""
    scalars, constants = _launch_values(q, k, softmax_scale, causal, overlap, block_n, stages, window_size, softcap,
                                        alibi_slopes, lse)
    block_n, tile_dim = constants[0], constants[1]
    args = (_descriptor(q, HALF_M, tile_dim), _descriptor(k, block_n, tile_dim), _descriptor(v, block_n, tile_dim),
            out, lse, *scalars)
    return args, dict(zip(_CONSTANTS, constants))


_CONSTANTS = ("BLOCK_N", "HEAD_DIM", "OUT_DIM", "STAGES", "CAUSAL", "WINDOW", "SOFTCAP", "ALIBI", "OVERLAP",
              "num_warps")


def _launch_values(q, k, softmax_scale, causal, overlap, block_n, stages, window_size, softcap, alibi_slopes,
                   dummy) -> tuple[tuple, tuple]:
    """(the scalar and feature arguments after Out and Lse, the compile-time constants in _CONSTANTS' order).
    A call without features (the common one, whose host time the short sequences pay) reads them from a cache."""
    _, heads, n_q, head_dim = q.shape
    if window_size == (-1, -1) and not softcap and alibi_slopes is None:
        before, after, constants = _plain_launch_values(n_q, heads, head_dim, k.shape[1], k.shape[2], softmax_scale,
                                                        causal, overlap, block_n, stages)
        return before + (dummy,) + after, constants
    kv_heads, n_k = k.shape[1], k.shape[2]
    default_n, default_stages = default_config(head_dim)
    feature_args, switches = _features(n_q, n_k, softmax_scale, causal, window_size, softcap, alibi_slopes, dummy)
    scalars = (n_q, n_k, heads, heads // kv_heads, softmax_scale * LOG2E, *feature_args)
    constants = (block_n or default_n, padded_head_dim(head_dim), head_dim, stages or default_stages, *switches,
                 bool(overlap), CONSUMER_WARPS)
    return scalars, constants


@functools.lru_cache(maxsize=1024)
def _plain_launch_values(n_q, heads, head_dim, kv_heads, n_k, softmax_scale, causal, overlap, block_n,
                         stages) -> tuple[tuple, tuple, tuple]:
    """`_launch_values` without features: the scalars before and after the (unused) ALiBi pointer, and the
    constants."""
    default_n, default_stages = default_config(head_dim)
    before = (n_q, n_k, heads, heads // kv_heads, softmax_scale * LOG2E)
    after = (0, 0, 0, 0, 0.0, 0.0)
    constants = (block_n or default_n, padded_head_dim(head_dim), head_dim, stages or default_stages, bool(causal),
                 False, False, False, bool(overlap), CONSUMER_WARPS)
    return before, after, constants


def hopper_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
                   overlap: bool = True, block_n: int | None = None, stages: int | None = None,
                   window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                   alibi_slopes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, H, Nq, D) contiguous like q's dtype, lse (B, H, Nq) float32, natural log).

    `window_size`, `softcap` and `alibi_slopes` (a (B, H) float32 view) as flash_attention takes
    them. The caller checks `hopper_unsupported` first (kernels.attention does). The first call of a
    shape goes through Triton's JIT; later ones launch the kept compiled kernel directly
    (`kernels._launch.launch_keyed`: the key holds the dtype, both shapes and every constant; the
    window's and ALiBi's integers are not specialised on)."""
    batch, heads, n_q, head_dim = q.shape
    q, k, v = aligned(q), aligned(k), aligned(v)
    out = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=q.dtype)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    scalars, constants = _launch_values(q, k, softmax_scale, causal, overlap, block_n, stages, window_size, softcap,
                                        alibi_slopes, lse)
    grid = (cdiv(n_q, BLOCK_M), batch * heads)

    def jit_launch():
        block_n, tile_dim = constants[0], constants[1]
        return _hopper_fwd[grid](_descriptor(q, HALF_M, tile_dim), _descriptor(k, block_n, tile_dim),
                                 _descriptor(v, block_n, tile_dim), out, lse, *scalars,
                                 **dict(zip(_CONSTANTS, constants)), maxnreg=MAX_REGS)

    launch_keyed(("hopper_fwd", q.dtype, tuple(q.shape), tuple(k.shape), constants), grid,
                 lambda: (row_descriptor(q), row_descriptor(k), row_descriptor(v), out, lse, *scalars, *constants),
                 jit_launch)
    return out, lse
