"""Measures one cell on the GPU in one repetition: time, TFLOP/s, memory; or classifies its failure.

Time: triton.testing.do_bench (its own warm-up, then calls for rep_ms, each after an L2 flush,
timed by CUDA events) gives `ms`, the median, and the 20th and 80th percentiles; do_bench calls the
function before it starts the clock, so compilation and lazy initialisation stay out. The events
measure the host too when it issues work slower than the GPU runs it, so two more timings say
which side set `ms`: `host_ms`, the host's time to issue one call into an empty queue, and
`gpu_ms`, the GPU's time for one call whose launches were all queued behind a sleep kernel first (no
host gap can show). A row is host-bound when ms exceeds gpu_ms by more than HOST_BOUND_EXCESS.

Memory: one more call between a reset of the allocator's peak and a read of it; `attn_mem_bytes` is
that peak net of what the process held before the call (the inputs, and workspaces such as cuBLAS's
that an earlier call left allocated), so it is attention's own footprint; `peak_mem_bytes` adds the
bytes of the inputs to it. Modes:
  fwd      o = attention(q, k, v) on inputs that require grad, as in training (and in the paper's
           benchmark): what the forward saves for the backward counts towards its memory
  bwd      the forward runs once, untimed; timed: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
  fwd_bwd  both, timed together
  train    a whole training step of experiments/gpt.py (`training`, below): CUDA events around each
           of `steps` steps after warm-up steps, by experiments.training.time_training
"""
import functools
import multiprocessing
import os
import statistics
import time
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
    if isinstance(error, NotImplementedError):  # the engine names a case it does not cover (hopper=True off sm_90)
        return "unsupported", note
    # Out of shared memory or registers for a tile config, a backend declining a shape, a switch
    # the engine refuses (its ValueError): the configuration cannot run, nothing is broken.
    if isinstance(error, OutOfResources) or isinstance(error, ValueError) or "No available kernel" in note:
        return "unsupported", note
    return "error", note


# ms above gpu_ms by more than this share: the GPU waited for the host during the timing.
HOST_BOUND_EXCESS = 0.10
# calls timed for host_ms and for gpu_ms (the median of each is kept); fewer for long calls, which
# the host cannot hold up
SIDE_TIMINGS = 5
SIDE_TIMINGS_LONG, LONG_CALL_MS = 2, 5.0


def _bench(fn, timing: dict, input_bytes: int = 0) -> dict:
    ms, p20, p80 = triton.testing.do_bench(fn, warmup=timing["warmup_ms"], rep=timing["rep_ms"],
                                           quantiles=[0.5, 0.2, 0.8])
    host_ms, gpu_ms = _host_and_gpu_ms(fn, SIDE_TIMINGS if ms < LONG_CALL_MS else SIDE_TIMINGS_LONG)
    attn_mem_bytes = _net_peak_memory(fn)
    return dict(ms=ms, ms_p20=p20, ms_p80=p80, host_ms=host_ms, gpu_ms=gpu_ms,
                host_bound=int(ms > (1 + HOST_BOUND_EXCESS) * gpu_ms),
                attn_mem_bytes=attn_mem_bytes, input_bytes=input_bytes, peak_mem_bytes=input_bytes + attn_mem_bytes)


