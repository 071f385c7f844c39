"""The `fp8` ablation: the engine's fp8 (e4m3) forward against its own fp16 forward, speed and accuracy.

Timed cells (`cells`, mode fwd): every head dim x mask x sequence length of the settings on the paper's
shapes (batch = max(1, tokens // seqlen), heads = hidden // head_dim), one cell per provider:
  ours       kernels.flash_attention on float16 q, k, v (the row's dtype fp16; default tiles)
  ours_fp8   kernels.flash_attention on float8_e4m3fn q, k, v with float32 descales q (B, H), k and v
             (B, Hkv) (the row's dtype fp8_e4m3; default fp8 tiles; bfloat16 output)
Both arms start from the same float32 draw (seeded by the shape, as experiments/providers.py seeds its
inputs): ours casts it to float16, ours_fp8 quantises it per (batch, head) with descale = absmax / 448
(`quantise`), outside the timed call. The timed call is the whole forward as a user calls it: for fp8
that includes the copy of V into the transposed layout that the engine makes on every call. Both are
inference forwards (inputs without requires_grad: the fp8 forward has no backward), unlike the speed
ablation's fwd cells, whose inputs require grad. Each cell is timed by experiments.measure's _bench (the
do_bench median and percentiles, host and GPU time, host_bound, memory net of what the process held),
with TFLOP/s by the paper's count (experiments/flops.py; the same count for both arms). The runner repeats
the timed grid `repetitions` times, each pass opening with the fp16 matmul ceiling, and adds the telemetry
columns, as for every timed ablation.

Accuracy cells (`accuracy_cells`, variant "accuracy", after the last pass, measured once: errors do not
vary between runs): for each shape of `accuracy.shapes` (on a host without a GPU, `accuracy.interpreter_shapes`,
for Triton's interpreter) and mask, one float32 draw from `accuracy.seed`, then
  fp8_e4m3   ours_fp8 on the quantised draw, against the float64 attention of the dequantised inputs
             (x8 * descale), so the error is the kernel's, not the quantisation's
  fp16, bf16 ours on the draw cast to that dtype, against the float64 attention of those same inputs
err_o is the relative RMS error ||o - ref|| / ||ref|| (experiments/accuracy.py's relative_error) and
max_abs_err_o the largest |o - ref|.
"""
from __future__ import annotations

import itertools
import zlib

PROVIDERS = ("ours", "ours_fp8")
FP8 = "fp8_e4m3"  # the dtype column of the fp8 rows
PRECISIONS = (FP8, "fp16", "bf16")
ACCURACY = "accuracy"  # the variant of the accuracy cells
E4M3_MAX = 448.0  # the largest finite float8_e4m3fn


def provider_of(dtype: str) -> str:
    """The provider that runs a precision: ours_fp8 for e4m3, ours for fp16 and bf16."""
    return "ours_fp8" if dtype == FP8 else "ours"


def cells(s: dict, make_cell) -> list:
    """One pass of the timed grid (make_cell: experiments.grid.Cell)."""
    from experiments.grid import paper_shape

    return [make_cell("fp8", provider, "fwd", FP8 if provider == "ours_fp8" else "fp16", causal=causal,
                      **paper_shape(s, seqlen, head_dim))
            for head_dim, causal, seqlen, provider in itertools.product(s["head_dims"], s["causal"], s["seqlens"],
                                                                        s["providers"])]


def accuracy_cells(s: dict, make_cell, on_gpu: bool) -> list:
    """The accuracy cells: each shape, mask and precision once (interpreter shapes without a GPU)."""
    a = s["accuracy"]
    shapes = a["shapes"] if on_gpu else a["interpreter_shapes"]
    return [make_cell("fp8", provider_of(dtype), "fwd", dtype, causal=causal, variant=ACCURACY, **shape)
            for shape, causal, dtype in itertools.product(shapes, a["causal"], a["precisions"])]


