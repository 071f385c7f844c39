"""The `decode` ablation: one new token attending to a long KV cache (inference decoding).

Cells (`cells`): seqlen_q = 1, every batch x cache length x (heads, kv_heads) of the config whose K
and V caches fit in `max_cache_gb`, head dim `head_dim`, each dtype; providers
  ours   kernels.flash_attn_with_kvcache's kernels (split-KV + combine, kernels/_decode.py) on a dense
         cache (variant "dense") and on paged caches (variant "paged<page_size>", pages shuffled);
         the kernels are launched as the API launches them, without the API's host-side checks of
         cache_seqlens and block_table (they synchronise with the GPU, which the timing must not see)
  sdpa   torch SDPA on (B, H, 1, D) x (B, Hkv, N, D), the fastest of the flash / efficient / cuDNN
         backends that run the shape (the row's note says which: "sdpa_backend=...")
  flex   FlexAttention (torch.compile, once per shape) with a query of length 1, only at the
         `flex_batches` x `flex_cache_lens` x `flex_dtypes` (each shape costs a compilation; the runner
         compiles them ahead, in parallel processes, as it does for the other ablations)
Each pass of the grid also times a device-to-device copy (`torch_copy`, `copy_mib` MiB) first, the
roof that the achieved bandwidth is read against. A row's cache length is seqlen_k (every sequence
full), its page size the `page_size` column (empty: dense), and `bandwidth_gbs` = the bytes of K and V
read plus q read and o written, over ms.
"""
import itertools

PROVIDERS = ("ours", "sdpa", "flex")
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
DTYPE_BYTES = {"fp16": 2, "bf16": 2}


def layout_variant(page_size) -> str:
    return "dense" if not page_size else f"paged{page_size}"


def page_size_of(variant: str):
    return int(variant[len("paged"):]) if variant.startswith("paged") else None


def cache_bytes(batch: int, kv_heads: int, seqlen_k: int, head_dim: int, dtype: str) -> int:
    """Bytes of the K and V caches."""
    return 2 * batch * kv_heads * seqlen_k * head_dim * DTYPE_BYTES[dtype]


def kernel_specialization(cell, device) -> tuple:
    """What Triton compiles the split-KV kernels of an `ours` cell for (dtype, query heads per KV head, tiles,
    page size and the split count the engine chooses on `device`): cells that share it share the kernels."""
    from kernels._decode import launch_shape

    group = cell.heads // cell.kv_heads
    shape = launch_shape(cell.batch, group * cell.seqlen_q, cell.kv_heads, cell.head_dim, cell.seqlen_k, device,
                         paged=page_size_of(cell.variant) is not None)
    return cell.dtype, cell.head_dim, group, *shape, page_size_of(cell.variant)


def cell_cache_bytes(cell) -> int:
    """Bytes of the K and V caches of a decode cell."""
    return cache_bytes(cell.batch, cell.kv_heads, cell.seqlen_k, cell.head_dim, cell.dtype)


def moved_bytes(batch, heads, kv_heads, seqlen_k, head_dim, dtype) -> int:
    """What one decoding step must move at least: K and V read, q read and o written."""
    return cache_bytes(batch, kv_heads, seqlen_k, head_dim, dtype) + 2 * batch * heads * head_dim * DTYPE_BYTES[dtype]


def cells(s: dict, make_cell) -> list:
    """One pass of the decode grid (make_cell: experiments.grid.Cell)."""
    out = []
    for dtype, (heads, kv_heads), batch, n in itertools.product(s["dtypes"], [tuple(h) for h in s["heads"]],
                                                                  s["batches"], s["cache_lens"]):
        if cache_bytes(batch, kv_heads, n, s["head_dim"], dtype) > s["max_cache_gb"] * 1e9:
            continue
        shape = dict(batch=batch, heads=heads, kv_heads=kv_heads, seqlen_q=1, seqlen_k=n, head_dim=s["head_dim"],
                     causal=True)
        for provider in s["providers"]:
            if provider == "ours":
                for page_size in [None, *s["page_sizes"]]:
                    out.append(make_cell("decode", "ours", "fwd", dtype, variant=layout_variant(page_size), **shape))
            elif provider == "flex" and (batch not in s["flex_batches"] or n not in s["flex_cache_lens"]
                                         or dtype not in s["flex_dtypes"]):
                continue
            else:
                out.append(make_cell("decode", provider, "fwd", dtype, variant="dense", **shape))
    return out


