"""The attention implementations under test, behind one interface.

`attention(cell, device)` returns fn(q, k, v) -> o for the cell's provider:
  ours            kernels.flash_attention with the cell's tile config and ablation switches (without
                  switches its defaults: the Hopper forward on sm_90 at head dim 128)
  standard        PyTorch standard attention (matmul, softmax, matmul in the input precision):
                  kernels.reference.standard_attention
  sdpa_flash, sdpa_efficient, sdpa_cudnn
                  torch.nn.functional.scaled_dot_product_attention pinned to one backend
  flex            FlexAttention through torch.compile (compiled once per shape), causal by block mask
The `features` ablation's arms are built by experiments/features.py. A provider that cannot run a cell raises Unsupported; the runner records it as such. q is (B, H, Nq, D),
k and v (B, Hkv, Nk, D); causal masks align bottom-right, as in the reference.
"""
import dataclasses
import functools
import zlib

import torch
import torch.nn.functional as F

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
GPU_ONLY = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex")


class Unsupported(Exception):
    """This provider cannot run this cell (a row with status "unsupported" and the reason)."""


def attention(cell, device: torch.device):
    if cell.provider in GPU_ONLY and device.type != "cuda":
        raise Unsupported(f"{cell.provider} needs a CUDA GPU")
    if cell.experiment == "features":  # the feature arms (window, softcap, ALiBi, dropout, varlen)
        from experiments import features

        return features.attention(cell, device)
    return _BUILDERS[cell.provider](cell)


def inputs(cell, device: torch.device):
    """q, k, v (requiring grad) and an output gradient, random normal, alike for every provider of a shape."""
    if cell.experiment == "features" and dict(cell.switches).get("lengths") and cell.variant != "padded":
        from experiments import features  # packed variable-length tokens

        return features.inputs(cell, device)
    shape = (cell.batch, cell.heads, cell.kv_heads, cell.seqlen_q, cell.seqlen_k, cell.head_dim, cell.dtype)
    generator = torch.Generator(device=device).manual_seed(zlib.crc32(repr(shape).encode()))

    def randn(heads, seqlen):
        return torch.randn(cell.batch, heads, seqlen, cell.head_dim, generator=generator, device=device,
                           dtype=DTYPES[cell.dtype], requires_grad=True)

    q, k, v = randn(cell.heads, cell.seqlen_q), randn(cell.kv_heads, cell.seqlen_k), randn(cell.kv_heads, cell.seqlen_k)
    return q, k, v, randn(cell.heads, cell.seqlen_q).detach()


def tile_columns(cell) -> dict:
    """The tile config and recompute flag that an `ours` row records (the backward's for mode bwd); none for
    a training row, whose model runs the engine's defaults in both passes."""
    if cell.provider != "ours" or cell.experiment == "training":
        return {}
    from kernels.attention import default_tiles_for

    pass_ = "bwd" if cell.mode == "bwd" else "fwd"
    explicit = cell.bwd_tiles if pass_ == "bwd" else cell.fwd_tiles
    switches = dict(cell.switches)
    if explicit:
        tiles = dict(zip(("block_m", "block_n", "num_warps", "num_stages"), explicit))
    elif pass_ == "fwd" and switches.get("hopper", _hopper_by_default(cell)):  # the Hopper forward's tiles, all its warps
        from kernels import _hopper

        block_n, stages = _hopper.default_config(cell.head_dim)
        tiles = dict(block_m=_hopper.BLOCK_M, block_n=block_n, num_warps=_hopper.TOTAL_WARPS, num_stages=stages)
    elif pass_ == "bwd" and switches.get("hopper_backward", _hopper_by_default(cell, "bwd")):  # the Hopper backward's
        from kernels import _hopper_bwd

        tiles = _hopper_bwd.default_config(cell.head_dim)
    else:
        tiles = dataclasses.asdict(default_tiles_for(cell.head_dim, pass_, switches.get("algorithm", "fa2"),
                                                     switches.get("dropout_p", 0.0), switches.get("atomic_dq", False)))
    return dict(tiles, recompute=int(switches.get("recompute", True)))


