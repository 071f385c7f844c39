"""The PyTorch-facing attention op: input checks, torch.library registration, autograd.

`flash_attention(q, k, v, ...)` takes the (B, H, N, D) layout of
`torch.nn.functional.scaled_dot_product_attention`; flash-attn's API (`flash_attn_func` and the
rest, (B, N, H, D) layout) is in `flash_attn_interface.py` and reaches the same op through strides.

The forward and backward launches are registered as custom ops (`flash_attn_triton::fwd`,
`flash_attn_triton::bwd`) with fake (meta) implementations, and a `torch.autograd.Function`
ties them together, so `torch.compile(..., fullgraph=True)` traces a model that calls
`flash_attention` without a graph break.

In eager mode a call resolves its arguments (the checks, the options, which kernels run) once per
layout and arguments: the plan is kept (`_PLANS`, keyed by `_plan_key`), and a repeated call, as a
training loop makes, goes straight to the launch. Calls with tensors besides q, k, v (ALiBi slopes,
packed batches, fp8 descales) and explicit tiles resolve every time.

The training features of flash-attn 2.8 (sliding window, softcap, ALiBi, dropout) are keyword
arguments too. Everything that is not a tensor travels to the ops as one `AttentionOptions`
(kernels/options.py) encoded as a string; the ALiBi slopes and the dropout seed travel as
optional tensors. The seed is drawn here, outside the ops, from torch's default generator, and
the same seed reaches both passes.

Every switch of the ablations is a keyword argument here (see `flash_attention`); none of them
changes the result beyond rounding, except that `atomic_dq=True` gives up bitwise determinism.
`deterministic` is flash-attn's keyword: True keeps the bitwise-reproducible portable backward (dQ
has its own kernel) and refuses atomic_dq=True and hopper_backward=True; False (the default, as in
flash-attn) lets sm_90 run the one-pass Hopper backward, whose dQ additions land in any order.
`algorithm="fa1"` swaps both passes for FlashAttention-1's own kernels (`_fa1.py`: one program
per (batch, head), key blocks outside, query blocks inside, O, l, m and dQ through HBM every
step); the other switches are ablations of the FA2 kernels and must keep their defaults with it.

fp8: q, k, v of dtype torch.float8_e4m3fn, with optional float32 descales `q_descale` (B, H),
`k_descale`, `v_descale` (B, Hkv) (FlashAttention-3's convention: true value = fp8 value *
descale; None is 1.0), run the FP8 forward kernels (kernels/_forward.py) through their own custom
op, `flash_attn_triton::fwd_fp8`, and return a bfloat16 output (as FlashAttention-3 does) and a
float32 lse. Forward only: an input that requires grad raises NotImplementedError, and so does
every feature or switch the fp8 path lacks (each named); descales with float16/bfloat16 inputs
are a ValueError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import numbers
import os
from typing import NamedTuple

import torch

from kernels._backward import attention_backward
from kernels._fa1 import fa1_backward, fa1_default_tiles, fa1_forward
from kernels._forward import attention_forward, attention_probs, check_varlen, fp8_forward
from kernels.errors import InputError
from kernels.options import AttentionOptions
from kernels.tiles import MAX_HEAD_DIM, TileConfig, default_tiles

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
FP8_DTYPE = torch.float8_e4m3fn  # flash_attention only, forward only, output bf16
ALGORITHMS = ("fa2", "fa1")
# Head dim -> the fewest keys at which flash_attention runs the Hopper forward when `hopper` is not given
# (on sm_90, where it covers the call). On the H200 it is 1.25-1.37x the portable forward at 128 at every
# length (the `hopper` ablation at 1e32447). At 64 it is 1.04-1.14x from 4k keys but 0.80-0.97x at 512-2k
# (the `speed` ablation at 360c663, which ran it at every length; notes/perf.md v17): a short row of key
# tiles does not pay for the warp-specialised kernel's setup at that head dim. At 96, 192 and 256 it is
# 1.16-1.49x, 1.46-1.89x and 1.46-1.96x the portable forward at every length from 512, full and causal
# (notes/round19/hopper_head_dims_probe_h200.csv, fp16, one process; notes/perf.md v19).
HOPPER_FORWARD_MIN_KEYS = {64: 4096, 96: 0, 128: 0, 192: 0, 256: 0}
# The training features (flash_attention's argument names) with which the default (hopper=None) still
# picks the Hopper forward where it covers the call; with any other, the portable forward runs. The
# Hopper forward has the sliding window, softcap and ALiBi (hopper=True takes them all). The window and
# softcap are faster there at every length timed, at head dims 64 and 128 (1.21-1.33x and 1.04-1.25x the
# portable forward on the H200, 1k-16k keys); ALiBi without a mask is not at head dim 64 (0.85-0.98x), so it
# stays on the portable forward (notes/round22/h200/hopper_features_probe_h200.csv, notes/perf.md).
HOPPER_FORWARD_FEATURES = frozenset({"window_size", "softcap"})
# The same for the Hopper backward (kernels/_hopper_bwd.py), which has them too at head dims 64 and 128:
# none. At head dim 64 on the H200 both won (notes/round22/h200/hopper_features_probe_h200.csv); at head
# dim 128, timed on an H100 (the H200's arms are not timed yet), neither beat the portable backward after
# the Hopper forward at every length (notes/round22/h100/hopper_features_probe_d128_h100.csv,
# notes/round22/backward_features.py decide).
HOPPER_BACKWARD_FEATURES = frozenset()
# (head dim, causal) at which flash_attention runs the Hopper backward (kernels/_hopper_bwd.py) when
# `hopper_backward` is not given, deterministic=False and the kernel covers the call: every pair it
# covers, as it is faster than the portable backward there on the H200 (the 8a451f2 archive's hopper
# ablation: 1.06-1.20x at 64, 1.10-1.21x at 128 full, 1.01-1.08x at 128 causal, before the
# self-loading schedule added 1.06-1.10x at 128; notes/perf.md v15, v16), and at 192 and 256
# (kernels/_hopper_bwd_wide.py; notes/perf.md v20).
HOPPER_BACKWARD_DEFAULTS = ((64, False), (64, True), (128, False), (128, True), (192, False), (192, True),
                            (256, False), (256, True))


def _interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


if _interpreter_on():
    from kernels import _interpreter

    _interpreter.install()


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fp8: bool = False) -> None:
    """Raise ValueError naming the problem if q, k, v cannot go to the kernels. `fp8`: also
    accept torch.float8_e4m3fn (flash_attention's fp8 forward)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise InputError(f"{name} must have rank 4 (batch, heads, seqlen, head_dim), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES and not (fp8 and t.dtype == FP8_DTYPE):
            also = (", and torch.float8_e4m3fn (forward only)" if fp8
                    else " (torch.float8_e4m3fn: kernels.flash_attention, forward only)")
            raise InputError(f"{name} has dtype {t.dtype}; supported dtypes are torch.float16 and torch.bfloat16{also}")
    if not (q.dtype == k.dtype == v.dtype):
        raise InputError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise InputError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.device.type == "cpu":
        if not _interpreter_on():
            raise InputError("CPU tensors need the Triton interpreter (set TRITON_INTERPRET=1); "
                             "otherwise move q, k, v to a CUDA device")
    elif q.device.type != "cuda":
        raise InputError(f"q, k, v must be CUDA tensors (or CPU tensors under TRITON_INTERPRET=1), got {q.device}")
    (b, h, n_q, d), (bk, hk, n_k, dk), (bv, hv, n_v, dv) = q.shape, k.shape, v.shape
    if not (b == bk == bv):
        raise InputError(f"batch size mismatch: q {b}, k {bk}, v {bv}")
    if not (d == dk == dv):
        raise InputError(f"head dim mismatch: q {d}, k {dk}, v {dv}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise InputError(f"head dim {d} is not supported: it must be between 1 and {MAX_HEAD_DIM}")
    if hk != hv:
        raise InputError(f"k and v must have the same number of heads, got {hk} and {hv}")
    if n_k != n_v:
        raise InputError(f"k and v must have the same sequence length, got {n_k} and {n_v}")
    if hk == 0 or h % hk != 0:
        raise InputError(f"the number of query heads ({h}) must be a multiple of the number of key/value heads ({hk})")
    if n_k == 0 and n_q > 0:
        raise InputError("k and v must hold at least one key (seqlen_k = 0)")


# --------------------------------------------------------------------------------------------
# torch.library ops: one per pass; tile configs travel as ints so the schema stays simple.
# --------------------------------------------------------------------------------------------

_STAY = contextlib.nullcontext()


def _launch_device(t: torch.Tensor):
    """Triton launches on the current CUDA device: make it the inputs' (e.g. tensors on cuda:1)."""
    if t.is_cuda and t.device.index != torch._C._cuda_getDevice():
        return torch.cuda.device(t.device)
    return _STAY


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, got {algorithm!r}")


def _forward_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alibi_slopes: torch.Tensor | None,
                  dropout_seed: torch.Tensor | None, options: str, cu_seqlens_q: torch.Tensor | None = None,
                  cu_seqlens_k: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    opts = AttentionOptions.decode(options)
    _check_algorithm(opts.algorithm)
    check_varlen(opts, cu_seqlens_q, cu_seqlens_k)
    with _launch_device(q):
        if opts.algorithm == "fa1":
            out, lse = fa1_forward(q, k, v, opts.softmax_scale, opts.causal, TileConfig(*opts.fwd_tiles),
                                   fit_tiles=opts.fit_fwd_tiles)
            return out, lse, q.new_empty((0,), dtype=torch.float32)
        if opts.hopper:
            from kernels._hopper import hopper_forward

            out, lse = hopper_forward(q, k, v, opts.softmax_scale, opts.causal, overlap=opts.hopper_overlap,
                                      window_size=(opts.window_left, opts.window_right), softcap=opts.softcap,
                                      alibi_slopes=alibi_slopes)
            return out, lse, q.new_empty((0,), dtype=torch.float32)
        return attention_forward(q, k, v, opts, alibi_slopes, dropout_seed, cu_seqlens_q, cu_seqlens_k)


_fwd_op = torch.library.custom_op("flash_attn_triton::fwd", mutates_args=())(_forward_impl)


@_fwd_op.register_fake
def _(q, k, v, alibi_slopes, dropout_seed, options, cu_seqlens_q=None, cu_seqlens_k=None):
    opts = AttentionOptions.decode(options)
    b, h, n_q, _ = q.shape
    scores_shape = (b, h, n_q, k.shape[2]) if not opts.recompute and opts.algorithm == "fa2" else (0,)
    return (torch.empty_like(q), q.new_empty((b, h, n_q), dtype=torch.float32),
            q.new_empty(scores_shape, dtype=torch.float32))


def _backward_impl(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, scores: torch.Tensor, alibi_slopes: torch.Tensor | None,
                   dropout_seed: torch.Tensor | None, options: str, cu_seqlens_q: torch.Tensor | None = None,
                   cu_seqlens_k: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    opts = AttentionOptions.decode(options)
    _check_algorithm(opts.algorithm)
    check_varlen(opts, cu_seqlens_q, cu_seqlens_k)
    with _launch_device(q):
        if opts.algorithm == "fa1":
            return fa1_backward(do, q, k, v, out, lse, opts.softmax_scale, opts.causal, TileConfig(*opts.bwd_tiles),
                                fit_tiles=opts.fit_bwd_tiles)
        if opts.hopper_backward:
            from kernels._hopper_bwd import hopper_backward

            return hopper_backward(do, q, k, v, out, lse, opts.softmax_scale, opts.causal,
                                   window_size=(opts.window_left, opts.window_right), softcap=opts.softcap,
                                   alibi_slopes=alibi_slopes)
        return attention_backward(do, q, k, v, out, lse, scores, opts, alibi_slopes, dropout_seed,
                                  cu_seqlens_q, cu_seqlens_k)


_bwd_op = torch.library.custom_op("flash_attn_triton::bwd", mutates_args=())(_backward_impl)


@_bwd_op.register_fake
def _(do, q, k, v, out, lse, scores, alibi_slopes, dropout_seed, options, cu_seqlens_q=None, cu_seqlens_k=None):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _fp8_forward_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor,
                      k_descale: torch.Tensor, v_descale: torch.Tensor, options: str) -> tuple[torch.Tensor, torch.Tensor]:
    with _launch_device(q):
        return fp8_forward(q, k, v, q_descale, k_descale, v_descale, AttentionOptions.decode(options))


_fwd_fp8_op = torch.library.custom_op("flash_attn_triton::fwd_fp8", mutates_args=())(_fp8_forward_impl)


@_fwd_fp8_op.register_fake
def _(q, k, v, q_descale, k_descale, v_descale, options):
    return torch.empty_like(q, dtype=torch.bfloat16), q.new_empty(q.shape[:3], dtype=torch.float32)


def _tile_list(tiles: TileConfig) -> tuple[int, ...]:
    return (tiles.block_m, tiles.block_n, tiles.num_warps, tiles.num_stages)


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd for the two ops; the log-sum-exp output is not differentiable.

    Everything that is not a tensor travels as one encoded AttentionOptions string, so a new
    option changes neither this class nor the op schemas. Under torch.compile the passes go
    through the custom ops (traced as opaque calls with their fake implementations); in eager
    mode they call the launchers directly, skipping the custom-op dispatch, which costs about
    as much host time per call as the rest of our Python layers together.
    """

    @staticmethod
    def forward(ctx, q, k, v, alibi_slopes, dropout_seed, options, cu_seqlens_q=None, cu_seqlens_k=None):
        forward = torch.ops.flash_attn_triton.fwd if torch.compiler.is_compiling() else _forward_impl
        out, lse, scores = forward(q, k, v, alibi_slopes, dropout_seed, options, cu_seqlens_q, cu_seqlens_k)
        ctx.save_for_backward(q, k, v, out, lse, scores, alibi_slopes, dropout_seed, cu_seqlens_q, cu_seqlens_k)
        ctx.options = options
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # no zero-filled gradient for lse on every backward
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        if d_out is None:  # the output reached the loss only through lse, which carries no gradient
            return None, None, None, None, None, None, None, None
        q, k, v, out, lse, scores, alibi_slopes, dropout_seed, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        backward = torch.ops.flash_attn_triton.bwd if torch.compiler.is_compiling() else _backward_impl
        dq, dk, dv = backward(d_out, q, k, v, out, lse, scores, alibi_slopes, dropout_seed, ctx.options,
                              cu_seqlens_q, cu_seqlens_k)
        return dq, dk, dv, None, None, None, None, None


def default_tiles_for(head_dim: int, pass_: str, algorithm: str = "fa2", dropout_p: float = 0.0,
                      atomic_dq: bool = False) -> TileConfig:
    """The tile config `flash_attention` takes for `pass_` when none is given: FA1's for
    algorithm="fa1", else the engine's, which depends on whether dropout and atomic dQ are on."""
    if algorithm == "fa1":
        return fa1_default_tiles(head_dim, pass_)
    return default_tiles(head_dim, pass_, dropout=dropout_p > 0, atomic_dq=atomic_dq)


def _check_window(window_size) -> tuple[int, int]:
    if type(window_size) is tuple and window_size == (-1, -1) and all(type(w) is int for w in window_size):
        return -1, -1  # the default, without the checks' cost
    try:
        window = tuple(window_size)
    except TypeError:
        window = None
    if (window is None or len(window) != 2
            or not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in window)):
        raise InputError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    if min(window) < -1:
        raise InputError(f"window_size values must be >= -1 (-1: unbounded), got {window_size!r}")
    return int(window[0]), int(window[1])


def _check_alibi(alibi_slopes, q: torch.Tensor, batch: int) -> torch.Tensor | None:
    """None, or the slopes as a (B, H) float32 view (stride 0 over the batch for (H,) slopes)."""
    if alibi_slopes is None:
        return None
    heads = q.shape[1]
    if not isinstance(alibi_slopes, torch.Tensor):
        raise InputError(f"alibi_slopes must be a torch.Tensor or None, got {type(alibi_slopes).__name__}")
    if alibi_slopes.dtype != torch.float32:
        raise InputError(f"alibi_slopes must have dtype torch.float32, got {alibi_slopes.dtype}")
    if alibi_slopes.device != q.device:
        raise InputError(f"alibi_slopes must be on the device of q ({q.device}), got {alibi_slopes.device}")
    if tuple(alibi_slopes.shape) == (heads,):
        return alibi_slopes.unsqueeze(0).expand(batch, heads)
    if tuple(alibi_slopes.shape) == (batch, heads):
        return alibi_slopes
    raise InputError(f"alibi_slopes must have shape (nheads,) = ({heads},) or (batch_size, nheads) = "
                     f"({batch}, {heads}), got {tuple(alibi_slopes.shape)}")


def _check_varlen_args(q: torch.Tensor, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) -> int:
    """The number of sequences of a packed batch, after checking what can be checked without
    reading the offsets (that would wait for the device)."""
    if q.shape[0] != 1:
        raise InputError(f"a packed batch holds its tokens in one row: q must have batch size 1, got {q.shape[0]}")
    counts = []
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor (cu_seqlens_q and cu_seqlens_k go together), "
                             f"got {type(cu).__name__}")
        if cu.dtype != torch.int32:
            raise InputError(f"{name} must have dtype torch.int32, got {cu.dtype}")
        if cu.dim() != 1 or cu.numel() < 2:
            raise InputError(f"{name} must have shape (batch_size + 1,) with batch_size >= 1, got {tuple(cu.shape)}")
        if cu.device != q.device:
            raise InputError(f"{name} must be on the device of q ({q.device}), got {cu.device}")
        if not cu.is_contiguous():
            raise InputError(f"{name} must be contiguous")
        counts.append(cu.numel() - 1)
    if counts[0] != counts[1]:
        raise InputError(f"cu_seqlens_q holds {counts[0]} sequences and cu_seqlens_k {counts[1]}")
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
            raise InputError(f"{name} must be an int >= 0, got {value!r}")
    return counts[0]


