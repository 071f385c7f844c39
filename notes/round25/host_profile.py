"""Host time of one forward+backward call at seqlen 512, ours against SDPA flash, and where ours spends it.

    PYTHONPATH=. python3 notes/round25/host_profile.py > $OUT/host_profile.txt      (a CUDA GPU)

The `speed` ablation's shapes at seqlen 512 (batch 32, 2048 // head dim heads, fp16, inputs that require grad),
timed as experiments/measure.py times host_ms: synchronise, then the host's time to issue
`o = attend(q, k, v); torch.autograd.grad(o, (q, k, v), do)` into an empty queue; medians of CALLS calls.
Then cProfile over PROFILE_CALLS calls of ours at each head dim (full mask), the top functions by own time
and by cumulative time."""
import cProfile
import io
import os
import pstats
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import flash_attention

CALLS = int(os.environ.get("CALLS", "60"))
PROFILE_CALLS = int(os.environ.get("PROFILE_CALLS", "40"))
HEAD_DIMS = tuple(int(d) for d in os.environ.get("HEAD_DIMS", "64,128,256").split(","))


def sdpa(causal):
    def attend(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return attend


def ours(causal):
    return lambda q, k, v: flash_attention(q, k, v, causal=causal)


def call(attend, q, k, v, do):
    o = attend(q, k, v)
    return torch.autograd.grad(o, (q, k, v), do)


def host_ms(attend, q, k, v, do):
    for _ in range(10):
        call(attend, q, k, v, do)
    times = []
    for _ in range(CALLS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call(attend, q, k, v, do)
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times), min(times)


def main():
    print("head_dim,causal,provider,host_ms_median,host_ms_min")
    inputs = {}
    for head_dim in HEAD_DIMS:
        heads = 2048 // head_dim
        q, k, v, do = (torch.randn(32, heads, 512, head_dim, device="cuda", dtype=torch.float16,
                                   requires_grad=i < 3) for i in range(4))
        inputs[head_dim] = (q, k, v, do)
        for causal in (False, True):
            for name, make in (("ours", ours), ("sdpa_flash", sdpa)):
                median, least = host_ms(make(causal), q, k, v, do)
                print(f"{head_dim},{int(causal)},{name},{median:.4f},{least:.4f}", flush=True)
    for head_dim in HEAD_DIMS:
        q, k, v, do = inputs[head_dim]
        attend = ours(False)
        call(attend, q, k, v, do)
        torch.cuda.synchronize()
        profile = cProfile.Profile()
        for _ in range(PROFILE_CALLS):
            torch.cuda.synchronize()
            profile.enable()
            call(attend, q, k, v, do)
            profile.disable()
        torch.cuda.synchronize()
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats(order).print_stats(22)
            print(f"\n# ours, head dim {head_dim}, full, {PROFILE_CALLS} calls, by {order}")
            print(text.getvalue().split("\n", 6)[-1])


if __name__ == "__main__":
    main()
