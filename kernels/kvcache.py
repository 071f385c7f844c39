"""flash-attn 2.8's `flash_attn_with_kvcache`, over the split-KV kernels of `_decode.py`.

    from kernels import flash_attn_with_kvcache
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, causal=True)

Same parameter names, order and defaults as flash-attn 2.8 (Dao-AILab/flash-attention,
flash_attn/flash_attn_interface.py), and the same meaning:

- q (B, Nq, H, D) float16 / bfloat16. Nq = 1 is plain decoding; Nq > 1 is e.g. speculative
  decoding (with causal=True each new token sees the cache and the new tokens up to itself).
- k_cache, v_cache: dense (B_cache, Ncache, Hkv, D), or paged (num_blocks, page_size, Hkv, D)
  when `block_table` (B, max_blocks) int32 is given (page_size a multiple of 16; pages in any
  order). H must be a multiple of Hkv (MHA, GQA, MQA).
- cache_seqlens: int or (B,) int32, the number of tokens already in each sequence's cache
  (None: the whole cache, Ncache or max_blocks * page_size; with new k and v it must be given,
  as in flash-attn).
- k, v (B, Nnew, Hkv, D), optional: written INTO k_cache / v_cache (in place) at positions
  cache_seqlens[b] .. cache_seqlens[b] + Nnew - 1, then attended to with the rest of the cache.
- rotary_cos, rotary_sin (Nro, rotary_dim / 2), optional: rotary embedding applied to the
  first rotary_dim features of k (before it is written) at positions cache_seqlens + i, and of
  q at positions cache_seqlens + i when causal or local, else all of q at position
  cache_seqlens (flash-attn's rule). As in flash-attn: only with k and v, rotary_dim a multiple
  of 16, cos/sin in q's dtype with at least as many positions as the cache holds.
  rotary_interleaved: True rotates pairs (0, 1), (2, 3), ... (GPT-J), False rotates halves
  (GPT-NeoX).
- cache_batch_idx (B,) int32: sequence b reads (and appends to) cache row cache_batch_idx[b]
  (dense cache only, as in flash-attn; with repeated rows the appended values of one of the
  duplicates win, as there).
- cache_leftpad (B,) int32: sequence b's cache starts at position cache_leftpad[b] (left
  padding); its keys are positions [cache_leftpad, cache_seqlens + Nnew).
- softmax_scale (default 1/sqrt(D)), causal (bottom-right aligned to the cache length after the
  append), window_size (left, right) ints or 0-dim integer tensors, a negative bound or one of at
  least the cache's capacity unlimited (flash-attn's C++ rule), softcap (> 0: s = c * tanh(s / c);
  0 or less: off), alibi_slopes (H,) or (B, H) float32 (bias -slope * |i + Nk - Nq - j|).
- num_splits: how many slices of the keys run in parallel, at most 128 (0 or less = choose from
  the shape and the GPU's SM count); return_softmax_lse: also return the log-sum-exp (B, H, Nq)
  float32.

The append and the rotary embedding run as PyTorch ops before the kernel (indexed writes into
the cache; the rotation in float32, rounded to the cache's dtype as flash-attn's kernel does);
the attention itself is the Triton kernel. The checks of cache_seqlens, cache_leftpad,
cache_batch_idx and block_table read them on the host (one synchronisation), so that nothing is
ever read or written out of bounds: bad values raise `kernels.InputError`. Index tensors that are
not contiguous are copied first (flash-attn copies or refuses them). An int (or no) cache_seqlens is
known on the host: a dense call with one and no cache_batch_idx or cache_leftpad reads nothing back,
so a decode step can be captured in a CUDA graph and replayed.

Differences from flash-attn a caller may notice: bad input raises `kernels.InputError`, a
RuntimeError as flash-attn's checks raise and a ValueError; a row that sees no key has lse -inf
(flash-attn: +inf); page sizes that are a multiple of 16 are accepted (flash-attn: multiple of
256) and cache_leftpad works with a paged cache (flash-attn refuses it); with causal ALiBi the
log-sum-exp includes the bias
-slope * |i + Nk - Nq - j| (flash-attn adds slope * j there, which shifts each row's lse by a
constant and leaves the output the same). fp8 caches (and q/k/v descales) are not supported:
NotImplementedError.
"""

import math
import numbers
from typing import Optional, Union

import torch

from kernels._decode import MAX_SPLITS, decode_forward
from kernels.attention import SUPPORTED_DTYPES, _interpreter_on, _launch_device
from kernels.errors import InputError
from kernels.flash_attn_interface import _is_flag, window_pair
from kernels.tiles import MAX_HEAD_DIM