def _net_peak_memory(fn) -> int:
    """Peak bytes the allocator held during one call, net of what it held before the call."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del result
    return peak - before


@functools.cache
def _sleep_cycles_per_ms() -> float:
    """Clock cycles that torch.cuda._sleep spins per millisecond on this GPU (measured once)."""
    cycles = 10_000_000
    torch.cuda._sleep(cycles // 10)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def _host_and_gpu_ms(fn, calls: int = SIDE_TIMINGS) -> tuple[float, float]:
    """Median host time to issue one call, and median GPU time of one call queued behind a sleep.

    For the GPU time the L2 cache is flushed (as do_bench does), a sleep kernel long enough for the
    host to issue the whole call is queued, and CUDA events bracket the call: the GPU then runs its
    kernels back to back, so the events see no host gap.
    """
    host = []
    for _ in range(calls):
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        host.append((time.perf_counter() - started) * 1e3)
    host_ms = statistics.median(host)
    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    sleep = int(_sleep_cycles_per_ms() * (2 * max(host) + 0.5))
    gpu = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        cache.zero_()
        torch.cuda._sleep(sleep)
        start.record()
        fn()
        end.record()
        end.synchronize()
        gpu.append(start.elapsed_time(end))
    return host_ms, statistics.median(gpu)


def input_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _timed_call(cell, device: torch.device):
    """The function that a cell times, inputs bound, and the bytes of those inputs."""
    attend = providers.attention(cell, device)
    q, k, v, do = providers.inputs(cell, device)
    held = input_bytes((q, k, v) if cell.mode == "fwd" else (q, k, v, do))
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
    return fn, held


def attention(cell, timing: dict, device: torch.device) -> dict:
    fn, held = _timed_call(cell, device)
    result = _bench(fn, timing, held) | _tile_fallback(cell, fn)
    if cell.experiment == "features":  # visible score entries: windows and variable-length batches
        from experiments import features

        count = features.cell_flops(cell)
        if features.note(cell) and "note" not in result:
            result["note"] = features.note(cell)
    else:
        count = flops.attention_flops(cell.batch, cell.heads, cell.seqlen_q, cell.seqlen_k, cell.head_dim,
                                      cell.causal, cell.mode)
    return dict(result, tflops=flops.tflops(count, result["ms"]))


def _tile_fallback(cell, fn) -> dict:
    """If the engine stepped its default tiles down for this cell: the config it ran, and a note.

    The tile columns then record what ran (the backward's config for mode bwd, the forward's
    otherwise, as providers.tile_columns does) instead of the default that was asked for.
    """
    if cell.provider not in ("ours", "ours_fp8"):
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
        result = _bench(lambda: torch.matmul(a, b), timing, input_bytes((a, b)))
        count = flops.matmul_flops(cell.size, cell.size, cell.size)
        return dict(result, tflops=flops.tflops(count, result["ms"]), note=f"m=n=k={cell.size}")
    source = torch.empty(cell.size // dtype.itemsize, device=device, dtype=dtype).fill_(1)
    target = torch.empty_like(source)
    result = _bench(lambda: target.copy_(source), timing, input_bytes((source, target)))
    return dict(result, note=f"bytes={2 * cell.size}")  # each byte read once and written once


def training(cell, settings: dict, device: torch.device, batch: int | None = None) -> dict:
    """Train the cell's model (its variant: a preset of experiments/gpt.py, "+compile" for torch.compile) with
    the cell's attention at `batch` (default the cell's) and map experiments.training.time_training's result
    to the columns of a row. Runs out of memory as torch.OutOfMemoryError, so the row's status is oom.

    ms is the median step, ms_p20 and ms_p80 the fastest and slowest of the timed steps (a training row
    has `steps` samples, too few for percentiles); gpu_ms is ms (the step is timed by CUDA events only,
    and the GPU-bound step of a model this size leaves no host gap to measure), host_ms is left empty
    and host_bound 0; tflops is model TFLOP/s per GPU (experiments.training.model_flops_per_token);
    attn_mem_bytes and peak_mem_bytes are the run's peak net memory (weights, gradients, AdamW state,
    activations), input_bytes 0 (the token batches are a few KiB). The note gives tokens/s, the parameter
    count and the warm-up's wall time (with "+compile", torch.compile's compilation is in it).
    """
    from experiments import training as train
    from experiments.gpt import preset

    model, *options = cell.variant.split("+")
    batch = batch or cell.batch
    result = train.time_training(preset(model, seqlen=cell.seqlen_q), cell.provider, batch=batch,
                                 seqlen=cell.seqlen_q, steps=settings["steps"], warmup=settings["warmup_steps"],
                                 device=device, compile="compile" in options)
    if result["status"] == "oom":
        raise torch.OutOfMemoryError(result["note"] or f"batch {batch} runs out of memory")
    return dict(ms=result["step_ms"], ms_p20=result["step_ms_min"], ms_p80=result["step_ms_max"],
                gpu_ms=result["step_ms"], host_ms=None, host_bound=0, tflops=result["tflops"],
                attn_mem_bytes=result["peak_mem_bytes"], input_bytes=0, peak_mem_bytes=result["peak_mem_bytes"],
                note=f"{result['tokens_per_s']:.0f} tokens/s, {result['params']} parameters, "
                     f"warm-up {result['warmup_s']:.1f} s")


def largest_batch(cell, settings: dict, device: torch.device) -> tuple[int, dict, str, str]:
    """After the cell ran out of memory: halve its batch until a training run fits, or batch 1 does not.

    Returns the batch, values, status and note of the row for grid.largest_batch_cell(cell): the batch
    that fitted, or 1 with status oom when none did.
    """
    batch = cell.batch
    while batch > 1:
        batch //= 2
        try:
            values = training(cell, settings, device, batch)
        except torch.OutOfMemoryError:
            continue
        note = (f"largest batch that fits: {batch} (batch {cell.batch} runs out of memory; halved until one "
                f"fits); {values.pop('note')}")
        return batch, values, "ok", note
    return 1, {}, "oom", f"no batch fits: batch {cell.batch} down to 1 runs out of memory"


def compile_representatives(cells, device: torch.device) -> dict:
    """One cell per thing `precompile` compiles, by what identifies it (see there)."""
    representatives = {}
    for cell in cells:
        if cell.experiment == "fp8":  # fp16 and fp8 forwards, per head dim and mask (its timed cells' shapes)
            if cell.variant != "accuracy" and cell.provider in ("ours", "ours_fp8"):
                representatives.setdefault(("fp8", cell.provider, cell.dtype, cell.head_dim, cell.causal), cell)
        elif cell.experiment == "decode" and cell.provider == "flex":  # FlexAttention decode: one graph per shape
            representatives.setdefault(("decode", cell.batch, cell.heads, cell.kv_heads, cell.seqlen_k, cell.dtype), cell)
        elif cell.experiment == "decode" and cell.provider == "ours":
            # one cell per kernel specialisation (the H200 grid has 54), the one with the smallest cache, so
            # that the processes compiling at once do not fill the GPU's memory with caches
            from experiments import decode

            key = ("decode", "ours", *decode.kernel_specialization(cell, device))
            held = decode.cell_cache_bytes(cell)
            if key not in representatives or held < decode.cell_cache_bytes(representatives[key]):
                representatives[key] = cell
        elif cell.provider in ("ours", "flex") and cell.experiment not in ("training", "decode"):
            shape = (cell.batch, cell.heads, cell.seqlen_q, cell.seqlen_k) if cell.provider == "flex" else ()
            key = (cell.provider, cell.mode, cell.dtype, cell.head_dim, cell.causal, cell.switches, cell.fwd_tiles,
                   cell.bwd_tiles, shape)
            representatives.setdefault(key, cell)
    return representatives


def precompile(cells, device: torch.device) -> None:
    """Compile what the cells will run, in parallel processes, ahead of the measurement.

    Each Triton specialisation of `ours` (tile config, switches, pass, dtype, head dim, mask) and
    each FlexAttention graph (torch.compile specialises on the shape) and each specialisation of the
    decoding kernels (`experiments.decode.kernel_specialization`) is compiled once, by one call
    of a cell that needs it, in a pool with a process per CPU this job may use. Triton's and
    Inductor's on-disk caches then serve the measuring process, which would otherwise compile them
    one after another. Failures are left for the measurement to record.
    """
    representatives = compile_representatives(cells, device)
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
        if cell.experiment == "fp8":
            from experiments import fp8

            fp8.call(cell, torch.device(device_type))[0]()
            torch.cuda.synchronize()
            return
        if cell.experiment == "decode":
            from experiments import decode

            decode.call(cell, torch.device(device_type))[0]()
            torch.cuda.synchronize()
            return
        _timed_call(cell, torch.device(device_type))[0]()
        torch.cuda.synchronize()
    except Exception:
        pass
