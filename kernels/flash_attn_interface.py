"""flash-attn 2.8's public functions, backed by this engine's kernels.

    from kernels import flash_attn_func, flash_attn_varlen_func
    out = flash_attn_func(q, k, v, 0.0, causal=True)            # (B, N, H, D), as flash-attn
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)

The six functions keep flash-attn's parameter names, order and defaults exactly (as in
Dao-AILab/flash-attention, flash_attn/flash_attn_interface.py, 2.8 series), so a call written
for flash-attn, positional or by keyword, means the same thing here. `dropout_p` is the fourth
parameter of `flash_attn_func`: `flash_attn_func(q, k, v, 0.0, causal=True)` is causal attention
with the default scale.

Layouts are flash-attn's: dense q (B, Nq, H, D), k/v (B, Nk, Hkv, D), packed qkv
(B, N, 3, H, D), packed kv (B, Nk, 2, Hkv, D); varlen tensors stack the sequences' tokens,
q (total_q, H, D), k/v (total_k, Hkv, D), with int32 offsets cu_seqlens (B + 1,). The dense
functions run the kernels on transposed views, without copies. Causal masks are aligned to the
bottom-right corner (per sequence for varlen); query rows that see no key give zeros.

Training features, in the kernels forward and backward, with flash-attn's semantics:
- dropout_p: Philox dropout; each call draws a fresh seed from torch's default generator of the
  inputs' device (torch.manual_seed reproduces it); varlen sequences get independent masks
  (the sequence index is the batch index of the Philox counters).
- window_size=(left, right): query i sees key j iff i + Nk - Nq - left <= j <= i + Nk - Nq +
  right, -1 (or any negative bound) unbounded; causal=True sets right = 0. As flash-attn's C++
  does, a bound of at least seqlen_k (max_seqlen_k for varlen) counts as -1. The bounds may be
  ints or 0-dim integer tensors.
- softcap > 0: scores = softcap * tanh(scale * q.k / softcap), then the softmax; 0 or less is
  off. As in flash-attn, softcap together with dropout is refused.
- alibi_slopes: float32 (H,) or (B, H); adds -slope * |i + Nk - Nq - j| to the scores (varlen:
  sequence b uses row b of (B, H) slopes).
- deterministic: True gives a bitwise-reproducible backward (the portable one: dQ has its own
  kernel). False, the default as in flash-attn, lets `kernels.flash_attention`'s default pick the
  one-pass Hopper backward on sm_90 where it covers the call (inputs whose heads' rows are
  contiguous: with this API's (B, N, H, D) layout, one head), whose dQ additions land in any order.
- block_table (flash_attn_varlen_func): a paged K/V cache, gathered into a packed copy before
  the kernels run (see the function's docstring).

Differences from flash-attn that a caller may notice:
- Bad input raises `kernels.InputError` naming the problem: a RuntimeError, as flash-attn's
  C++ checks raise, and a ValueError, as `kernels.flash_attention` raises. Inputs flash-attn
  quietly copies (a last dim that is not contiguous) are read in place here.
- `return_attn_probs=True` returns (out, softmax_lse, S_dmask) like flash-attn. S_dmask is
  filled only with dropout (otherwise an empty tensor, shape (0,), as flash-attn returns): the
  softmax probabilities in float32 (flash-attn: q's dtype), 0 where masked, negated where
  dropout dropped them, so `S_dmask >= 0` is the keep mask. Its shape is (B, H, Nq, Nk) (varlen: (B, H, max_seqlen_q,
  max_seqlen_k), each sequence at the top left), not padded to multiples of 128 as flash-attn's
  is, and it holds the normalised probabilities where flash-attn's holds them relative to a
  running max. softmax_lse is float32, (B, H, Nq) for the dense functions and (H, total_q)
  for varlen, and carries no gradient; for a query row that sees no key it is +inf, as
  flash-attn's kernel writes (`kernels.flash_attention` returns -inf there).
- With causal ALiBi, flash-attn's kernel adds slope * j instead of -slope * |i + Nk - Nq - j|
  (the same softmax: the two differ by a constant per row), so its softmax_lse differs from
  ours by that constant; out and the gradients are the same.
- Varlen checks its offsets on the host: cu_seqlens must start at 0, not decrease and end at
  the number of tokens, and max_seqlen must be at least the longest sequence. A sequence with
  queries but no keys is refused, as `flash_attention` refuses seqlen_k = 0 (flash-attn gives
  such rows zeros); so is a dense call with seqlen_k = 0.
- A missing right window bound (-1, or one of at least seqlen_k) is unbounded, as flash-attn's
  docstring says; when seqlen_q > seqlen_k + 1 flash-attn's kernel instead bounds it at
  seqlen_k past the diagonal, which empties its first rows.
- Inference at short seqlen_q: when no gradient is needed, there is no dropout, and the query
  rows per K/V head (seqlen_q x heads / kv heads) are at most 64, flash_attn_func and the
  packed dense functions run on the split-KV decoding kernels of flash_attn_with_kvcache if
  those would split the keys (few rows leave the batch x heads grid short of the SMs): the
  same result within rounding, and the GPU filled (see `_split_kv_splits`).
- The varlen functions launch the kernels once per pass for the whole batch: each program
  reads its sequence's offsets from cu_seqlens. The host still reads cu_seqlens once per call
  for the checks above.
"""

