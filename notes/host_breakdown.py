"""Where ours' host time per call goes on the GPU host, layer by layer, against SDPA flash's.

    python3 notes/host_breakdown.py > notes/host_breakdown_h200.txt        (a CUDA GPU; ~1 minute)

On a tiny shape (1 x 1 x 128 x 64, causal, fp16: the GPU's work is a few microseconds) each
line times back-to-back calls with a host clock around a final synchronize (notes/host_overhead.py):
  sdpa_flash fwd / fwd_bwd          the reference
  ours fwd / fwd_bwd                flash_attention, kernels launched directly (kernels/_launch.py)
  ours_jit fwd / fwd_bwd            the same through Triton's JIT launch (kernels._launch.enabled = False)
  ours fwd_bwd single_thread        torch.autograd.set_multithreading_enabled(False): the backward
                                    runs on the calling thread instead of autograd's device thread
  ours backward_only                kernels._backward.attention_backward called directly (no autograd)
  ours forward_only                 kernels._forward.attention_forward called directly
Then a cProfile of ours' forward+backward on one thread (so the backward's Python is seen), by
own time and by cumulative time, and torch.profiler's table of CPU time per op.
"""
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import host_overhead  # noqa: E402  (notes/, beside this script)
import kernels._launch  # noqa: E402
from kernels import flash_attention  # noqa: E402
from kernels._backward import attention_backward  # noqa: E402
from kernels._forward import attention_forward  # noqa: E402
from kernels.options import AttentionOptions  # noqa: E402
from kernels.attention import _tile_list  # noqa: E402
from kernels.tiles import default_tiles  # noqa: E402


def per_call_us(fn, calls=2000):
    return host_overhead.per_call_us(fn, calls, warmup=100)


def main():
    shape = (1, 1, 128, 64)
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    do = torch.randn(*shape, device="cuda", dtype=torch.float16)

    def sdpa(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def ours(q, k, v):
        return flash_attention(q, k, v, causal=True)

    print("what,us_per_call", flush=True)
    for name, attend in (("sdpa_flash", sdpa), ("ours", ours)):
        for direct in ((True, False) if name == "ours" else (True,)):
            kernels._launch.enabled = direct
            label = name if direct else "ours_jit"

            def forward():
                with torch.no_grad():
                    attend(q, k, v)

            def forward_backward():
                torch.autograd.grad(attend(q, k, v), (q, k, v), do)

            print(f"{label} fwd,{per_call_us(forward):.1f}", flush=True)
            print(f"{label} fwd_bwd,{per_call_us(forward_backward, 1000):.1f}", flush=True)
            with torch.autograd.set_multithreading_enabled(False):
                print(f"{label} fwd_bwd single_thread,{per_call_us(forward_backward, 1000):.1f}", flush=True)
    kernels._launch.enabled = True

    opts = AttentionOptions(softmax_scale=0.125, causal=True, fwd_tiles=_tile_list(default_tiles(64, "fwd")),
                            bwd_tiles=_tile_list(default_tiles(64, "bwd")))
    with torch.no_grad():
        qd, kd, vd = q.detach(), k.detach(), v.detach()
        out, lse, scores = attention_forward(qd, kd, vd, opts)
        print(f"ours forward_only,{per_call_us(lambda: attention_forward(qd, kd, vd, opts)):.1f}", flush=True)
        print(f"ours backward_only,{per_call_us(lambda: attention_backward(do, qd, kd, vd, out, lse, scores, opts)):.1f}",
              flush=True)

    def forward_backward():
        torch.autograd.grad(ours(q, k, v), (q, k, v), do)

    # Timestamps: the call of grad, the backward's entry and exit (on autograd's device thread), grad's return.
    import kernels.attention as attention
    stamps, inner = [], attention._backward_impl

    def stamped(*args, **kwargs):
        stamps.append(time.perf_counter())
        result = inner(*args, **kwargs)
        stamps.append(time.perf_counter())
        return result

    attention._backward_impl = stamped
    splits = []
    for _ in range(600):
        out = ours(q, k, v)
        stamps.clear()
        start = time.perf_counter()
        torch.autograd.grad(out, (q, k, v), do)
        end = time.perf_counter()
        splits.append((stamps[0] - start, stamps[1] - stamps[0], end - stamps[1]))
    attention._backward_impl = inner
    torch.cuda.synchronize()
    for i, what in enumerate(("grad call -> backward entry", "our backward", "backward exit -> grad return")):
        print(f"ours backward split: {what},{statistics.median(s[i] for s in splits[100:]) * 1e6:.1f}")
    sys.stdout.flush()

    with torch.no_grad():
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(1000):
            ours(q, k, v)
        torch.cuda.synchronize()
        profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(30)
    print("\ncProfile of 1000 forward calls (no grad), by own time:")
    print(text.getvalue())

    with torch.autograd.set_multithreading_enabled(False):
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(500):
            forward_backward()
        torch.cuda.synchronize()
        profile.disable()
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(30)
        print(f"\ncProfile of 500 forward+backward calls on one thread, by {order}:")
        print(text.getvalue())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(200):
            forward_backward()
        torch.cuda.synchronize()
    print("\ntorch.profiler, 200 forward+backward calls (autograd's threads as they run):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
