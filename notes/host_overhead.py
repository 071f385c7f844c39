"""Host-side cost per call: ours vs SDPA flash on a tiny shape, where the GPU work is negligible.

    python3 notes/host_overhead.py > notes/host_overhead.csv     (on a CUDA GPU)

Times N back-to-back calls with a host clock around a final synchronize: with a tiny problem the
GPU finishes each kernel before the host issues the next, so the time per call is the host's cost
(Python, dispatch, launches). Also reports the do_bench median of the paper-grid cell at seqlen 512,
D=64, causal (B=32, H=32), for comparison with what the GPU needs for that cell.
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from kernels import flash_attention


def per_call_us(fn, calls=2000, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def sdpa(q, k, v, causal):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    print("provider,what,shape,us_per_call")
    for name, attend in (("ours", lambda q, k, v: flash_attention(q, k, v, causal=True)),
                         ("sdpa_flash", lambda q, k, v: sdpa(q, k, v, True))):
        for shape in ((1, 1, 128, 64), (32, 32, 512, 64)):
            q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
            o = attend(q, k, v)
            do = torch.randn_like(o)
            label = "x".join(map(str, shape))
            with torch.no_grad():
                print(f"{name},fwd_host_loop,{label},{per_call_us(lambda: attend(q, k, v)):.1f}")
            print(f"{name},fwd_bwd_host_loop,{label},"
                  f"{per_call_us(lambda: torch.autograd.grad(attend(q, k, v), (q, k, v), do), 500):.1f}")
            ms = do_bench(lambda: torch.autograd.grad(attend(q, k, v), (q, k, v), do), return_mode="median")
            print(f"{name},fwd_bwd_do_bench_median,{label},{ms * 1e3:.1f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