import math
import numbers
import operator

import torch

from kernels._decode import choose_num_splits, decode_block_sizes, decode_forward
from kernels.attention import _check_alibi, _launch_device, check_inputs, flash_attention
from kernels._launch import cdiv
from kernels.errors import InputError

_FULL_WINDOW = (-1, -1)
# flash-attn's message, word for word (csrc/flash_attn/flash_api.cpp)
_SOFTCAP_DROPOUT = "Softcapping does not support dropout for now"


# --------------------------------------------------------------------------------------------
# Checks of the options: every argument is either used or refused.
# --------------------------------------------------------------------------------------------

def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_flag(value) -> bool:
    """A Python or NumPy bool, or the int 0 or 1 (what flash-attn's bindings take as a bool)."""
    return (isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1))
            or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")))


def _check_flag(name, value):
    if not _is_flag(value):
        raise InputError(f"{name} must be a bool, got {value!r}")


def window_pair(window_size, seqlen_k=None) -> tuple[int, int]:
    """flash-attn's window_size as (left, right) ints, -1 for unbounded: a pair of ints or of
    0-dim integer tensors (flash-attn's tests pass a tensor), any negative bound unbounded, and
    (flash-attn's C++ rule) so is a bound of at least `seqlen_k` where it is given."""
    if type(window_size) is tuple and len(window_size) == 2 and all(type(w) is int for w in window_size):
        left, right = window_size  # the common spelling, without the conversions' cost
    else:
        try:
            left, right = (operator.index(w) for w in window_size)
        except (TypeError, ValueError):
            raise InputError(f"window_size must be a pair of ints (left, right), got {window_size!r}") from None
    longest = math.inf if seqlen_k is None else seqlen_k
    return tuple(w if 0 <= w < longest else -1 for w in (left, right))


