"""The PyTorch-facing attention op: input checks, torch.library registration, autograd.

`flash_attention(q, k, v, ...)` takes the (B, H, N, D) layout of
`torch.nn.functional.scaled_dot_product_attention`; flash-attn's API (`flash_attn_func` and the
rest, (B, N, H, D) layout) is in `flash_attn_interface.py` and reaches the same op through strides.

The forward and backward launches are registered as custom ops (`flash_attn_triton::fwd`,
`flash_attn_triton::bwd`) with fake (meta) implementations, and a `torch.autograd.Function`
ties them together, so `torch.compile(..., fullgraph=True)` traces a model that calls
`flash_attention` without a graph break.

Every switch of the ablations is a keyword argument here (see `flash_attention`); none of them
changes the result beyond rounding, except that `atomic_dq=True` gives up bitwise determinism.
`algorithm="fa1"` swaps both passes for FlashAttention-1's own kernels (`_fa1.py`: one program
per (batch, head), key blocks outside, query blocks inside, O, l, m and dQ through HBM every
step); the other switches are ablations of the FA2 kernels and must keep their defaults with it.
"""

from __future__ import annotations

import contextlib
import math
import os

import torch

from kernels._backward import attention_backward
from kernels._fa1 import fa1_backward, fa1_default_tiles, fa1_forward
from kernels._forward import attention_forward
from kernels.tiles import MAX_HEAD_DIM, TileConfig, default_tiles

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
ALGORITHMS = ("fa2", "fa1")


def _interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


if _interpreter_on():
    from kernels import _interpreter

    _interpreter.install()


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError naming the problem if q, k, v cannot go to the kernels."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (batch, heads, seqlen, head_dim), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} has dtype {t.dtype}; supported dtypes are torch.float16 and torch.bfloat16")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.device.type == "cpu":
        if not _interpreter_on():
            raise ValueError("CPU tensors need the Triton interpreter (set TRITON_INTERPRET=1); "
                             "otherwise move q, k, v to a CUDA device")
    elif q.device.type != "cuda":
        raise ValueError(f"q, k, v must be CUDA tensors (or CPU tensors under TRITON_INTERPRET=1), got {q.device}")
    (b, h, n_q, d), (bk, hk, n_k, dk), (bv, hv, n_v, dv) = q.shape, k.shape, v.shape
    if not (b == bk == bv):
        raise ValueError(f"batch size mismatch: q {b}, k {bk}, v {bv}")
    if not (d == dk == dv):
        raise ValueError(f"head dim mismatch: q {d}, k {dk}, v {dv}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dim {d} is not supported: it must be between 1 and {MAX_HEAD_DIM}")
    if hk != hv:
        raise ValueError(f"k and v must have the same number of heads, got {hk} and {hv}")
    if n_k != n_v:
        raise ValueError(f"k and v must have the same sequence length, got {n_k} and {n_v}")
    if hk == 0 or h % hk != 0:
        raise ValueError(f"the number of query heads ({h}) must be a multiple of the number of key/value heads ({hk})")
    if n_k == 0 and n_q > 0:
        raise ValueError("k and v must hold at least one key (seqlen_k = 0)")


# --------------------------------------------------------------------------------------------
# torch.library ops: one per pass; tile configs travel as ints so the schema stays simple.
# --------------------------------------------------------------------------------------------