def _inputs(cell, device):
    """q (B, 1, H, D) and the caches: dense (B, N, Hkv, D), or shuffled pages with their block table."""
    import zlib

    import torch

    from experiments.providers import DTYPES

    dtype = DTYPES[cell.dtype]
    generator = torch.Generator(device=device).manual_seed(zlib.crc32(repr((cell.batch, cell.heads, cell.seqlen_k)).encode()))
    q = torch.randn(cell.batch, 1, cell.heads, cell.head_dim, device=device, dtype=dtype, generator=generator)
    page_size = page_size_of(cell.variant)
    if page_size is None:
        shape = (cell.batch, cell.seqlen_k, cell.kv_heads, cell.head_dim)
        table = None
    else:
        per_seq = -(-cell.seqlen_k // page_size)
        shape = (cell.batch * per_seq, page_size, cell.kv_heads, cell.head_dim)
        table = torch.randperm(cell.batch * per_seq, device=device, generator=generator).to(torch.int32)
        table = table.reshape(cell.batch, per_seq)
    k = torch.randn(shape, device=device, dtype=dtype, generator=generator)
    v = torch.randn(shape, device=device, dtype=dtype, generator=generator)
    return q, k, v, table


def call(cell, device):
    """The function a decode cell times, and a note (sdpa: the backend chosen)."""
    import torch

    from experiments.providers import Unsupported

    if cell.provider != "ours" and device.type != "cuda":
        raise Unsupported(f"{cell.provider} needs a CUDA GPU")
    q, k, v, table = _inputs(cell, device)
    if cell.provider == "ours":
        from kernels._decode import decode_forward

        seqlens = torch.full((cell.batch,), cell.seqlen_k, dtype=torch.int32, device=device)
        scale = cell.head_dim ** -0.5

        def fn():
            return decode_forward(q, k, v, seqlens, None, None, table, None, scale, True, (-1, -1), 0.0, 0,
                                  cell.seqlen_k)[0]

        splits = decode_forward(q, k, v, seqlens, None, None, table, None, scale, True, (-1, -1), 0.0, 0,
                                cell.seqlen_k)[2]
        return fn, f"num_splits={splits}"
    qt, kt, vt = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    del q, k, v
    gqa = cell.heads != cell.kv_heads
    if cell.provider == "flex":
        from experiments.providers import _compiled_flex

        flex = _compiled_flex()
        return (lambda: flex(qt, kt, vt, enable_gqa=gqa)), ""
    return _best_sdpa(qt, kt, vt, gqa)


def _best_sdpa(q, k, v, gqa):
    """The fastest SDPA backend that runs this shape (a short do_bench of each), and its name."""
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from experiments.providers import Unsupported

    timed, errors = {}, []
    for name in SDPA_BACKENDS:
        backend = getattr(SDPBackend, name)

        def fn(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

        try:
            fn()
            torch.cuda.synchronize()
            timed[name] = (triton.testing.do_bench(fn, warmup=5, rep=10), fn)
        except Exception as error:  # the backend declines the shape
            errors.append(f"{name}: {str(error).splitlines()[0][:80] if str(error) else type(error).__name__}")
    if not timed:
        raise Unsupported("no SDPA backend runs this shape: " + "; ".join(errors))
    best = min(timed, key=lambda name: timed[name][0])
    return timed[best][1], f"sdpa_backend={best.lower()}"


def measure(cell, timing: dict, device) -> dict:
    """Time one decode cell (experiments.measure's do_bench, host and GPU timings, memory) and add its
    page size, TFLOP/s and achieved bandwidth."""
    from experiments import flops
    from experiments.measure import _bench

    fn, note = call(cell, device)
    held = cell_cache_bytes(cell)
    result = _bench(fn, timing, held)
    moved = moved_bytes(cell.batch, cell.heads, cell.kv_heads, cell.seqlen_k, cell.head_dim, cell.dtype)
    count = flops.attention_flops(cell.batch, cell.heads, cell.seqlen_q, cell.seqlen_k, cell.head_dim, False, "fwd")
    return dict(result, page_size=page_size_of(cell.variant), bandwidth_gbs=moved / (result["ms"] * 1e-3) / 1e9,
                tflops=flops.tflops(count, result["ms"]), note=f"{note}; bytes={moved}".lstrip("; "))
