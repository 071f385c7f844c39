"""Where ours' host time per call goes on the GPU host: Triton's launcher against our Python layers.

    python3 notes/launch_profile.py > notes/launch_profile.txt        (on a CUDA GPU)

1. Triton's launch cost by argument count: an empty kernel with 4, 16 and 40 runtime arguments
   (tensors and ints, as our kernels take), launched back to back; microseconds per launch.
2. The same empty kernel launched through its CompiledKernel (`kernel.run` with the cached
   binary, skipping JITFunction.run's binding, specialisation and cache lookup): what a direct
   launch of cached kernels could save per launch.
3. torch.empty and torch.empty_like per call (each pass allocates two or three outputs).
4. Ours' forward and forward+backward per call on a tiny shape (1x1x128x64), and a cProfile of
   the forward+backward sorted by own time: where the rest goes.
"""
import cProfile
import io
import pstats
import sys

import torch
import triton
import triton.language as tl

import host_overhead  # notes/, beside this script
from kernels import flash_attention


@triton.jit
def _empty4(a, b, n0, n1):
    pass


@triton.jit
def _empty16(a, b, c, d, n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11):
    pass


@triton.jit
def _empty40(a, b, c, d, e, f, n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, n15,
             n16, n17, n18, n19, n20, n21, n22, n23, n24, n25, n26, n27, n28, n29, n30, n31, n32, n33,
             X: tl.constexpr, Y: tl.constexpr):
    pass


def per_call_us(fn, calls=5000):
    return host_overhead.per_call_us(fn, calls, warmup=100)


def main():
    t = torch.empty(1024, device="cuda")
    ints = list(range(3, 3 + 34))
    cases = {
        "jit_4_args": (_empty4, [t, t, 5, 7], {}),
        "jit_16_args": (_empty16, [t, t, t, t] + ints[:12], {}),
        "jit_40_args": (_empty40, [t] * 6 + ints, dict(X=64, Y=128)),
    }
    print("what,us_per_call")
    for name, (kernel, args, constexprs) in cases.items():
        print(f"{name},{per_call_us(lambda: kernel[(1,)](*args, **constexprs)):.2f}", flush=True)
        compiled = kernel[(1,)](*args, **constexprs)
        runtime = list(args) + list(constexprs.values())  # the launcher takes constexprs too, and skips them
        stream = torch.cuda.current_stream().cuda_stream

        def direct():
            compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *runtime)

        try:
            print(f"direct_{name},{per_call_us(direct):.2f}", flush=True)
        except Exception as error:  # the launcher's calling convention differs: say so and go on
            print(f"direct_{name},failed: {type(error).__name__}: {error}".replace("\n", " "), flush=True)
    print(f"torch_empty,{per_call_us(lambda: torch.empty((1, 1, 128), device='cuda', dtype=torch.float32)):.2f}")
    x = torch.empty((1, 1, 128, 64), device="cuda", dtype=torch.float16)
    print(f"torch_empty_like,{per_call_us(lambda: torch.empty_like(x)):.2f}")

    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    out = flash_attention(q, k, v, causal=True)
    d_out = torch.randn_like(out)

    def forward():
        with torch.no_grad():
            flash_attention(q, k, v, causal=True)

    def forward_backward():
        torch.autograd.grad(flash_attention(q, k, v, causal=True), (q, k, v), d_out)

    print(f"ours_fwd,{per_call_us(forward, 2000):.2f}")
    print(f"ours_fwd_bwd,{per_call_us(forward_backward, 1000):.2f}", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(500):
        forward_backward()
    torch.cuda.synchronize()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(30)
    print("\ncProfile of 500 forward+backward calls, by own time:")
    print(text.getvalue())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