def _check_descale(name: str, descale, batch: int, heads: int, q: torch.Tensor) -> torch.Tensor:
    """A descale as a contiguous (batch, heads) float32 tensor; None means 1.0."""
    if descale is None:
        return torch.ones((batch, heads), device=q.device, dtype=torch.float32)
    if not isinstance(descale, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor or None, got {type(descale).__name__}")
    if descale.dtype != torch.float32:
        raise InputError(f"{name} must have dtype torch.float32, got {descale.dtype}")
    if descale.device != q.device:
        raise InputError(f"{name} must be on the device of q ({q.device}), got {descale.device}")
    if tuple(descale.shape) != (batch, heads):
        raise InputError(f"{name} must have shape (batch_size, {'nheads' if name == 'q_descale' else 'nheads_k'}) = "
                         f"({batch}, {heads}), got {tuple(descale.shape)}")
    if descale.requires_grad:
        raise NotImplementedError(f"{name} requires grad: the fp8 (float8_e4m3fn) attention is forward only; "
                                  "its backward is not implemented")
    return descale.contiguous()


def _refuse_for_fp8(q, k, v, **given) -> None:
    """NotImplementedError naming what the fp8 forward does not do: a gradient, the training
    features, packed batches and the ablation switches (`given`: name -> whether it is in use)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError("the fp8 (float8_e4m3fn) attention is forward only: its backward is not "
                                  "implemented (q, k or v requires grad)")
    used = [name for name, on in given.items() if on]
    if used:
        raise NotImplementedError(f"{', '.join(used)} not supported with fp8 (float8_e4m3fn) inputs: the fp8 "
                                  "forward has the causal mask, softmax_scale, return_lse and fwd_tiles only")


def _negated_fp8(t: torch.Tensor) -> torch.Tensor:
    """-t for float8_e4m3fn (torch has no neg for it): the sign bit flipped, exactly."""
    return (t.view(torch.uint8) ^ 0x80).view(t.dtype)


def _hopper_gaps(q, k, v, opts: AttentionOptions, alibi, varlen: bool, tiles, switch: str = "hopper") -> list[str]:
    """Everything this call asks for that the Hopper forward (kernels/_hopper.py), or with
    switch="hopper_backward" the one-pass Hopper backward (kernels/_hopper_bwd.py), does not do;
    empty where it can run. `tiles`: the call's fwd_tiles (bwd_tiles for the backward)."""
    from kernels._hopper import hopper_unsupported

    used = opts.features + (["alibi_slopes"] if alibi is not None else [])
    covered = _hopper_features(switch, q.shape[-1])
    used = [name for name in used if name not in covered]
    used += [name for name, on in (("cu_seqlens_q/cu_seqlens_k (packed batches)", varlen),
                                   (f"algorithm={opts.algorithm!r}", opts.algorithm != "fa2"),
                                   ("fwd_tiles" if switch == "hopper" else "bwd_tiles", tiles is not None),
                                   ("recompute=False", not opts.recompute),
                                   ("deferred_rescale=False", switch == "hopper" and not opts.deferred_rescale),
                                   ("seq_parallel=False", not opts.seq_parallel),
                                   ("skip_masked_tiles=False", not opts.skip_masked_tiles),
                                   ("atomic_dq=True", switch != "hopper" and opts.atomic_dq)) if on]
    return used + hopper_unsupported(q, k, v, opts.causal, _hopper_head_dims(switch), window_right=opts.window_right,
                                     alibi=alibi is not None)


def _hopper_features(switch: str, head_dim: int) -> tuple[str, ...]:
    """The training features the Hopper forward (switch "hopper") or backward ("hopper_backward") has at
    this head dim (window, softcap, ALiBi; never dropout)."""
    from kernels import _hopper, _hopper_bwd

    kernel = _hopper if switch == "hopper" else _hopper_bwd
    return kernel.FEATURES if head_dim in kernel.FEATURE_HEAD_DIMS else ()


def hopper_features_by_default(switch: str, head_dim: int) -> frozenset[str]:
    """The training features with which flash_attention's default still runs the Hopper forward (switch
    "hopper") or backward ("hopper_backward") at this head dim: those HOPPER_FORWARD_FEATURES
    (HOPPER_BACKWARD_FEATURES) names that the kernel has there."""
    listed = HOPPER_FORWARD_FEATURES if switch == "hopper" else HOPPER_BACKWARD_FEATURES
    return listed & frozenset(_hopper_features(switch, head_dim))


def _hopper_head_dims(switch: str) -> tuple[int, ...]:
    """The head dims the Hopper forward (switch "hopper") or backward ("hopper_backward") covers."""
    from kernels import _hopper, _hopper_bwd

    return _hopper.HEAD_DIMS if switch == "hopper" else _hopper_bwd.HEAD_DIMS


def _check_hopper(q, k, v, opts: AttentionOptions, alibi, varlen: bool, tiles, switch: str = "hopper") -> None:
    """NotImplementedError naming everything a hopper=True (or hopper_backward=True) call asks for
    that the Hopper kernel lacks; nothing is ignored or quietly sent elsewhere."""
    used = _hopper_gaps(q, k, v, opts, alibi, varlen, tiles, switch)
    if used:
        from kernels._hopper import spoken

        which = "forward" if switch == "hopper" else "backward"
        raise NotImplementedError(f"{switch}=True does not support {'; '.join(used)}: the Hopper {which} covers "
                                  f"float16/bfloat16, head dims {spoken(_hopper_head_dims(switch))}, causal and full "
                                  "masks, sliding windows, softcap, ALiBi and GQA "
                                  "on sm_90 "
                                  f"(call without {switch}=True for the portable kernels)")


@functools.lru_cache(maxsize=None)
def _is_sm90(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) == (9, 0)


def hopper_forward_by_default(head_dim: int, seqlen_k: int, device: torch.device) -> bool:
    """Whether flash_attention(hopper=None), the default, runs the Hopper forward on `device` for
    `seqlen_k` keys at this head dim where the kernel covers the call: sm_90 (not under Triton's
    interpreter), a head dim of HOPPER_FORWARD_MIN_KEYS and at least its number of keys."""
    if (device.type != "cuda" or _interpreter_on() or head_dim not in HOPPER_FORWARD_MIN_KEYS
            or seqlen_k < HOPPER_FORWARD_MIN_KEYS[head_dim]):
        return False
    return _is_sm90(device.index if device.index is not None else torch.cuda.current_device())


def hopper_backward_by_default(head_dim: int, causal: bool, device: torch.device) -> bool:
    """Whether flash_attention(hopper_backward=None, deterministic=False), the default, runs the Hopper
    backward on `device` where the kernel covers the call: sm_90 (not under Triton's interpreter) and
    (head_dim, causal) in HOPPER_BACKWARD_DEFAULTS."""
    if device.type != "cuda" or _interpreter_on() or (head_dim, bool(causal)) not in HOPPER_BACKWARD_DEFAULTS:
        return False
    return _is_sm90(device.index if device.index is not None else torch.cuda.current_device())


def _draw_dropout_seed(device: torch.device) -> torch.Tensor:
    """One Philox seed from torch's default generator of `device` (drawn there: no host-device
    copy), so torch.manual_seed reproduces the mask."""
    return torch.randint(0, 2**62, (1,), dtype=torch.int64, device=device)


class _Plan(NamedTuple):
    """What `flash_attention`'s checks resolve a call to, kept for the calls that repeat it."""
    options: str  # the encoded AttentionOptions, the Hopper kernels' choice included
    negate_q: bool  # softmax_scale < 0: the kernels run on -q with |scale|


# Plans by `_plan_key`; a training loop makes a handful. Past the bound the dict is cleared and refilled.
_PLANS: dict = {}
MAX_PLANS = 1024


def _plan_key(q, k, v, arguments: tuple) -> tuple | None:
    """Everything `flash_attention`'s checks read of a call without tensors besides q, k and v: each
    tensor's type, shape, strides, dtype, device and whether its address is 16-byte aligned (the Hopper
    kernels' condition), whether the interpreter is on, and each other argument with its type (so that a
    value the checks refuse, such as dropout_p=False, never matches an accepted 0.0). None where an
    argument cannot be a key (the checks then say what is wrong with it)."""
    try:
        window = arguments[2]
        key = (type(q), q.shape, q.stride(), q.dtype, q.device, q.data_ptr() & 15 == 0,
                type(k), k.shape, k.stride(), k.dtype, k.device, k.data_ptr() & 15 == 0,
                type(v), v.shape, v.stride(), v.dtype, v.device, v.data_ptr() & 15 == 0,
                _interpreter_on(), tuple(map(type, arguments)), tuple(map(type, window)), arguments)
        hash(key)
        return key
    except (AttributeError, TypeError, RuntimeError):  # not tensors, an unhashable or odd argument
        return None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    softmax_scale: float | None = None, return_lse: bool = False, *,
                    window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: torch.Tensor | None = None, dropout_p: float = 0.0, return_probs: bool = False,
                    deterministic: bool = False, atomic_dq: bool = False, fwd_tiles: TileConfig | None = None, bwd_tiles: TileConfig | None = None,
                    recompute: bool = True, deferred_rescale: bool = True, seq_parallel: bool = True,
                    skip_masked_tiles: bool = True, algorithm: str = "fa2",
                    cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None,
                    max_seqlen_q: int = 0, max_seqlen_k: int = 0, q_descale: torch.Tensor | None = None,
                    k_descale: torch.Tensor | None = None, v_descale: torch.Tensor | None = None,
                    hopper: bool | None = None, hopper_overlap: bool = True,
                    hopper_backward: bool | None = None):
    """Exact attention softmax(q k^T * scale) v with FlashAttention-2 kernels (or FlashAttention-1's).

    Args:
        q: (B, H, Nq, D) float16 or bfloat16, any strides.
        k, v: (B, Hkv, Nk, D), same dtype and device; H must be a multiple of Hkv (grouped-query
            and multi-query attention); D between 1 and 256.
        causal: mask aligned to the bottom-right corner: query i sees keys j <= i + Nk - Nq.
            Query rows that see no key get an output of 0 and a log-sum-exp of -inf.
        softmax_scale: defaults to 1 / sqrt(D).
        return_lse: also return the log-sum-exp (B, H, Nq), float32, natural log. It carries no
            gradient (requires_grad=False): a loss that uses it gets none through it.

    Training features (keyword-only; flash-attn 2.8's semantics, forward and backward):
        window_size: (left, right), -1 = unbounded: query i sees key j iff
            i + Nk - Nq - left <= j <= i + Nk - Nq + right. causal=True sets right = 0. Key
            tiles outside every row's window are skipped, not masked.
        softcap: > 0 caps the scores: softcap * tanh(scale * q.k / softcap), then the softmax.
        alibi_slopes: float32 (H,) or (B, H): adds -slope * |i + Nk - Nq - j| to the (scaled,
            capped) scores, with or without causal. It gets no gradient.
        dropout_p: in [0, 1): drops each probability with this chance and scales the rest by
            1 / (1 - dropout_p); the mask comes from Philox (counters: key, query, batch x head),
            seeded by one draw from torch's default generator of q's device (torch.manual_seed
            reproduces it), regenerated in the backward, never stored. lse is that of the
            undropped softmax.
        return_probs: also return (last) the probabilities the forward used, (B, H, Nq, Nk)
            float32, 0 where masked and negated where dropout dropped them (flash-attn's S_dmask
            convention: the kept mask is probs >= 0). A slow debug launch; for tests.
        deterministic: flash-attn's keyword (default False, as there). True makes the backward
            bitwise reproducible: the portable backward, whose dQ has its own kernel, and a
            ValueError with atomic_dq=True or hopper_backward=True. False lets the default pick
            the Hopper backward (below), whose dQ is a sum of TMA reduce-adds in any order.

    Ablation switches (keyword-only; the defaults are FlashAttention-2):
        algorithm: "fa2" (the default) or "fa1": both passes run FlashAttention-1's kernels
            (Dao et al. 2022, Algorithms 1 and 4; see kernels/_fa1.py): one program per
            (batch, head), key blocks in the outer loop, query blocks in the inner loop, O, l, m
            (dQ in the backward) read from and written to HBM on every step, O rescaled and
            normalised on every step. The switches below except the tiles are ablations of the
            FA2 kernels: with "fa1" they must keep their defaults, or ValueError is raised; the
            training features above raise NotImplementedError with "fa1".
        fwd_tiles, bwd_tiles: a TileConfig overriding `default_tiles(D, "fwd" | "bwd")` (with
            "fa1", `kernels._fa1.fa1_default_tiles`; block_m is the streamed query tile and
            block_n the resident key tile in both of its passes). A default
            config that does not fit the GPU with the chosen switches steps down to a smaller
            one; an explicit config that does not fit raises triton's OutOfResources.
        recompute: False makes the forward store the scores (float32, Nq x Nk per head) and the
            backward read them instead of recomputing Q K^T (not with the training features:
            NotImplementedError).
        deferred_rescale: False rescales and normalises the output accumulator on every key
            tile, as FlashAttention-1 does.
        seq_parallel: False runs one program per (batch, head) over all query blocks, as
            FlashAttention-1 does, instead of one per (query block, batch, head).
        skip_masked_tiles: False makes causal and windowed attention compute every tile and mask it.
        atomic_dq: True accumulates dQ with float32 atomic adds inside the dK/dV kernel (the
            paper's scheme: 5 matmuls per tile pair instead of 7; measured slower on the H200)
            instead of the separate dQ kernel; dQ may then differ in its last bits between runs.

    Packed (variable-length) batch, keyword-only (flash_attn_varlen_func's kernels):
        cu_seqlens_q, cu_seqlens_k: int32 (B + 1,) token offsets on q's device; q is then
            (1, H, total_q, D), k, v (1, Hkv, total_k, D), and sequence b holds query tokens
            cu_seqlens_q[b]:cu_seqlens_q[b + 1] and key tokens cu_seqlens_k[b]:cu_seqlens_k[b + 1].
            Each attends only within itself; masks are aligned per sequence; (B, H) ALiBi slopes
            give row b to sequence b; dropout counters use b as the batch index. One launch per
            pass covers the batch. The offsets are not read on the host: the caller checks them
            (start at 0, non-decreasing, end at the token counts; no sequence with queries and
            no keys).
        max_seqlen_q, max_seqlen_k: at least the longest sequence; they size the grid.
        lse is then (1, H, total_q) and the probabilities (B, H, max_seqlen_q, max_seqlen_k),
        each sequence at the top left. Not with algorithm="fa1", recompute=False or
        seq_parallel=False (NotImplementedError).

    fp8 (e4m3) forward, keyword-only descales (FlashAttention-3's convention):
        q, k, v may all be torch.float8_e4m3fn; the true inputs are then q * q_descale[b, h],
        k * k_descale[b, hkv], v * v_descale[b, hkv].
        q_descale: float32 (B, H); k_descale, v_descale: float32 (B, Hkv); on q's device; None
            means 1.0. They must be >= 0 (not checked: that would wait for the device). With
            float16/bfloat16 inputs a descale is a ValueError.
        The output is bfloat16 (as FlashAttention-3's), lse float32. Q K^T runs in fp8 with
        float32 accumulation, scaled by softmax_scale * q_descale * k_descale; P is rounded to
        e4m3 for P V (as FlashAttention-3 does; the row sums are those of the float32 P), which
        bounds the accuracy: about 2-3 % relative RMS error of the output against the float64
        attention of the dequantised inputs (notes/fp8_probe_trial_h200.csv). V is copied into
        a (B, Hkv, D, Nk) transposed layout on every call (fp8 tensor cores want P V's V with
        the keys contiguous). Forward only: q, k or v requiring grad raises NotImplementedError,
        as do the training features, return_probs, packed batches, algorithm="fa1", bwd_tiles
        and the ablation switches (recompute, deferred_rescale, seq_parallel,
        skip_masked_tiles, atomic_dq away from their defaults); `deterministic` is accepted (the
        forward is deterministic). `flash_attn_func` and the rest of
        flash-attn 2.8's API take float16/bfloat16 only.

    Hopper forward, keyword-only:
        hopper: None (the default) picks the forward per call: on sm_90 at the head dims of
            HOPPER_FORWARD_MIN_KEYS (96, 128, 192, 256, and 64 from 4096 keys) the Hopper kernel where it covers the call (below),
            the portable FlashAttention-2 forward everywhere else; `hopper_forward_by_default`
            says which. True runs the forward on kernels/_hopper.py (sm_90 only: TMA loads by a
            warp-specialised producer warp, two consumer warpgroups on asynchronous wgmma with
            the softmax of one key tile overlapped with P V of the previous one) and False on
            the portable kernel (the ablations of the FlashAttention-2 kernels pin it). The
            backward is chosen on its own (`hopper_backward`), fed by the forward's output and lse. The
            Hopper forward covers float16 and bfloat16, head dims 64, 96, 128, 192 and 256 (96 and
            192 in the tiles of 128 and 256), causal
            (seqlen_q <= seqlen_k) and full masks, sliding windows (where every query sees a
            key), softcap and ALiBi, grouped-query attention, and inputs whose
            heads' rows are contiguous ((B, H, N, D) dense); with hopper=True anything else,
            including dropout, packed batches, fwd_tiles and the forward's
            ablation switches, raises NotImplementedError naming it (with None it falls back).
            Its output is contiguous. With a window, softcap or ALiBi the default takes the Hopper
            kernels only for the features HOPPER_FORWARD_FEATURES (HOPPER_BACKWARD_FEATURES for the
            backward) names.
        hopper_overlap: with hopper=True, False runs the consumers serially (S, softmax, P V,
            one tile after another): the ablation of the overlap. Without hopper=True it must
            stay True (ValueError).
        hopper_backward: None (the default) picks the backward per call: with
            deterministic=False, on sm_90 at the (head dim, causal) pairs of
            HOPPER_BACKWARD_DEFAULTS, the Hopper backward where it covers the call, the portable
            one everywhere else; `hopper_backward_by_default` says which. True runs it on
            kernels/_hopper_bwd.py (sm_90 only; one warp-specialised pass: Q and dO streamed by
            TMA, dK and dV in registers, dQ added into a float32 accumulator by TMA reduce-add
            instead of the portable backward's separate dQ kernel), after either forward; False
            the portable backward (the ablations of the FlashAttention-2 kernels pin it). Same
            coverage as hopper=True at head dims 64, 128, 192 and 256, and not with bwd_tiles (its tiles are
            fixed), else NotImplementedError; not bitwise reproducible, so deterministic=True with it
            is a ValueError.

    Returns o (B, H, Nq, D), laid out like q where q is dense (bfloat16 for fp8 inputs), then
    lse with return_lse, then the probabilities with return_probs (a tuple when either is set).
    """
    def result(out, lse, probs):
        extra = ((lse,) if return_lse else ()) + ((probs,) if return_probs else ())
        return (out, *extra) if extra else out

    # A repeated call (same tensor layouts and arguments) takes its options from the plan its first
    # call resolved, without the checks below (the calls that carry tensors besides q, k, v resolve
    # every time).
    key = None
    if (alibi_slopes is None and cu_seqlens_q is None and cu_seqlens_k is None and fwd_tiles is None
            and bwd_tiles is None and q_descale is None and k_descale is None and v_descale is None
            and not torch.compiler.is_compiling()):
        key = _plan_key(q, k, v, (causal, softmax_scale, window_size, softcap, dropout_p, deterministic, atomic_dq,
                                  recompute, deferred_rescale, seq_parallel, skip_masked_tiles, algorithm, hopper,
                                  hopper_overlap, hopper_backward))
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        alibi = None
        varlen = False
        if plan.negate_q:
            q = q.neg()
        options = plan.options
    else:
        check_inputs(q, k, v, fp8=True)
        fp8 = q.dtype == FP8_DTYPE
        if not fp8 and any(d is not None for d in (q_descale, k_descale, v_descale)):
            raise InputError(f"q_descale, k_descale and v_descale are for torch.float8_e4m3fn inputs; q, k, v have "
                             f"dtype {q.dtype}")
        _check_algorithm(algorithm)
        if hopper is not None and not isinstance(hopper, bool):
            raise InputError(f"hopper must be None (the default: chosen per call), True or False, got {hopper!r}")
        if hopper_backward is not None and not isinstance(hopper_backward, bool):
            raise InputError(f"hopper_backward must be None (the default: chosen per call), True or False, "
                             f"got {hopper_backward!r}")
        if hopper is not True and not hopper_overlap:
            raise InputError("hopper_overlap=False is a switch of the Hopper forward: it needs hopper=True")
        varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        batch = _check_varlen_args(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) if varlen else q.shape[0]
        window_left, window_right = _check_window(window_size)
        if not isinstance(softcap, numbers.Real) or isinstance(softcap, bool) or not math.isfinite(softcap) or softcap < 0:
            raise InputError(f"softcap must be a finite float >= 0 (0: off), got {softcap!r}")
        if (not isinstance(dropout_p, numbers.Real) or isinstance(dropout_p, bool)
                or not 0.0 <= dropout_p < 1.0):
            raise InputError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
        alibi = _check_alibi(alibi_slopes, q, batch)
        if deterministic and atomic_dq:
            raise InputError("deterministic=True cannot be combined with atomic_dq=True (atomic adds give up bitwise "
                             "determinism)")
        if deterministic and hopper_backward is True:
            raise InputError("deterministic=True cannot be combined with hopper_backward=True (its dQ is a sum of "
                             "TMA reduce-adds in any order)")
        if algorithm == "fa1":
            fa2_only = dict(recompute=True, deferred_rescale=True, seq_parallel=True, skip_masked_tiles=True,
                            atomic_dq=False)
            given = dict(recompute=recompute, deferred_rescale=deferred_rescale, seq_parallel=seq_parallel,
                         skip_masked_tiles=skip_masked_tiles, atomic_dq=atomic_dq)
            conflicts = [f"{name}={given[name]!r}" for name, default in fa2_only.items() if bool(given[name]) != default]
            if conflicts:
                raise InputError(f"algorithm='fa1' cannot be combined with {', '.join(conflicts)}: "
                                 "those switches are ablations of the FlashAttention-2 kernels")
        head_dim = q.shape[-1]
        if softmax_scale is None:
            softmax_scale = 1.0 / math.sqrt(head_dim)
        elif not math.isfinite(softmax_scale):
            raise InputError(f"softmax_scale must be finite, got {softmax_scale}")
        q_given = q
        if softmax_scale < 0:
            # The kernels subtract the running max of the scaled scores, which they take as the max of
            # the unscaled scores times the scale; a negative scale would turn that into the minimum
            # (exp overflow, NaN). Scaling -q by |scale| gives the same scores, and the gradient flows
            # back through the negation.
            q, softmax_scale = (_negated_fp8(q) if fp8 else q.neg()), -softmax_scale
        negate_q = q is not q_given
        for name, tiles in (("fwd_tiles", fwd_tiles), ("bwd_tiles", bwd_tiles)):
            if tiles is not None and not isinstance(tiles, TileConfig):
                raise InputError(f"{name} must be a kernels.TileConfig or None, got {type(tiles).__name__}")
        if fp8:
            _refuse_for_fp8(q, k, v, window_size=(window_left, window_right) != (-1, -1), softcap=softcap > 0,
                            alibi_slopes=alibi is not None, dropout_p=dropout_p > 0, return_probs=bool(return_probs),
                            **{"cu_seqlens_q/cu_seqlens_k (packed batches)": varlen,
                               "algorithm='fa1'": algorithm == "fa1", "bwd_tiles": bwd_tiles is not None,
                               "atomic_dq=True": bool(atomic_dq), "recompute=False": not recompute,
                               "deferred_rescale=False": not deferred_rescale, "seq_parallel=False": not seq_parallel,
                               "skip_masked_tiles=False": not skip_masked_tiles, "hopper=True": hopper is True,
                               "hopper_backward=True": hopper_backward is True})
            kv_heads = k.shape[1]
            descales = (_check_descale("q_descale", q_descale, batch, q.shape[1], q),
                        _check_descale("k_descale", k_descale, batch, kv_heads, q),
                        _check_descale("v_descale", v_descale, batch, kv_heads, q))
            if q.numel() == 0:
                out = torch.empty_like(q, dtype=torch.bfloat16)
                lse = q.new_empty(q.shape[:3], dtype=torch.float32)
                return (out, lse) if return_lse else out
            opts = AttentionOptions(softmax_scale=float(softmax_scale), causal=bool(causal),
                                    fwd_tiles=_tile_list(fwd_tiles or default_tiles(head_dim, "fwd", fp8=True)),
                                    fit_fwd_tiles=fwd_tiles is None)
            forward = torch.ops.flash_attn_triton.fwd_fp8 if torch.compiler.is_compiling() else _fp8_forward_impl
            out, lse = forward(q, k, v, *descales, opts.encode())
            return (out, lse) if return_lse else out
        # Default configs may step down where a switch needs more on-chip memory; explicit ones may not.
        opts = AttentionOptions(
            softmax_scale=float(softmax_scale), causal=bool(causal), window_left=window_left, window_right=window_right,
            softcap=float(softcap), dropout_p=float(dropout_p),
            fwd_tiles=_tile_list(fwd_tiles or default_tiles_for(head_dim, "fwd", algorithm, dropout_p)),
            bwd_tiles=_tile_list(bwd_tiles or default_tiles_for(head_dim, "bwd", algorithm, dropout_p, bool(atomic_dq))),
            fit_fwd_tiles=fwd_tiles is None, fit_bwd_tiles=bwd_tiles is None,
            recompute=bool(recompute), deferred_rescale=bool(deferred_rescale), seq_parallel=bool(seq_parallel),
            skip_masked_tiles=bool(skip_masked_tiles), atomic_dq=bool(atomic_dq), algorithm=algorithm,
            max_seqlen_q=int(max_seqlen_q) if varlen else 0, max_seqlen_k=int(max_seqlen_k) if varlen else 0,
            hopper=bool(hopper), hopper_overlap=bool(hopper_overlap), hopper_backward=hopper_backward is True)
        if varlen:
            check_varlen(opts, cu_seqlens_q, cu_seqlens_k)
        features = opts.features + (["alibi_slopes"] if alibi is not None else [])
        if features and algorithm == "fa1":
            raise NotImplementedError(f"{', '.join(features)} not supported with algorithm='fa1'")
        if features and not recompute:
            raise NotImplementedError(f"{', '.join(features)} not supported with recompute=False (stored scores)")

        if hopper:
            _check_hopper(q, k, v, opts, alibi, varlen, fwd_tiles)
        if hopper_backward:
            _check_hopper(q, k, v, opts, alibi, varlen, bwd_tiles, switch="hopper_backward")
        default_forward = hopper is None and hopper_forward_by_default(head_dim, k.shape[2], q.device)
        features_by_default = hopper_features_by_default("hopper", head_dim).issuperset(features)
        backward_features_by_default = hopper_features_by_default("hopper_backward", head_dim).issuperset(features)
        default_backward = (hopper_backward is None and not deterministic
                            and hopper_backward_by_default(head_dim, causal, q.device))
        if default_forward or default_backward:
            opts = dataclasses.replace(
                opts, hopper=opts.hopper or (default_forward and features_by_default
                                             and not _hopper_gaps(q, k, v, opts, alibi, varlen, fwd_tiles)),
                hopper_backward=opts.hopper_backward or (default_backward and backward_features_by_default
                                                         and not _hopper_gaps(
                    q, k, v, opts, alibi, varlen, bwd_tiles, switch="hopper_backward")))

        if q.numel() == 0:  # empty batch, heads or queries: nothing to launch
            out = torch.empty_like(q)
            lse = q.new_empty(q.shape[:3], dtype=torch.float32)
            probs_shape = (batch, q.shape[1], max_seqlen_q, max_seqlen_k) if varlen else (*q.shape[:3], k.shape[2])
            return result(out, lse, q.new_zeros(probs_shape, dtype=torch.float32))
        options = opts.encode()
        if key is not None:
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = _Plan(options, negate_q)

    # 2026-11 (torch 2.13): dynamo refuses autograd.Function.apply when one tensor is passed
    # as several inputs (self-attention with q = k = v); a view gives each input its own
    # identity at no cost, and its gradient still flows back to the shared tensor.
    if k is q:
        k = k.view_as(k)
    if v is q or v is k:
        v = v.view_as(v)
    if varlen and cu_seqlens_k is cu_seqlens_q:  # self-attention's one cu_seqlens: the same rule
        cu_seqlens_k = cu_seqlens_k.view_as(cu_seqlens_k)
    seed = _draw_dropout_seed(q.device) if dropout_p > 0 else None
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        # Nothing to differentiate: the forward alone, without autograd's per-call cost.
        forward = torch.ops.flash_attn_triton.fwd if torch.compiler.is_compiling() else _forward_impl
        out, lse, _ = forward(q, k, v, alibi, seed, options, cu_seqlens_q, cu_seqlens_k)
    elif varlen:
        out, lse = FlashAttentionFunction.apply(q, k, v, alibi, seed, options, cu_seqlens_q, cu_seqlens_k)
    else:
        out, lse = FlashAttentionFunction.apply(q, k, v, alibi, seed, options)
    probs = None
    if return_probs:
        with torch.no_grad(), _launch_device(q):
            probs = attention_probs(q.detach(), k.detach(), lse, AttentionOptions.decode(options), alibi, seed,
                                    cu_seqlens_q, cu_seqlens_k)
    return result(out, lse, probs)