def quantise(x):
    """Per-(batch, head) e4m3 quantisation of x (B, H, N, D): (x8, descale (B, H) float32), x ~= x8 * descale,
    descale = absmax / 448 (notes/fp8_engine_bench.py's, tests/test_fp8.py's)."""
    import torch

    descale = (x.abs().amax(dim=(2, 3)).float().clamp_min(1e-12) / E4M3_MAX).contiguous()
    return (x.float() / descale[:, :, None, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), descale


def dequantise(x8, descale):
    """The true values of quantised inputs, in float64."""
    return x8.double() * descale.double()[:, :, None, None]


def _draw(cell, device, seed: int):
    """q, k, v in float32, standard normal, from `seed`."""
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)

    def randn(heads, seqlen):
        return torch.randn(cell.batch, heads, seqlen, cell.head_dim, generator=generator, device=device)

    return randn(cell.heads, cell.seqlen_q), randn(cell.kv_heads, cell.seqlen_k), randn(cell.kv_heads, cell.seqlen_k)


def _shape_seed(cell) -> int:
    """The seed of a timed shape: the same draw for both arms (providers.inputs's rule, on the shape alone)."""
    return zlib.crc32(repr((cell.batch, cell.heads, cell.kv_heads, cell.seqlen_q, cell.seqlen_k,
                            cell.head_dim)).encode())


def _prepared(cell, draw):
    """The inputs the cell's provider takes, from a float32 draw, and the keyword arguments of the call."""
    import torch

    if cell.dtype == FP8:
        (q8, qd), (k8, kd), (v8, vd) = (quantise(x) for x in draw)
        return (q8, k8, v8), dict(q_descale=qd, k_descale=kd, v_descale=vd)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[cell.dtype]
    return tuple(x.to(dtype) for x in draw), {}


def call(cell, device):
    """The function a timed cell times (quantisation done, outside it), and the bytes of its inputs."""
    from kernels import flash_attention

    if cell.provider != provider_of(cell.dtype):
        raise ValueError(f"fp8 ablation: provider {cell.provider} does not run dtype {cell.dtype}")
    draw = _draw(cell, device, _shape_seed(cell))
    (q, k, v), descales = _prepared(cell, draw)
    del draw
    held = sum(t.numel() * t.element_size() for t in (q, k, v, *descales.values()))

    def fn():
        return flash_attention(q, k, v, causal=cell.causal, **descales)

    return fn, held


def tile_columns(cell) -> dict:
    """The default forward tiles an ours_fp8 row ran with (ours' come from experiments.providers.tile_columns)."""
    if cell.provider != "ours_fp8":
        return {}
    from kernels.tiles import default_tiles

    tiles = default_tiles(cell.head_dim, "fwd", fp8=True)
    return dict(block_m=tiles.block_m, block_n=tiles.block_n, num_warps=tiles.num_warps, num_stages=tiles.num_stages)


def errors(cell, settings: dict, device) -> dict:
    """err_o (relative RMS) and max_abs_err_o of the cell's output against its float64 reference."""
    from experiments.accuracy import relative_error
    from kernels import flash_attention
    from kernels.reference import attention_reference

    draw = _draw(cell, device, settings["accuracy"]["seed"])
    (q, k, v), descales = _prepared(cell, draw)
    del draw
    out = flash_attention(q, k, v, causal=cell.causal, **descales)
    if descales:
        exact = [dequantise(x, descales[name]) for x, name in ((q, "q_descale"), (k, "k_descale"), (v, "v_descale"))]
    else:
        exact = [x.double() for x in (q, k, v)]
    reference = attention_reference(*exact, causal=cell.causal)[0]
    return dict(err_o=relative_error(out, reference),
                max_abs_err_o=float((out.double() - reference).abs().max()))


def measure(cell, settings: dict, device) -> dict:
    """One cell's values: an accuracy cell's errors, or a timed cell's timing (experiments.measure's _bench),
    tile columns and TFLOP/s."""
    from experiments import flops, measure as timing

    if cell.variant == ACCURACY:
        return dict(tile_columns(cell), **errors(cell, settings, device))
    fn, held = call(cell, device)
    result = dict(tile_columns(cell), **timing._bench(fn, settings, held))
    result.update(timing._tile_fallback(cell, fn))
    count = flops.attention_flops(cell.batch, cell.heads, cell.seqlen_q, cell.seqlen_k, cell.head_dim, cell.causal,
                                  "fwd")
    return dict(result, tflops=flops.tflops(count, result["ms"]))
