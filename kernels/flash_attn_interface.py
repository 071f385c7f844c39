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
  right, -1 unbounded; causal=True sets right = 0. As flash-attn's C++ does, a bound of at
  least seqlen_k (max_seqlen_k for varlen) counts as -1. Bounds below -1 are refused.
- softcap > 0: scores = softcap * tanh(scale * q.k / softcap), then the softmax.
- alibi_slopes: float32 (H,) or (B, H); adds -slope * |i + Nk - Nq - j| to the scores (varlen:
  sequence b uses row b of (B, H) slopes).
- deterministic: either value is accepted and both give the same bitwise-deterministic backward
  (dQ has its own kernel, no atomics); flash-attn uses it to choose between atomic and
  deterministic dQ accumulation, and this engine only has the deterministic one here
  (`kernels.flash_attention(..., atomic_dq=True)` is the non-deterministic ablation).
The paged KV cache of the varlen function (block_table) is not supported yet and is refused
with NotImplementedError rather than ignored.

Differences from flash-attn that a caller may notice:
- Bad input raises ValueError naming the problem, as `kernels.flash_attention` does, where
  flash-attn's C++ checks raise RuntimeError. Inputs flash-attn quietly copies (a last dim
  that is not contiguous) are read in place here.
- `return_attn_probs=True` returns (out, softmax_lse, S_dmask) like flash-attn. S_dmask is
  filled only with dropout (otherwise an empty tensor, shape (0,), as flash-attn returns): the
  softmax probabilities, 0 where masked, negated where dropout dropped them, so
  `S_dmask >= 0` is the keep mask. Its shape is (B, H, Nq, Nk) (varlen: (B, H, max_seqlen_q,
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
  queries but no keys is refused, as `flash_attention` refuses seqlen_k = 0.
- The varlen functions launch the kernels once per pass for the whole batch: each program
  reads its sequence's offsets from cu_seqlens. The host still reads cu_seqlens once per call
  for the checks above.
"""

import math
import numbers

import torch

from kernels.attention import check_inputs, flash_attention

_FULL_WINDOW = (-1, -1)


# --------------------------------------------------------------------------------------------
# Checks of the options: every argument is either used or refused.
# --------------------------------------------------------------------------------------------

def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _check_flag(name, value):
    if not (isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1))):
        raise ValueError(f"{name} must be a bool, got {value!r}")


def _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs, block_table=None):
    """Scalar checks up front; alibi_slopes' shape and dtype are checked by flash_attention."""
    if not _is_real(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    if softmax_scale is not None and not (_is_real(softmax_scale) and math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale must be a finite float or None, got {softmax_scale!r}")
    _check_flag("causal", causal)
    try:
        window = tuple(window_size)
    except TypeError:
        window = None
    if (window is None or len(window) != 2
            or not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in window)):
        raise ValueError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    if min(window) < -1:
        raise ValueError(f"window_size values must be >= -1 (-1: unbounded), got {window_size!r}")
    if not _is_real(softcap) or not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap must be a finite float >= 0 (0: off), got {softcap!r}")
    if alibi_slopes is not None and not isinstance(alibi_slopes, torch.Tensor):
        raise ValueError(f"alibi_slopes must be a torch.Tensor or None, got {type(alibi_slopes).__name__}")
    _check_flag("deterministic", deterministic)  # either value: the default backward is deterministic
    _check_flag("return_attn_probs", return_attn_probs)
    if block_table is not None:
        raise NotImplementedError("the paged KV cache (block_table) is not supported yet; pass block_table=None")


def _features(dropout_p, window_size, softcap, alibi_slopes, max_seqlen_k):
    """flash_attention's keyword arguments for the features, with flash-attn's window rule:
    a bound of at least (max_)seqlen_k means unbounded (-1)."""
    left, right = (-1 if w >= max_seqlen_k else int(w) for w in window_size)
    return dict(dropout_p=float(dropout_p), window_size=(left, right), softcap=float(softcap),
                alibi_slopes=alibi_slopes)


def _check_rank(rank, layout, **tensors):
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise ValueError(f"{name} must have rank {rank} {layout}, got shape {tuple(t.shape)}")


def _check_packed(name, t, rank, dim, count, layout):
    _check_rank(rank, layout, **{name: t})
    if t.shape[dim] != count:
        raise ValueError(f"{name} must have size {count} in dim {dim} {layout}, got shape {tuple(t.shape)}")


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

def _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes):
    """q (B, Nq, H, D), k/v (B, Nk, Hkv, D) -> out (B, Nq, H, D), lse (B, H, Nq); no copies."""
    features = _features(dropout_p, window_size, softcap, alibi_slopes, k.shape[1])
    want_probs = bool(return_attn_probs) and dropout_p > 0
    out, lse, *probs = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=bool(causal),
                                       softmax_scale=softmax_scale, return_lse=True, return_probs=want_probs,
                                       **features)
    return _result(out.transpose(1, 2), lse, probs[0] if probs else None, return_attn_probs)


# --------------------------------------------------------------------------------------------
# Varlen: one launch per pass for the whole packed batch.
# --------------------------------------------------------------------------------------------

def _sequence_bounds(name, cu_seqlens, total, tensor_name, max_name, max_seqlen):
    """The (start, end) of each sequence, after checking the offsets against the tokens held."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype != torch.int32:
        raise ValueError(f"{name} must have dtype torch.int32, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"{name} must have shape (batch_size + 1,) with batch_size >= 1, "
                         f"got {tuple(cu_seqlens.shape)}")
    if not isinstance(max_seqlen, numbers.Integral) or isinstance(max_seqlen, bool):
        raise ValueError(f"{max_name} must be an int, got {max_seqlen!r}")
    offsets = cu_seqlens.tolist()
    if offsets[0] != 0:
        raise ValueError(f"{name} must start at 0, got {offsets[0]}")
    if any(end < start for start, end in zip(offsets, offsets[1:])):
        raise ValueError(f"{name} must not decrease, got {offsets}")
    if offsets[-1] != total:
        raise ValueError(f"{name} ends at {offsets[-1]} but {tensor_name} holds {total} tokens")
    longest = max(end - start for start, end in zip(offsets, offsets[1:]))
    if longest > max_seqlen:
        raise ValueError(f"{max_name}={max_seqlen} is less than the longest sequence in {name} ({longest})")
    return list(zip(offsets, offsets[1:]))


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
            return_attn_probs, dropout_p, window_size, softcap, alibi_slopes):
    """q (total_q, H, D), k/v (total_k, Hkv, D) -> out (total_q, H, D), lse (H, total_q).

    One launch of the kernels per pass for the whole batch: they see q as (1, H, total_q, D)
    (a view, no copy) and read each sequence's offsets from cu_seqlens. (B, H) ALiBi slopes give
    sequence b the row b; the dropout counters take the sequence index as the batch index, so
    the masks of the sequences are independent. With dropout and return_attn_probs, S_dmask is
    (B, H, max_seqlen_q, max_seqlen_k), each sequence's block at the top left, zeros elsewhere.
    """
    _check_rank(3, "(total_tokens, heads, head_dim)", q=q, k=k, v=v)
    # dtype, device, heads and head dim: the dense checks on views of the whole batch
    check_inputs(q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2), v.unsqueeze(0).transpose(1, 2))
    bounds_q = _sequence_bounds("cu_seqlens_q", cu_seqlens_q, q.shape[0], "q", "max_seqlen_q", max_seqlen_q)
    bounds_k = _sequence_bounds("cu_seqlens_k", cu_seqlens_k, k.shape[0], "k", "max_seqlen_k", max_seqlen_k)
    if len(bounds_q) != len(bounds_k):
        raise ValueError(f"cu_seqlens_q holds {len(bounds_q)} sequences and cu_seqlens_k {len(bounds_k)}")
    batch, heads = len(bounds_q), q.shape[1]
    if alibi_slopes is not None and alibi_slopes.dim() == 2 and tuple(alibi_slopes.shape) != (batch, heads):
        raise ValueError(f"alibi_slopes must have shape (nheads,) = ({heads},) or (batch_size, nheads) = "
                         f"({batch}, {heads}), got {tuple(alibi_slopes.shape)}")
    for i, ((q0, q1), (k0, k1)) in enumerate(zip(bounds_q, bounds_k)):
        if k1 == k0 and q1 > q0:
            raise ValueError(f"sequence {i} has {q1 - q0} queries but no keys")
    if cu_seqlens_k.device != q.device or cu_seqlens_q.device != q.device:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must be on the device of q ({q.device})")
    want_probs = bool(return_attn_probs) and dropout_p > 0
    features = _features(dropout_p, window_size, softcap, alibi_slopes, max_seqlen_k)
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
    return _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes)


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
    return _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes)


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
        deterministic: accepted with either value; the backward is always deterministic here.
        return_attn_probs: also return softmax_lse (B, H, Nq), float32, no gradient (+inf for
            rows that see no key), and S_dmask: with dropout the probabilities with dropped
            entries negated, (B, H, Nq, Nk); without, an empty tensor as flash-attn returns.

    Returns out, or (out, softmax_lse, S_dmask) with return_attn_probs.
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs)
    _check_rank(4, "(batch, seqlen, heads, head_dim)", q=q, k=k, v=v)
    return _dense(q, k, v, softmax_scale, causal, return_attn_probs, dropout_p, window_size, softcap, alibi_slopes)


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
                   return_attn_probs, dropout_p, window_size, softcap, alibi_slopes)


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
                   return_attn_probs, dropout_p, window_size, softcap, alibi_slopes)


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
    are allowed. block_table (paged KV cache) must be None. The other options are those of
    flash_attn_func; softmax_lse, with return_attn_probs, has shape (H, total_q).
    """
    _check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs, block_table)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                   return_attn_probs, dropout_p, window_size, softcap, alibi_slopes)
