"""Where the Hopper forward's host time per call goes, and what a direct launch would save (sm_90).

    PYTHONPATH=. python3 notes/hopper_host_probe.py > notes/hopper_host_probe_h200.txt   (about a minute)

The archive at 995c907 (notes/perf.md, v13) has the default d128 forward, the Hopper kernel, costing the
host 0.36-0.47 ms per call at sequence length 512 against 0.16-0.35 ms for the portable kernels and
0.09-0.16 ms for SDPA flash. Each line below times back-to-back forward calls (no grad) with a host clock
around a final synchronize (notes/host_overhead.py), on a tiny shape (1 x 1 x 128 x 128, fp16, causal:
the GPU's work is microseconds, so the time per call is the host's) and on the speed grid's 512 shape
(32 x 16 x 512 x 128), layer by layer:
  sdpa_flash                      the reference
  ours default / hopper=False     flash_attention: the Hopper forward, the portable forward
  hopper_forward                  kernels._hopper.hopper_forward called directly (no checks, no op)
  descriptors                     building its three TensorDescriptors only
  jit launch, prebuilt            `_hopper_fwd[grid](...)` with descriptors built once (Triton's JIT dispatch)
  direct launch, prebuilt         the compiled kernel's own launcher with those descriptors, as
                                  kernels/_launch.py does for the portable kernels; its output is
                                  checked against the JIT launch's, bit for bit
  direct launch, fresh descriptors  the same with the descriptors built on every call
Then a cProfile of 1000 default forward calls at the tiny shape, by own time.
"""
import cProfile
import io
import os
import pstats
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import host_overhead  # noqa: E402  (notes/, beside this script)
import triton  # noqa: E402
from kernels import _hopper, flash_attention  # noqa: E402
from kernels._launch import _device_and_stream  # noqa: E402


def per_call_us(fn, calls=2000):
    return host_overhead.per_call_us(fn, calls, warmup=100)


def descriptors(q, k, v):
    """The three TensorDescriptors hopper_forward builds on every call."""
    block_n, _ = _hopper.default_config(q.shape[-1])
    return (_hopper._descriptor(q, _hopper.HALF_M), _hopper._descriptor(k, block_n),
            _hopper._descriptor(v, block_n))


def launch_args(q, k, v, causal):
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    block_n, stages = _hopper.default_config(head_dim)
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(n_q, _hopper.BLOCK_M), batch * heads)
    positional = (out, lse, n_q, n_k, heads, heads // kv_heads, head_dim ** -0.5 * _hopper.LOG2E)
    constants = dict(BLOCK_N=block_n, HEAD_DIM=head_dim, STAGES=stages, CAUSAL=causal, OVERLAP=True)
    return grid, descriptors(q, k, v), positional, constants, (out, lse)


def probe(shape, causal, print_row):
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16) for _ in range(3))
    label = "x".join(map(str, shape))

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    grid, prebuilt, positional, constants, outputs = launch_args(q, k, v, causal)
    kernel = _hopper._hopper_fwd
    options = dict(num_warps=_hopper.CONSUMER_WARPS, maxnreg=_hopper.MAX_REGS)

    def jit_launch():
        return kernel[grid](*prebuilt, *positional, **constants, **options)

    compiled = jit_launch()
    jit_out = [t.clone() for t in outputs]
    names = kernel.arg_names
    values = dict(zip(names, prebuilt + positional), **constants, num_warps=_hopper.CONSUMER_WARPS)

    def direct(descs=prebuilt):
        _, stream = _device_and_stream()
        ordered = [dict(values, **dict(zip(names, descs)))[name] for name in names]
        compiled.run(grid[0], grid[1], 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                     *ordered)

    def direct_fresh():
        direct(descriptors(q, k, v))

    with torch.no_grad():
        print_row(label, "sdpa_flash", per_call_us(sdpa))
        print_row(label, "ours default", per_call_us(lambda: flash_attention(q, k, v, causal=causal)))
        print_row(label, "ours hopper=False", per_call_us(lambda: flash_attention(q, k, v, causal=causal,
                                                                                  hopper=False)))
        print_row(label, "hopper_forward", per_call_us(
            lambda: _hopper.hopper_forward(q, k, v, q.shape[-1] ** -0.5, causal)))
        print_row(label, "descriptors", per_call_us(lambda: descriptors(q, k, v)))
        print_row(label, "jit launch, prebuilt", per_call_us(jit_launch))
        try:
            for t in outputs:
                t.zero_()
            direct()
            torch.cuda.synchronize()
            same = all(torch.equal(a, b) for a, b in zip(outputs, jit_out))
            print_row(label, f"direct launch, prebuilt (output {'equal' if same else 'DIFFERS'})", per_call_us(direct))
            print_row(label, "direct launch, fresh descriptors", per_call_us(direct_fresh))
        except Exception as error:  # the launcher may not take host descriptors this way: say so
            print(f"{label},direct launch failed: {type(error).__name__}: {error}", flush=True)


def main():
    print("shape,what,us_per_call", flush=True)

    def print_row(label, what, us):
        print(f"{label},{what},{us:.1f}", flush=True)

    for shape in ((1, 1, 128, 128), (32, 16, 512, 128)):
        probe(shape, True, print_row)
    q, k, v = (torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    with torch.no_grad():
        for _ in range(100):
            flash_attention(q, k, v, causal=True)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(1000):
            flash_attention(q, k, v, causal=True)
        torch.cuda.synchronize()
        profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(30)
    print("\ncProfile of 1000 default forward calls (the Hopper kernel), by own time:")
    print(text.getvalue())


if __name__ == "__main__":
    main()
