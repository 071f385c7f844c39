"""Does the telemetry sampler slow the measuring process's host? And how noisy is the pipeline's host_ms?

    PYTHONPATH=. python3 notes/round31/host_telemetry_probe.py OUT.csv      (a CUDA GPU; about a minute)

At the speed grid's seqlen-512 cells (batch 32, 16 heads of 128 and 32 heads of 64, causal and full, fp16,
inputs requiring grad), for SDPA flash and ours, forward and forward+backward, in blocks that alternate the
NVML sampler of experiments.telemetry off and on (the pipeline runs it during every timed row), two ways:

- `pipeline`: experiments.measure._host_and_gpu_ms's host_ms (the median of SIDE_TIMINGS calls, each issued
  into an empty queue right after a synchronize), taken REPEATS times per block: its spread is what one
  repetition of a grid cell can show;
- `queued`: CALLS calls issued one after another behind a long sleep kernel (the queue never drains, so the
  host never waits on the GPU), each timed alone.

Rows: arm (telemetry off/on), block, provider, mode, head_dim, causal, method, sample, host_us.
"""
import csv
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from experiments import telemetry
from experiments.measure import _host_and_gpu_ms, _sleep_cycles_per_ms
from kernels import flash_attention

BLOCKS, REPEATS, CALLS = 6, 8, 40


def sdpa_flash(q, k, v, causal):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def ours(q, k, v, causal):
    return flash_attention(q, k, v, causal=causal)


def calls():
    """(provider, mode, head_dim, causal, fn) for every cell of the probe."""
    for head_dim in (128, 64):
        heads = 2048 // head_dim
        q, k, v = (torch.randn(32, heads, 512, head_dim, device="cuda", dtype=torch.float16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn_like(q).detach()
        for causal in (False, True):
            for name, attend in (("sdpa_flash", sdpa_flash), ("ours", ours)):
                def fwd(attend=attend, q=q, k=k, v=v, causal=causal):
                    return attend(q, k, v, causal)

                def fwd_bwd(attend=attend, q=q, k=k, v=v, do=do, causal=causal):
                    return torch.autograd.grad(attend(q, k, v, causal), (q, k, v), do)
                yield name, "fwd", head_dim, causal, fwd
                yield name, "fwd_bwd", head_dim, causal, fwd_bwd


def queued(fn, count):
    """Host time of each of `count` calls issued behind a sleep that outlasts them all."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(_sleep_cycles_per_ms() * 150))
    times = []
    for _ in range(count):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e6)
    torch.cuda.synchronize()
    return times


def main(path):
    cells = list(calls())
    for *_, fn in cells:  # compile and warm up
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    bus = telemetry.pci_bus_id(torch.cuda.current_device())
    samples = tempfile.NamedTemporaryFile(suffix=".txt", delete=False).name
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["arm", "block", "provider", "mode", "head_dim", "causal", "method", "sample", "host_us"])
        for block in range(BLOCKS):
            arm = "telemetry_on" if block % 2 else "telemetry_off"
            sampler = telemetry.Sampler(bus, samples) if arm == "telemetry_on" else None
            time.sleep(0.5)  # the sampler's process starts and polls
            for name, mode, head_dim, causal, fn in cells:
                row = [arm, block, name, mode, head_dim, int(causal)]
                for i in range(REPEATS):
                    out.writerow(row + ["pipeline", i, round(_host_and_gpu_ms(fn)[0] * 1e3, 2)])
                for i, us in enumerate(queued(fn, CALLS)):
                    out.writerow(row + ["queued", i, round(us, 2)])
            if sampler is not None:
                print(f"block {block}: sampler wrote {sum(1 for _ in open(samples))} samples", flush=True)
                sampler.close()
            f.flush()
            print(f"block {block} ({arm}) done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
