"""Where a decode call's host time goes, before and after a change to kernels/_decode.py, in one process.

The decode ablation's host-bound cells (batch 1, 32 heads over 4 KV heads, head dim 128, an 8k and a 32k
dense cache): kernels._decode.decode_forward as the ablation calls it, from the working tree ("after") and
from a copy of an earlier kernels/_decode.py ("before", the first argument), each timed as experiments/measure.py
times host_ms (synchronize, then perf_counter around one call, median of CALLS) and again behind a busy GPU
(a 300 us sleep kernel queued first, as do_bench's L2 flush queues work before each call); then each launch of the "after" call alone (perf_counter around launch_kernel),
and SDPA (its default choice) as the yardstick. Last, the host time of the speed ablation's seqlen 512 training
call (batch 32, 16 heads, head dim 64), forward and forward+backward, against SDPA's FlashAttention-2.

Runs (notes/round23/h100/): v1 an earlier breakdown by part (git show a5b683f:notes/round23/decode_host_profile.py);
v2 this script before the seqlen-512 part; v3 with a switch since removed, `kernels._launch.raw_pointers`
(direct launches handing Triton's launcher tensor addresses as ints), whose rows `*_tensor_pointers` are the
launches with tensors as before: no gain beyond the noise, so it did not stay.
One CSV row per (cell, what): median, 20th and 80th percentile microseconds.

    git show REV:kernels/_decode.py > .devstate/_decode_before.py
    PYTHONPATH=. python3 notes/round23/decode_host_profile.py .devstate/_decode_before.py > decode_host_profile.csv
"""
import importlib.util
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import kernels._decode as after
from kernels import flash_attention

CALLS = 400


def load_before(path):
    spec = importlib.util.spec_from_file_location("kernels._decode_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stats(times):
    q = statistics.quantiles(times, n=5)
    return statistics.median(times), q[0], q[3]


def host_us(fn, busy=False, calls=CALLS):
    cycles = int(after_sleep_cycles_per_us * 300) if busy else 0
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        if busy:
            torch.cuda._sleep(cycles)
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return stats(times)


def sleep_cycles_per_us():
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) * 1e3)


def main():
    global after_sleep_cycles_per_us
    before = load_before(sys.argv[1])
    dev = torch.device("cuda")
    after_sleep_cycles_per_us = sleep_cycles_per_us()
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}", file=sys.stderr)
    print("cell,what,host_us_median,host_us_p20,host_us_p80")
    for n in (8192, 32768):
        b, h, hkv, d = 1, 32, 4, 128
        q = torch.randn(b, 1, h, d, device=dev, dtype=torch.float16)
        k = torch.randn(b, n, hkv, d, device=dev, dtype=torch.float16)
        v = torch.randn_like(k)
        seqlens = torch.full((b,), n, dtype=torch.int32, device=dev)
        cell = f"b{b}_h{h}_hkv{hkv}_n{n}"

        def call(module):
            return lambda: module.decode_forward(q, k, v, seqlens, None, None, None, None, d ** -0.5, True, (-1, -1),
                                                 0.0, 0, n)
        outs = [call(m)()[0] for m in (before, after)]
        torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)  # the same kernels, the same output
        rows = {}
        for busy in (False, True):
            for name, module in (("before", before), ("after", after)):
                rows[f"decode_forward_{name}{'_busy' if busy else ''}"] = host_us(call(module), busy)
        # each launch of the "after" call on its own
        launches = {}
        real = after.launch_kernel

        def timed(kernel, grid, *args, **kwargs):
            t = time.perf_counter()
            result = real(kernel, grid, *args, **kwargs)
            launches.setdefault(kernel.__name__, []).append((time.perf_counter() - t) * 1e6)
            return result
        after.launch_kernel = timed
        for busy in (False, True):
            launches.clear()
            host_us(call(after), busy)
            for name, times in launches.items():
                rows[f"launch{name}{'_busy' if busy else ''}"] = stats(times)
        after.launch_kernel = real
        qt, kt, vt = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        sdpa = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        sdpa()
        rows["sdpa_default"] = host_us(sdpa)
        rows["sdpa_default_busy"] = host_us(sdpa, True)
        rows["torch_empty"] = host_us(lambda: torch.empty((b, 1, h, d), device=dev, dtype=q.dtype))
        for what, (med, p20, p80) in rows.items():
            print(f"{cell},{what},{med:.1f},{p20:.1f},{p80:.1f}", flush=True)
    # the short-sequence training call (the speed ablation's seqlen 512 cells: batch 32, 16 heads, head dim 64)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for causal in (False, True):
        x = [torch.randn(32, 16, 512, 64, device=dev, dtype=torch.float16, requires_grad=True) for _ in range(3)]
        do = torch.randn_like(x[0])
        cell = f"b32_h16_n512_d64_{'causal' if causal else 'full'}"

        def ours_fwd():
            return flash_attention(*x, causal=causal)

        def ours_fwd_bwd():
            return torch.autograd.grad(flash_attention(*x, causal=causal), x, do)

        def sdpa_fwd():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(*x, is_causal=causal)

        def sdpa_fwd_bwd():
            return torch.autograd.grad(sdpa_fwd(), x, do)
        rows = {}
        for name, fn in (("ours_fwd", ours_fwd), ("ours_fwd_bwd", ours_fwd_bwd)):
            fn()
            rows[name] = host_us(fn, calls=100)
        for name, fn in (("sdpa_flash_fwd", sdpa_fwd), ("sdpa_flash_fwd_bwd", sdpa_fwd_bwd)):
            fn()
            rows[name] = host_us(fn, calls=100)
        for what, (med, p20, p80) in rows.items():
            print(f"{cell},{what},{med:.1f},{p20:.1f},{p80:.1f}", flush=True)


if __name__ == "__main__":
    main()