def _launch_device(t: torch.Tensor):
    """Triton launches on the current CUDA device: make it the inputs' (e.g. tensors on cuda:1)."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, got {algorithm!r}")


@torch.library.custom_op("flash_attn_triton::fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
            tiles: list[int], fit_tiles: bool, store_scores: bool, deferred_rescale: bool, seq_parallel: bool,
            skip_masked_tiles: bool, algorithm: str = "fa2") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_algorithm(algorithm)
    with _launch_device(q):
        if algorithm == "fa1":
            out, lse = fa1_forward(q, k, v, softmax_scale, causal, TileConfig(*tiles), fit_tiles=fit_tiles)
            return out, lse, q.new_empty((0,), dtype=torch.float32)
        return attention_forward(q, k, v, softmax_scale, causal, TileConfig(*tiles), fit_tiles=fit_tiles,
                                 store_scores=store_scores, deferred_rescale=deferred_rescale,
                                 seq_parallel=seq_parallel, skip_masked_tiles=skip_masked_tiles)


@_fwd_op.register_fake
def _(q, k, v, softmax_scale, causal, tiles, fit_tiles, store_scores, deferred_rescale, seq_parallel,
      skip_masked_tiles, algorithm="fa2"):
    b, h, n_q, _ = q.shape
    scores_shape = (b, h, n_q, k.shape[2]) if store_scores and algorithm == "fa2" else (0,)
    return (torch.empty_like(q), q.new_empty((b, h, n_q), dtype=torch.float32),
            q.new_empty(scores_shape, dtype=torch.float32))


@torch.library.custom_op("flash_attn_triton::bwd", mutates_args=())
def _bwd_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
            lse: torch.Tensor, scores: torch.Tensor, softmax_scale: float, causal: bool, tiles: list[int],
            fit_tiles: bool, use_scores: bool, skip_masked_tiles: bool, atomic_dq: bool, algorithm: str = "fa2"
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_algorithm(algorithm)
    with _launch_device(q):
        if algorithm == "fa1":
            return fa1_backward(do, q, k, v, out, lse, softmax_scale, causal, TileConfig(*tiles), fit_tiles=fit_tiles)
        return attention_backward(do, q, k, v, out, lse, scores, softmax_scale, causal, TileConfig(*tiles),
                                  fit_tiles=fit_tiles, use_scores=use_scores, skip_masked_tiles=skip_masked_tiles,
                                  atomic_dq=atomic_dq)


@_bwd_op.register_fake
def _(do, q, k, v, out, lse, scores, softmax_scale, causal, tiles, fit_tiles, use_scores, skip_masked_tiles,
      atomic_dq, algorithm="fa2"):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _tile_list(tiles: TileConfig) -> list[int]:
    return [tiles.block_m, tiles.block_n, tiles.num_warps, tiles.num_stages]


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd for the two ops; the log-sum-exp output is not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, fwd_tiles, bwd_tiles, fit_tiles, recompute,
                deferred_rescale, seq_parallel, skip_masked_tiles, atomic_dq, algorithm):
        out, lse, scores = torch.ops.flash_attn_triton.fwd(
            q, k, v, softmax_scale, causal, fwd_tiles, fit_tiles[0], not recompute, deferred_rescale,
            seq_parallel, skip_masked_tiles, algorithm)
        ctx.save_for_backward(q, k, v, out, lse, scores)
        ctx.softmax_scale = softmax_scale
        ctx.causal = causal
        ctx.bwd_tiles = bwd_tiles
        ctx.fit_bwd_tiles = fit_tiles[1]
        ctx.recompute = recompute
        ctx.skip_masked_tiles = skip_masked_tiles
        ctx.atomic_dq = atomic_dq
        ctx.algorithm = algorithm
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, scores = ctx.saved_tensors
        dq, dk, dv = torch.ops.flash_attn_triton.bwd(
            d_out, q, k, v, out, lse, scores, ctx.softmax_scale, ctx.causal, ctx.bwd_tiles,
            ctx.fit_bwd_tiles, not ctx.recompute, ctx.skip_masked_tiles, ctx.atomic_dq, ctx.algorithm)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    softmax_scale: float | None = None, return_lse: bool = False, *,
                    fwd_tiles: TileConfig | None = None, bwd_tiles: TileConfig | None = None,
                    recompute: bool = True, deferred_rescale: bool = True, seq_parallel: bool = True,
                    skip_masked_tiles: bool = True, atomic_dq: bool = False, algorithm: str = "fa2"):
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

    Ablation switches (keyword-only; the defaults are FlashAttention-2):
        algorithm: "fa2" (the default) or "fa1": both passes run FlashAttention-1's kernels
            (Dao et al. 2022, Algorithms 1 and 4; see kernels/_fa1.py): one program per
            (batch, head), key blocks in the outer loop, query blocks in the inner loop, O, l, m
            (dQ in the backward) read from and written to HBM on every step, O rescaled and
            normalised on every step. The switches below except the tiles are ablations of the
            FA2 kernels: with "fa1" they must keep their defaults, or ValueError is raised.
        fwd_tiles, bwd_tiles: a TileConfig overriding `default_tiles(D, "fwd" | "bwd")` (with
            "fa1", `kernels._fa1.fa1_default_tiles`; block_m is the streamed query tile and
            block_n the resident key tile in both of its passes). A default
            config that does not fit the GPU with the chosen switches steps down to a smaller
            one; an explicit config that does not fit raises triton's OutOfResources.
        recompute: False makes the forward store the scores (float32, Nq x Nk per head) and the
            backward read them instead of recomputing Q K^T.
        deferred_rescale: False rescales and normalises the output accumulator on every key
            tile, as FlashAttention-1 does.
        seq_parallel: False runs one program per (batch, head) over all query blocks, as
            FlashAttention-1 does, instead of one per (query block, batch, head).
        skip_masked_tiles: False makes causal attention compute every tile and mask it.
        atomic_dq: True accumulates dQ with atomic adds inside the dK/dV kernel (the paper's
            scheme; not deterministic) instead of the separate dQ kernel.

    Returns o (B, H, Nq, D), laid out like q where q is dense, or (o, lse) with return_lse.
    """
    check_inputs(q, k, v)
    _check_algorithm(algorithm)
    if algorithm == "fa1":
        fa2_only = dict(recompute=True, deferred_rescale=True, seq_parallel=True, skip_masked_tiles=True,
                        atomic_dq=False)
        given = dict(recompute=recompute, deferred_rescale=deferred_rescale, seq_parallel=seq_parallel,
                     skip_masked_tiles=skip_masked_tiles, atomic_dq=atomic_dq)
        conflicts = [f"{name}={given[name]!r}" for name, default in fa2_only.items() if bool(given[name]) != default]
        if conflicts:
            raise ValueError(f"algorithm='fa1' cannot be combined with {', '.join(conflicts)}: "
                             "those switches are ablations of the FlashAttention-2 kernels")
    head_dim = q.shape[-1]
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)
    elif not math.isfinite(softmax_scale):
        raise ValueError(f"softmax_scale must be finite, got {softmax_scale}")
    if softmax_scale < 0:
        # The kernels subtract the running max of the scaled scores, which they take as the max of
        # the unscaled scores times the scale; a negative scale would turn that into the minimum
        # (exp overflow, NaN). Scaling -q by |scale| gives the same scores, and the gradient flows
        # back through the negation.
        q, softmax_scale = q.neg(), -softmax_scale
    for name, tiles in (("fwd_tiles", fwd_tiles), ("bwd_tiles", bwd_tiles)):
        if tiles is not None and not isinstance(tiles, TileConfig):
            raise ValueError(f"{name} must be a kernels.TileConfig or None, got {type(tiles).__name__}")
    # Default configs may step down where a switch needs more on-chip memory; explicit ones may not.
    fit_tiles = (fwd_tiles is None, bwd_tiles is None)
    choose_tiles = fa1_default_tiles if algorithm == "fa1" else default_tiles
    fwd_tiles = fwd_tiles or choose_tiles(head_dim, "fwd")
    bwd_tiles = bwd_tiles or choose_tiles(head_dim, "bwd")

    if q.numel() == 0:  # empty batch, heads or queries: nothing to launch
        out = torch.empty_like(q)
        lse = q.new_empty(q.shape[:3], dtype=torch.float32)
        return (out, lse) if return_lse else out

    # 2026-11 (torch 2.13): dynamo refuses autograd.Function.apply when one tensor is passed
    # as several inputs (self-attention with q = k = v); a view gives each input its own
    # identity at no cost, and its gradient still flows back to the shared tensor.
    if k is q:
        k = k.view_as(k)
    if v is q or v is k:
        v = v.view_as(v)
    out, lse = FlashAttentionFunction.apply(
        q, k, v, float(softmax_scale), bool(causal), _tile_list(fwd_tiles), _tile_list(bwd_tiles), fit_tiles,
        bool(recompute), bool(deferred_rescale), bool(seq_parallel), bool(skip_masked_tiles), bool(atomic_dq),
        algorithm)
    return (out, lse) if return_lse else out

