"""Measures one cell on the GPU: runtime quantiles, TFLOP/s and peak memory; or classifies its failure.

Timing is triton.testing.do_bench (its own warm-up, then repetitions for rep_ms, each after an L2
flush), reporting the median and the 20th and 80th percentiles; do_bench calls the function once
before it starts the clock, so compilation and lazy initialisation stay out of the numbers. One more
call between a reset and a read of torch.cuda.max_memory_allocated gives the peak memory, which thus
includes the inputs and everything the call allocates. Modes:
  fwd      o = attention(q, k, v) on inputs that require grad, as in training (and in the paper's
           benchmark): what the forward saves for the backward counts towards its memory
  bwd      the forward runs once, untimed; timed: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
  fwd_bwd  both, timed together
"""
import multiprocessing
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import torch
import triton.testing
from triton.runtime.errors import OutOfResources

from experiments import flops, providers


def failure(error: BaseException) -> tuple[str, str]:
    """The status and note of a cell that raised `error`."""
    note = f"{type(error).__name__}: {error}".splitlines()[0][:300]  # the first line says what went wrong
    if isinstance(error, torch.OutOfMemoryError):
        return "oom", note
    if isinstance(error, providers.Unsupported):
        return "unsupported", str(error)
    # Out of shared memory or registers for a tile config, a backend declining a shape, a switch
    # the engine refuses (its ValueError): the configuration cannot run, nothing is broken.
    if isinstance(error, OutOfResources) or isinstance(error, ValueError) or "No available kernel" in note:
        return "unsupported", note
    return "error", note


def _bench(fn, timing: dict) -> dict:
    ms, p20, p80 = triton.testing.do_bench(fn, warmup=timing["warmup_ms"], rep=timing["rep_ms"],
                                           quantiles=[0.5, 0.2, 0.8])
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return dict(ms=ms, ms_p20=p20, ms_p80=p80, peak_mem_bytes=torch.cuda.max_memory_allocated())


def _timed_call(cell, device: torch.device):
    """The function that a cell times, inputs bound."""
    attend = providers.attention(cell, device)
    q, k, v, do = providers.inputs(cell, device)
    if cell.mode == "fwd":
        def fn():
            return attend(q, k, v)
    elif cell.mode == "bwd":
        o = attend(q, k, v)

        def fn():
            return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    else:
        def fn():
            return torch.autograd.grad(attend(q, k, v), (q, k, v), do)
    return fn


def attention(cell, timing: dict, device: torch.device) -> dict:
    fn = _timed_call(cell, device)
    result = _bench(fn, timing) | _tile_fallback(cell, fn)
    count = flops.attention_flops(cell.batch, cell.heads, cell.seqlen_q, cell.seqlen_k, cell.head_dim,
                                  cell.causal, cell.mode)
    return dict(result, tflops=flops.tflops(count, result["ms"]))


def _tile_fallback(cell, fn) -> dict:
    """If the engine stepped its default tiles down for this cell: the config it ran, and a note.

    The tile columns then record what ran (the backward's config for mode bwd, the forward's
    otherwise, as providers.tile_columns does) instead of the default that was asked for.
    """
    if cell.provider != "ours":
        return {}
    from kernels import TileFallbackWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TileFallbackWarning)
        fn()
    fallbacks = [w.message for w in caught if isinstance(w.message, TileFallbackWarning)]
    if not fallbacks:
        return {}
    wanted = "bwd" if cell.mode == "bwd" else "fwd"
    used = next((f.used for f in fallbacks if f.kernel.startswith(wanted)), None)
    values = {"note": "; ".join(str(f) for f in fallbacks)}
    if used is not None:
        values.update(block_m=used.block_m, block_n=used.block_n, num_warps=used.num_warps,
                      num_stages=used.num_stages)
    return values


def ceiling(cell, timing: dict, device: torch.device) -> dict:
    """The roofs: a square matmul (TFLOP/s) and a device-to-device copy (bytes moved in the note)."""
    dtype = providers.DTYPES[cell.dtype]
    if cell.provider == "torch_matmul":
        a = torch.randn(cell.size, cell.size, device=device, dtype=dtype)
        b = torch.randn(cell.size, cell.size, device=device, dtype=dtype)
        result = _bench(lambda: torch.matmul(a, b), timing)
        count = flops.matmul_flops(cell.size, cell.size, cell.size)
        return dict(result, tflops=flops.tflops(count, result["ms"]), note=f"m=n=k={cell.size}")
    source = torch.empty(cell.size // dtype.itemsize, device=device, dtype=dtype).fill_(1)
    target = torch.empty_like(source)
    result = _bench(lambda: target.copy_(source), timing)
    return dict(result, note=f"bytes={2 * cell.size}")  # each byte read once and written once


def precompile(cells, device: torch.device) -> None:
    """Compile what the cells will run, in parallel processes, ahead of the measurement.

    Each Triton specialisation of `ours` (tile config, switches, pass, dtype, head dim, mask) and
    each FlexAttention graph (torch.compile specialises on the shape) is compiled once, by one call
    of a cell that needs it, in a pool with a process per CPU this job may use. Triton's and
    Inductor's on-disk caches then serve the measuring process, which would otherwise compile them
    one after another. Failures are left for the measurement to record.
    """
    representatives = {}
    for cell in cells:
        if cell.provider in ("ours", "flex"):
            shape = (cell.batch, cell.heads, cell.seqlen_q, cell.seqlen_k) if cell.provider == "flex" else ()
            key = (cell.provider, cell.mode, cell.dtype, cell.head_dim, cell.causal, cell.switches, cell.fwd_tiles,
                   cell.bwd_tiles, shape)
            representatives.setdefault(key, cell)
    workers = min(len(representatives), len(os.sched_getaffinity(0)), 16)
    if workers < 2:
        return
    print(f"compiling {len(representatives)} kernel configurations in {workers} processes", flush=True)
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            list(pool.map(_call_once, representatives.values(), [device.type] * len(representatives)))
    except BrokenProcessPool:  # a configuration that kills its process: the measurement records it
        pass


def _call_once(cell, device_type: str) -> None:
    try:
        _timed_call(cell, torch.device(device_type))()
        torch.cuda.synchronize()
    except Exception:
        pass