def _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs):
    """Scalar checks up front; alibi_slopes' shape and dtype are checked by flash_attention."""
    if not _is_real(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise InputError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    if softmax_scale is not None and not (_is_real(softmax_scale) and math.isfinite(softmax_scale)):
        raise InputError(f"softmax_scale must be a finite float or None, got {softmax_scale!r}")
    _check_flag("causal", causal)
    window_pair(window_size)
    if not _is_real(softcap) or not math.isfinite(softcap):
        raise InputError(f"softcap must be a finite float (0 or less: off), got {softcap!r}")
    if softcap > 0 and dropout_p > 0:
        raise InputError(_SOFTCAP_DROPOUT)
    if alibi_slopes is not None and not isinstance(alibi_slopes, torch.Tensor):
        raise InputError(f"alibi_slopes must be a torch.Tensor or None, got {type(alibi_slopes).__name__}")
    _check_flag("deterministic", deterministic)
    _check_flag("return_attn_probs", return_attn_probs)


def _features(dropout_p, window_size, softcap, alibi_slopes, deterministic, max_seqlen_k):
    """flash_attention's keyword arguments for the features, with flash-attn's rules: a window
    bound of at least (max_)seqlen_k means unbounded (-1), a softcap of 0 or less is off."""
    return dict(dropout_p=float(dropout_p), window_size=window_pair(window_size, max_seqlen_k), softcap=max(float(softcap), 0.0),
                alibi_slopes=alibi_slopes, deterministic=bool(deterministic))


def _check_rank(rank, layout, **tensors):
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise InputError(f"{name} must have rank {rank} {layout}, got shape {tuple(t.shape)}")


def _check_packed(name, t, rank, dim, count, layout):
    _check_rank(rank, layout, **{name: t})
    if t.shape[dim] != count:
        raise InputError(f"{name} must have size {count} in dim {dim} {layout}, got shape {tuple(t.shape)}")


def _result(out, lse, s_dmask, return_attn_probs):
    if not return_attn_probs:
        return out
    # flash-attn writes +inf for the lse of a row that sees no key (flash_attention: -inf).
    lse = lse.masked_fill(lse == float("-inf"), float("inf"))
    # flash-attn fills S_dmask only with dropout and otherwise returns an empty tensor.
    return out, lse, s_dmask if s_dmask is not None else out.new_empty((0,))


# --------------------------------------------------------------------------------------------
# Dense: one launch on transposed views.
# --------------------------------------------------------------------------------------------

# Split-KV for short queries: at most this many query rows (query tokens x heads per K/V head) per
# program, as in decoding; longer queries fill the GPU with query blocks already.
SPLIT_KV_MAX_ROWS = 64


def _split_kv_splits(q, k, v, dropout_p, softmax_scale) -> int:
    """How many key splits the split-KV (decoding) kernels would use for this call, or 0 where
    they do not serve it: they are forward-only, without dropout, and pay off only when few
    query rows leave the batch x heads grid short of the GPU's SMs (the choice is
    `choose_num_splits`'s, made from the shape and the SM count)."""
    if (dropout_p > 0 or (softmax_scale is not None and softmax_scale < 0)
            or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))):
        return 0  # training calls end here, before any shape is read
    # flash_attention checks its inputs itself; the split path needs them checked first
    check_inputs(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    batch, n_q, heads, head_dim = q.shape
    n_k, kv_heads = k.shape[1], k.shape[2]
    if n_q == 0 or n_k == 0:
        return 0
    rows = n_q * (heads // kv_heads)
    if rows > SPLIT_KV_MAX_ROWS:
        return 0
    block_m, block_n, _, _ = decode_block_sizes(head_dim, rows, q.device)
    splits = choose_num_splits(batch, kv_heads, cdiv(rows, block_m), n_k, q.device, block_n)
    return splits if splits > 1 else 0


def _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes,
           deterministic):
    """q (B, Nq, H, D), k/v (B, Nk, Hkv, D) -> out (B, Nq, H, D), lse (B, H, Nq); no copies.

    Without a gradient to compute, a short query over long keys (seqlen_q x heads per K/V head
    <= SPLIT_KV_MAX_ROWS) runs on the split-KV decoding kernels where they would split the keys;
    everything else on the FlashAttention-2 kernels."""
    features = _features(dropout_p, window_size, softcap, alibi_slopes, deterministic, k.shape[1])
    if q.shape[0] == 0:
        raise InputError("batch size must be positive")  # flash-attn's check and message
    splits = _split_kv_splits(q, k, v, dropout_p, softmax_scale)
    if splits:
        batch, n_k = q.shape[0], k.shape[1]
        alibi = _check_alibi(alibi_slopes, q.transpose(1, 2), batch)
        if alibi is not None and alibi.stride(1) != 1:
            alibi = alibi.contiguous()  # the split-KV kernels step over heads by 1
        scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
        seqlens_k = torch.full((batch,), n_k, device=q.device, dtype=torch.int32)
        with _launch_device(q):
            out, lse, _ = decode_forward(q, k, v, seqlens_k, None, None, None, alibi, scale, bool(causal),
                                         features["window_size"], features["softcap"], splits, n_k)
        return _result(out, lse, None, return_attn_probs)
    want_probs = bool(return_attn_probs) and dropout_p > 0
    out, lse, *probs = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=bool(causal),
                                       softmax_scale=softmax_scale, return_lse=True, return_probs=want_probs,
                                       **features)
    return _result(out.transpose(1, 2), lse, probs[0] if probs else None, return_attn_probs)