def _hopper_by_default(cell, pass_: str = "fwd") -> bool:
    """Whether flash_attention's defaults (hopper=None, hopper_backward=None) run this cell's forward
    (pass_ "fwd") or backward ("bwd") on the Hopper kernel: a cell with no switches (or a `features` cell
    whose features the default's feature list for that kernel names, kernels.attention.hopper_features_by_default)
    on dense contiguous inputs (experiments.providers.inputs) at a head dim and key length of
    kernels.attention.HOPPER_FORWARD_MIN_KEYS (forward) or a (head dim, causal) pair of HOPPER_BACKWARD_DEFAULTS (backward), on an sm_90 GPU,
    where the kernel covers it."""
    import torch

    from kernels.attention import hopper_backward_by_default, hopper_features_by_default, hopper_forward_by_default

    if not torch.cuda.is_available():
        return False
    if cell.experiment == "features":
        from experiments.features import engine_features

        used = engine_features(cell)
        switch = "hopper_backward" if pass_ == "bwd" else "hopper"
        if used is None or not hopper_features_by_default(switch, cell.head_dim).issuperset(used):
            return False
    elif cell.switches:
        return False
    if cell.dtype not in DTYPES or (cell.causal and cell.seqlen_q > cell.seqlen_k):
        return False
    if pass_ == "bwd":
        return hopper_backward_by_default(cell.head_dim, cell.causal, torch.device("cuda"))
    return hopper_forward_by_default(cell.head_dim, cell.seqlen_k, torch.device("cuda"))


def _ours(cell):
    from kernels import TileConfig, flash_attention

    options = dict(cell.switches)
    if cell.fwd_tiles:
        options["fwd_tiles"] = TileConfig(*cell.fwd_tiles)
    if cell.bwd_tiles:
        options["bwd_tiles"] = TileConfig(*cell.bwd_tiles)

    def run(q, k, v, **extra):
        return flash_attention(q, k, v, causal=cell.causal, **options, **extra)

    return run


def _standard(cell):
    from kernels.reference import standard_attention

    return lambda q, k, v: standard_attention(q, k, v, causal=cell.causal)


def _sdpa(backend_name: str):
    def build(cell):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if cell.causal and cell.seqlen_q != cell.seqlen_k:
            raise Unsupported("SDPA's is_causal aligns the mask top-left, the reference bottom-right")
        backend = getattr(SDPBackend, backend_name)
        gqa = cell.heads != cell.kv_heads

        def run(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=cell.causal, enable_gqa=gqa)

        return run

    return build


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    # One compilation per shape; the grid has more shapes than dynamo's default limit of 8.
    torch._dynamo.config.recompile_limit = 256
    # Compiled backwards donate their saved buffers by default, which refuses the
    # retain_graph=True that the `bwd` mode times with (seen with torch 2.11).
    torch._functorch.config.donated_buffer = False
    return torch.compile(flex_attention, dynamic=False)


def _flex(cell):
    from torch.nn.attention.flex_attention import create_block_mask

    block_mask = None
    if cell.causal:
        offset = cell.seqlen_k - cell.seqlen_q  # bottom-right alignment

        def causal_mask(b, h, q_idx, kv_idx):
            return q_idx + offset >= kv_idx

        block_mask = create_block_mask(causal_mask, None, None, cell.seqlen_q, cell.seqlen_k, device="cuda")
    flex = _compiled_flex()
    gqa = cell.heads != cell.kv_heads
    return lambda q, k, v: flex(q, k, v, block_mask=block_mask, enable_gqa=gqa)


_BUILDERS = {
    "ours": _ours,
    "standard": _standard,
    "sdpa_flash": _sdpa("FLASH_ATTENTION"),
    "sdpa_efficient": _sdpa("EFFICIENT_ATTENTION"),
    "sdpa_cudnn": _sdpa("CUDNN_ATTENTION"),
    "flex": _flex,
}