_FP8 = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
             if hasattr(torch, name))


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _check_index_tensor(name, t, batch, device) -> torch.Tensor:
    """t, checked, as a contiguous tensor (the kernels index it as one)."""
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise InputError(f"{name} must have dtype torch.int32, got {t.dtype}")
    if t.shape != (batch,):
        raise InputError(f"{name} must have shape ({batch},) (one per sequence), got {tuple(t.shape)}")
    if t.device != device:
        raise InputError(f"{name} must be on {device}, got {t.device}")
    return t.contiguous()


def _check_tensors(q, k_cache, v_cache, k, v):
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if t is None and name in ("k", "v"):
            continue
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype in _FP8:
            raise NotImplementedError(f"{name} has dtype {t.dtype}: fp8 KV caches and q/k/v descales are not "
                                      "supported yet")
        if t.dim() != 4:
            raise InputError(f"{name} must have rank 4, got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise InputError(f"{name} has dtype {t.dtype}; supported dtypes are torch.float16 and torch.bfloat16")
        if t.dtype != q.dtype:
            raise InputError(f"{name} has dtype {t.dtype}, q has {q.dtype}: they must match")
        if t.device != q.device:
            raise InputError(f"{name} is on {t.device}, q on {q.device}: they must share one device")
    if q.device.type == "cpu":
        if not _interpreter_on():
            raise InputError("CPU tensors need the Triton interpreter (set TRITON_INTERPRET=1)")
    elif q.device.type != "cuda":
        raise InputError(f"tensors must be on a CUDA device (or the CPU under TRITON_INTERPRET=1), got {q.device}")
    if (k is None) != (v is None):
        raise InputError("k and v must be given together (or both None)")
    batch, n_q, heads, d = q.shape
    if k_cache.shape != v_cache.shape:
        raise InputError(f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    kv_heads = k_cache.shape[2]
    if k_cache.shape[3] != d:
        raise InputError(f"head dim mismatch: q {d}, k_cache {k_cache.shape[3]}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise InputError(f"head dim {d} is not supported: it must be between 1 and {MAX_HEAD_DIM}")
    if kv_heads == 0 or heads % kv_heads != 0:
        raise InputError(f"the number of query heads ({heads}) must be a multiple of the number of key/value "
                         f"heads ({kv_heads})")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise InputError(f"{name} must be contiguous in its last dim (it is written in place)")
    if k is not None:
        if k.shape != v.shape:
            raise InputError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        if k.shape[0] != batch or k.shape[2] != kv_heads or k.shape[3] != d:
            raise InputError(f"k must have shape (batch={batch}, seqlen_new, nheads_k={kv_heads}, headdim={d}), "
                             f"got {tuple(k.shape)}")


def _rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x (B, N, H, D) at positions (B, N), in float32, back to x's dtype."""
    rot = 2 * cos.shape[1]
    c = cos.float()[positions][:, :, None, :]  # (B, N, 1, rot/2)
    s = sin.float()[positions][:, :, None, :]
    x32 = x.float()
    head = x32[..., :rot]
    if interleaved:
        x1, x2 = head[..., 0::2], head[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = head[..., :rot // 2], head[..., rot // 2:]
        rotated = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((rotated, x32[..., rot:]), dim=-1).to(x.dtype)


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens: Optional[Union[(int, torch.Tensor)]] = None,
    cache_batch_idx: Optional[torch.Tensor] = None,
    cache_leftpad: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Attention of q over a KV cache, appending k / v (and applying rotary) first; see the module
    docstring for every argument. Returns out (B, Nq, H, D), or (out, softmax_lse) with
    return_softmax_lse (lse (B, H, Nq) float32, natural log)."""
    _check_tensors(q, k_cache, v_cache, k, v)
    batch, n_q, heads, d = q.shape
    if batch == 0:
        raise InputError("batch size must be positive")  # flash-attn's check and message
    kv_heads = k_cache.shape[2]
    device = q.device
    paged = block_table is not None
    n_new = 0 if k is None else k.shape[1]

    # ---- options
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(d)
    elif not (isinstance(softmax_scale, numbers.Real) and math.isfinite(softmax_scale)):
        raise InputError(f"softmax_scale must be a finite float or None, got {softmax_scale!r}")
    for name, flag in (("causal", causal), ("rotary_interleaved", rotary_interleaved),
                       ("return_softmax_lse", return_softmax_lse)):
        if not _is_flag(flag):
            raise InputError(f"{name} must be a bool, got {flag!r}")
    window_pair(window_size)  # checked here; read below, once the cache's capacity is known
    if not (isinstance(softcap, numbers.Real) and math.isfinite(softcap)):
        raise InputError(f"softcap must be a finite float (0 or less: off), got {softcap!r}")
    softcap = max(float(softcap), 0.0)
    if not _is_int(num_splits) or num_splits > MAX_SPLITS:
        raise InputError(f"num_splits must be an int <= {MAX_SPLITS} (0 or less: choose), got {num_splits!r}")
    num_splits = max(int(num_splits), 0)

    # ---- cache geometry
    if paged:
        if cache_batch_idx is not None:
            raise NotImplementedError("cache_batch_idx together with a paged KV cache (block_table) is not "
                                      "supported (as in flash-attn)")
        if not isinstance(block_table, torch.Tensor):
            raise InputError(f"block_table must be a torch.Tensor, got {type(block_table).__name__}")
        if block_table.dtype != torch.int32:
            raise InputError(f"block_table must have dtype torch.int32, got {block_table.dtype}")
        if block_table.dim() != 2 or block_table.shape[0] != batch or block_table.shape[1] == 0:
            raise InputError(f"block_table must have shape (batch={batch}, max_blocks >= 1), got "
                             f"{tuple(block_table.shape)}")
        if block_table.device != device:
            raise InputError(f"block_table must be on {device}, got {block_table.device}")
        block_table = block_table.contiguous()  # the kernel steps along a row by 1
        num_blocks, page_size = k_cache.shape[0], k_cache.shape[1]
        if page_size % 16 != 0:
            raise InputError(f"paged KV cache: page_size must be a multiple of 16, got {page_size}")
        capacity = block_table.shape[1] * page_size
    else:
        capacity = k_cache.shape[1]
        if cache_batch_idx is not None:
            cache_batch_idx = _check_index_tensor("cache_batch_idx", cache_batch_idx, batch, device)
            idx = cache_batch_idx.tolist()
            if any(not 0 <= i < k_cache.shape[0] for i in idx):
                raise InputError(f"cache_batch_idx values must be in [0, {k_cache.shape[0]}) (the cache's batch), "
                                 f"got {idx}")
        elif k_cache.shape[0] != batch:
            raise InputError(f"k_cache has batch {k_cache.shape[0]} but q has {batch}; pass cache_batch_idx to "
                             "choose cache rows")

    if k is not None and cache_seqlens is None:
        raise InputError("If key is supplied, seqlens_k must also be passed in (cache_seqlens)")  # flash-attn's
    if k is not None and n_q > capacity:
        raise InputError(f"If key is supplied, it must have seqlen <= the seqlen of the KV cache: seqlen_q {n_q}, "
                         f"cache {capacity}")  # flash-attn's check and message
    # flash-attn's C++ rule: a window bound of at least the cache's capacity is unbounded (so not local)
    window = window_pair(window_size, capacity)
    if cache_seqlens is None or _is_int(cache_seqlens):
        # known on the host: no read-back, so a dense call with an int length can be captured in a CUDA graph
        length = capacity if cache_seqlens is None else int(cache_seqlens)
        lens = torch.full((batch,), length, dtype=torch.int32, device=device)
        lens_host = [length] * batch
    else:
        lens = _check_index_tensor("cache_seqlens", cache_seqlens, batch, device)
        lens_host = lens.tolist()
    for b, n in enumerate(lens_host):
        if n < 0:
            raise InputError(f"cache_seqlens must be >= 0, got {n} for sequence {b}")
        if n + n_new > capacity:
            raise InputError(f"sequence {b}: cache_seqlens {n} + {n_new} new tokens exceed the cache capacity "
                             f"{capacity}")
    if cache_leftpad is not None:
        cache_leftpad = _check_index_tensor("cache_leftpad", cache_leftpad, batch, device)
        left_host = cache_leftpad.tolist()
        for b, (lp, n) in enumerate(zip(left_host, lens_host)):
            if not 0 <= lp <= n:
                raise InputError(f"cache_leftpad must be in [0, cache_seqlens]: sequence {b} has {lp} and {n}")
    else:
        left_host = [0] * batch
    seqlens_k = (lens + n_new).to(torch.int32).contiguous()
    if paged:
        # the entries the kernel reads: the first ceil(seqlen_k / page_size) of each row (one synchronisation)
        used = (seqlens_k.long() + page_size - 1) // page_size
        read = torch.arange(block_table.shape[1], device=device)[None, :] < used[:, None]
        bad = read & ((block_table < 0) | (block_table >= num_blocks))
        if bool(bad.any()):
            b = int(bad.any(dim=1).nonzero()[0, 0])
            raise InputError(f"block_table[{b}] holds page indices outside [0, {num_blocks}) in its first "
                             f"{int(used[b])} entries")

    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32:
            raise InputError("alibi_slopes must be a float32 tensor of shape (nheads,) or (batch, nheads)")
        if alibi_slopes.shape == (heads,):
            alibi_slopes = alibi_slopes[None].expand(batch, heads)
        elif alibi_slopes.shape != (batch, heads):
            raise InputError(f"alibi_slopes must have shape ({heads},) or ({batch}, {heads}), got "
                             f"{tuple(alibi_slopes.shape)}")
        if alibi_slopes.device != device:
            raise InputError(f"alibi_slopes must be on {device}, got {alibi_slopes.device}")
        alibi_slopes = alibi_slopes.contiguous() if alibi_slopes.stride(1) != 1 else alibi_slopes

    # ---- rotary (PyTorch ops): q and the new k
    local = window != (-1, -1)
    if (rotary_cos is None) != (rotary_sin is None):
        raise InputError("rotary_cos and rotary_sin must be given together")
    if rotary_cos is not None:
        if k is None:
            raise InputError("rotary_cos / rotary_sin need the new k and v to append (as in flash-attn)")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                raise InputError(f"{name} must be a 2-D tensor (seqlen_ro, rotary_dim / 2)")
            if t.device != device:
                raise InputError(f"{name} must be on {device}, got {t.device}")
        if rotary_cos.shape != rotary_sin.shape:
            raise InputError(f"rotary_cos and rotary_sin must have one shape, got {tuple(rotary_cos.shape)} and "
                             f"{tuple(rotary_sin.shape)}")
        if rotary_cos.dtype != q.dtype or rotary_sin.dtype != q.dtype:
            raise InputError(f"rotary_cos must have the same dtype as query: {rotary_cos.dtype}, {rotary_sin.dtype} "
                             f"and {q.dtype}")
        rotary_dim = 2 * rotary_cos.shape[1]
        if not 1 <= rotary_dim <= d:
            raise InputError(f"rotary_dim (2 * rotary_cos.shape[1] = {rotary_dim}) must be in [2, {d}]")
        if rotary_dim % 16:
            raise InputError(f"Only rotary dimensions divisible by 16 are currently supported, got rotary_dim "
                             f"{rotary_dim}")  # flash-attn's check and message
        q_span = n_q if (causal or local) else 1
        needed = max(capacity, max(lens_host) + max(q_span, n_new))
        if rotary_cos.shape[0] < needed:
            raise InputError(f"rotary_cos has {rotary_cos.shape[0]} positions; it needs {needed}: the cache's "
                             f"{capacity} (as in flash-attn) and every position used")
        lens_long = lens.long()[:, None]
        q_pos = lens_long + (torch.arange(n_q, device=device)[None] if (causal or local) else 0)
        q = _rotate(q, rotary_cos, rotary_sin, q_pos.expand(batch, n_q), bool(rotary_interleaved))
        if k is not None:
            k = _rotate(k, rotary_cos, rotary_sin, lens_long + torch.arange(n_new, device=device)[None],
                        bool(rotary_interleaved))

    # ---- append (PyTorch ops, in place)
    if k is not None and n_new > 0:
        pos = lens.long()[:, None] + torch.arange(n_new, device=device)[None]  # (B, Nnew)
        if paged:
            pages = block_table.long().gather(1, pos // page_size)
            k_cache[pages, pos % page_size] = k
            v_cache[pages, pos % page_size] = v
        else:
            rows = (cache_batch_idx.long() if cache_batch_idx is not None
                    else torch.arange(batch, device=device))[:, None].expand(batch, n_new)
            k_cache[rows, pos] = k
            v_cache[rows, pos] = v

    # ---- attention (Triton)
    max_keys = max((n + n_new - lp for n, lp in zip(lens_host, left_host)), default=0)
    if q.numel() == 0:
        out = torch.zeros_like(q)
        lse = torch.full((batch, heads, n_q), float("-inf"), device=device)
    else:
        with _launch_device(q):
            out, lse, _ = decode_forward(q, k_cache, v_cache, seqlens_k, cache_leftpad,
                                         cache_batch_idx if not paged else None, block_table, alibi_slopes,
                                         float(softmax_scale), bool(causal), window, float(softcap),
                                         int(num_splits), max_keys)
    return (out, lse) if return_softmax_lse else out