# --------------------------------------------------------------------------------------------
# Varlen: one launch per pass for the whole packed batch.
# --------------------------------------------------------------------------------------------

def _sequence_bounds(name, cu_seqlens, total, tensor_name, max_name, max_seqlen):
    """The (start, end) of each sequence, after checking the offsets against the tokens held
    (`total`; None for a paged cache, whose pages hold no count to check against)."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype != torch.int32:
        raise InputError(f"{name} must have dtype torch.int32, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise InputError(f"{name} must have shape (batch_size + 1,) with batch_size >= 1, "
                         f"got {tuple(cu_seqlens.shape)}")
    if not isinstance(max_seqlen, numbers.Integral) or isinstance(max_seqlen, bool):
        raise InputError(f"{max_name} must be an int, got {max_seqlen!r}")
    offsets = cu_seqlens.tolist()
    if offsets[0] != 0:
        raise InputError(f"{name} must start at 0, got {offsets[0]}")
    if any(end < start for start, end in zip(offsets, offsets[1:])):
        raise InputError(f"{name} must not decrease, got {offsets}")
    if total is not None and offsets[-1] != total:
        raise InputError(f"{name} ends at {offsets[-1]} but {tensor_name} holds {total} tokens")
    longest = max(end - start for start, end in zip(offsets, offsets[1:]))
    if longest > max_seqlen:
        raise InputError(f"{max_name}={max_seqlen} is less than the longest sequence in {name} ({longest})")
    return list(zip(offsets, offsets[1:]))


def _gather_pages(k_cache, v_cache, block_table, cu_seqlens_k, max_seqlen_k):
    """The packed keys and values (total_k, Hkv, D) of a paged cache: sequence b's key j is
    k_cache[block_table[b, j // page_size], j % page_size]. An indexed copy (PyTorch), so the
    gradient flows back into the cache's pages."""
    _check_rank(4, "(num_blocks, page_block_size, heads, head_dim) with a block_table", k=k_cache, v=v_cache)
    if k_cache.shape != v_cache.shape:
        raise InputError(f"k and v must have one shape, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    if not isinstance(block_table, torch.Tensor):
        raise InputError(f"block_table must be a torch.Tensor, got {type(block_table).__name__}")
    if block_table.dtype != torch.int32 or block_table.dim() != 2:
        raise InputError(f"block_table must be int32 of shape (batch_size, max_num_blocks_per_seq), got "
                         f"{block_table.dtype} {tuple(block_table.shape)}")
    if block_table.device != k_cache.device:
        raise InputError(f"block_table must be on the device of k ({k_cache.device}), got {block_table.device}")
    num_blocks, page_size = k_cache.shape[:2]
    bounds = _sequence_bounds("cu_seqlens_k", cu_seqlens_k, None, "the paged cache", "max_seqlen_k", max_seqlen_k)
    lengths = [end - start for start, end in bounds]
    if block_table.shape[0] != len(lengths):
        raise InputError(f"block_table has {block_table.shape[0]} rows for {len(lengths)} sequences")
    pages_used = [-(-n // page_size) for n in lengths]
    if max(pages_used, default=0) > block_table.shape[1]:
        raise InputError(f"a sequence of {max(lengths)} keys needs {max(pages_used)} pages of {page_size}; "
                         f"block_table has {block_table.shape[1]} per sequence")
    table = block_table.tolist()
    used = [page for row, n in zip(table, pages_used) for page in row[:n]]
    if used and not 0 <= min(used) <= max(used) < num_blocks:
        raise InputError(f"block_table holds pages outside [0, {num_blocks}): {min(used)}..{max(used)}")
    device = k_cache.device
    starts = torch.tensor([start for start, _ in bounds], device=device, dtype=torch.long)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                  torch.tensor(lengths, device=device, dtype=torch.long))
    pos = torch.arange(seq.numel(), device=device) - starts[seq]
    pages = block_table.long()[seq, pos // page_size]
    return k_cache[pages, pos % page_size], v_cache[pages, pos % page_size]


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
            return_attn_probs, dropout_p, window_size, softcap, alibi_slopes, deterministic, block_table=None):
    """q (total_q, H, D), k/v (total_k, Hkv, D) -> out (total_q, H, D), lse (H, total_q).

    One launch of the kernels per pass for the whole batch: they see q as (1, H, total_q, D)
    (a view, no copy) and read each sequence's offsets from cu_seqlens. (B, H) ALiBi slopes give
    sequence b the row b; the dropout counters take the sequence index as the batch index, so
    the masks of the sequences are independent. With dropout and return_attn_probs, S_dmask is
    (B, H, max_seqlen_q, max_seqlen_k), each sequence's block at the top left, zeros elsewhere.
    """
    if block_table is not None:  # a paged cache: gather each sequence's keys and values first
        k, v = _gather_pages(k, v, block_table, cu_seqlens_k, max_seqlen_k)
    _check_rank(3, "(total_tokens, heads, head_dim)", q=q, k=k, v=v)
    # dtype, device, heads and head dim: the dense checks on views of the whole batch
    check_inputs(q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2), v.unsqueeze(0).transpose(1, 2))
    bounds_q = _sequence_bounds("cu_seqlens_q", cu_seqlens_q, q.shape[0], "q", "max_seqlen_q", max_seqlen_q)
    bounds_k = _sequence_bounds("cu_seqlens_k", cu_seqlens_k, k.shape[0], "k", "max_seqlen_k", max_seqlen_k)
    if len(bounds_q) != len(bounds_k):
        raise InputError(f"cu_seqlens_q holds {len(bounds_q)} sequences and cu_seqlens_k {len(bounds_k)}")
    batch, heads = len(bounds_q), q.shape[1]
    if alibi_slopes is not None and alibi_slopes.dim() == 2 and tuple(alibi_slopes.shape) != (batch, heads):
        raise InputError(f"alibi_slopes must have shape (nheads,) = ({heads},) or (batch_size, nheads) = "
                         f"({batch}, {heads}), got {tuple(alibi_slopes.shape)}")
    for i, ((q0, q1), (k0, k1)) in enumerate(zip(bounds_q, bounds_k)):
        if k1 == k0 and q1 > q0:
            raise InputError(f"sequence {i} has {q1 - q0} queries but no keys")
    if cu_seqlens_k.device != q.device or cu_seqlens_q.device != q.device:
        raise InputError(f"cu_seqlens_q and cu_seqlens_k must be on the device of q ({q.device})")
    want_probs = bool(return_attn_probs) and dropout_p > 0
    features = _features(dropout_p, window_size, softcap, alibi_slopes, deterministic, max_seqlen_k)
    packed = lambda t: t.unsqueeze(0).transpose(1, 2)  # (total, H, D) -> (1, H, total, D)
    out, lse, *probs = flash_attention(packed(q), packed(k), packed(v), causal=bool(causal),
                                       softmax_scale=softmax_scale, return_lse=True, return_probs=want_probs,
                                       cu_seqlens_q=cu_seqlens_q.contiguous(), cu_seqlens_k=cu_seqlens_k.contiguous(),
                                       max_seqlen_q=int(max_seqlen_q), max_seqlen_k=int(max_seqlen_k), **features)
    return _result(out[0].transpose(0, 1), lse[0], probs[0] if probs else None, return_attn_probs)


# --------------------------------------------------------------------------------------------
# The public functions: flash-attn 2.8's signatures, parameter for parameter.
# --------------------------------------------------------------------------------------------

def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Attention of packed qkv (B, N, 3, H, D) -> out (B, N, H, D).

    q, k and v are views of qkv (no copies); the gradient arrives as one (B, N, 3, H, D) tensor.
    For grouped-query attention use flash_attn_kvpacked_func or flash_attn_func. The options and
    the return value are those of flash_attn_func.
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs)
    _check_packed("qkv", qkv, 5, 2, 3, "(batch, seqlen, 3, heads, head_dim)")
    q, k, v = qkv.unbind(2)
    return _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes,
                  deterministic)


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Attention of q (B, Nq, H, D) over packed kv (B, Nk, 2, Hkv, D) -> out (B, Nq, H, D).

    H must be a multiple of Hkv (grouped-query attention). The options and the return value are
    those of flash_attn_func.
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs)
    _check_rank(4, "(batch, seqlen, heads, head_dim)", q=q)
    _check_packed("kv", kv, 5, 2, 2, "(batch, seqlen, 2, heads, head_dim)")
    k, v = kv.unbind(2)
    return _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes,
                  deterministic)


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Exact attention in flash-attn's layout: q (B, Nq, H, D), k/v (B, Nk, Hkv, D) -> (B, Nq, H, D).

    Args:
        q, k, v: float16 or bfloat16, any strides (no copies are made); H a multiple of Hkv
            (grouped- and multi-query attention); head dim between 1 and 256.
        dropout_p: probability of dropping each attention probability, in [0, 1).
        softmax_scale: scale of q k^T before the softmax; defaults to 1 / sqrt(head_dim).
        causal: mask aligned to the bottom-right corner: query i sees keys j <= i + Nk - Nq.
            Rows that see no key give zeros.
        window_size: (left, right) sliding window, -1 unbounded (see the module docstring).
        softcap: > 0 caps the scores with softcap * tanh(scores / softcap); 0 is off.
        alibi_slopes: None, or float32 (H,) or (B, H) ALiBi slopes.
        deterministic: True: a bitwise-reproducible backward (see the module docstring).
        return_attn_probs: also return softmax_lse (B, H, Nq), float32, no gradient (+inf for
            rows that see no key), and S_dmask: with dropout the probabilities with dropped
            entries negated, (B, H, Nq, Nk); without, an empty tensor as flash-attn returns.

    Returns out, or (out, softmax_lse, S_dmask) with return_attn_probs.
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs)
    _check_rank(4, "(batch, seqlen, heads, head_dim)", q=q, k=k, v=v)
    return _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes,
                  deterministic)


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Variable-length attention of packed qkv (total, 3, H, D) -> out (total, H, D).

    cu_seqlens (B + 1,) int32 gives each sequence's tokens; max_seqlen bounds their lengths.
    One launch of the kernels per pass for the batch (see flash_attn_varlen_func).
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs)
    _check_packed("qkv", qkv, 4, 1, 3, "(total_tokens, 3, heads, head_dim)")
    q, k, v = qkv.unbind(1)
    return _varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, softmax_scale, causal,
                   return_attn_probs, dropout_p, window_size, softcap, alibi_slopes, deterministic)


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Variable-length attention of q (total_q, H, D) over packed kv (total_k, 2, Hkv, D).

    One launch of the kernels per pass for the batch (see flash_attn_varlen_func).
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs)
    _check_packed("kv", kv, 4, 1, 2, "(total_tokens, 2, heads, head_dim)")
    k, v = kv.unbind(1)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                   return_attn_probs, dropout_p, window_size, softcap, alibi_slopes, deterministic)


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
):
    """Variable-length attention: q (total_q, H, D), k/v (total_k, Hkv, D) -> out (total_q, H, D).

    Sequence b holds queries cu_seqlens_q[b]:cu_seqlens_q[b + 1] and keys
    cu_seqlens_k[b]:cu_seqlens_k[b + 1]; each query attends only to its own sequence's keys,
    with the causal mask aligned to the bottom-right corner of that sequence's (Nq, Nk) block.
    cu_seqlens_* are int32 of shape (B + 1,), starting at 0 and ending at the token count;
    max_seqlen_* must be at least the longest sequence.

    The kernels run once per pass for the whole batch (each program reads its sequence's
    offsets from cu_seqlens; the host reads them once for the checks). Sequences of length 0
    are allowed. The other options are those of flash_attn_func; softmax_lse, with
    return_attn_probs, has shape (H, total_q).

    block_table (B, max_num_blocks_per_seq) int32: k and v are a paged cache (num_blocks,
    page_block_size, Hkv, D), and sequence b's key j (of cu_seqlens_k[b + 1] - cu_seqlens_k[b])
    sits in page block_table[b, j // page_block_size] at row j % page_block_size. The pages are
    gathered into a packed copy first (an indexed PyTorch copy: any page size, and the gradient
    flows back into the cache), then the packed kernels run.
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                   return_attn_probs, dropout_p, window_size, softcap, alibi_slopes, deterministic, block_table)
