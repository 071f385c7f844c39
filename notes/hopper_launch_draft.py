"""A draft of the Hopper forward's direct launch (notes/perf.md, v13 Next 1), to move into kernels/_hopper.py.

    PYTHONPATH=. python3 notes/hopper_launch_draft.py > notes/hopper_launch_draft_h200.txt   (sm_90 GPU, ~1 min)

`kernels._hopper.hopper_forward` launches through `_hopper_fwd[grid](...)`: Triton's JIT binds and
specialises the 16 arguments and builds three `TensorDescriptor` dataclasses (each validates its
tensor and computes a shared-memory layout) on every call. The archive at 995c907 has that costing
the host 0.36-0.47 ms per call at seqlen 512, against 0.09-0.16 ms for SDPA flash.

`hopper_forward_direct` does what `hopper_forward` does. The first call with a given key (device,
dtype, q's and k's shapes, causal, overlap, tiles) goes through the JIT and keeps the compiled kernel;
later calls hand the arguments straight to the compiled kernel's launcher, as kernels/_launch.py does
for the portable kernels. The key holds every shape exactly, so it is finer than Triton's
specialisation and never stands for two compiled kernels. The launcher reads four attributes of a
host descriptor (triton/backends/nvidia/driver.py, `make_tensordesc_arg`: base, shape, strides,
padding) and encodes the TMA descriptor itself, so a named tuple stands in for the dataclass.

Run as a script, it checks the direct launch bit for bit against the JIT launch (odd lengths, GQA,
Nq != Nk, both dtypes, causal and not, repeated calls on fresh tensors), then times the host cost
per call of flash_attention's default forward with each launch, beside SDPA flash, and prints a
cProfile of the direct one.
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
from typing import NamedTuple

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels import _hopper, _launch  # noqa: E402

MAX_KEYS = 1024  # compiled kernels kept; past it the cache is cleared and refilled
_compiled: dict = {}


class _HostDescriptor(NamedTuple):
    """The attributes of a host tensor descriptor that the compiled launcher reads."""
    base: torch.Tensor
    shape: list
    strides: list
    padding: str = "zero"


def _rows(t: torch.Tensor) -> _HostDescriptor:
    b, h, n, d = t.shape
    return _HostDescriptor(t, [b * h * n, d], [d, 1])


def hopper_forward_direct(q, k, v, softmax_scale: float, causal: bool, overlap: bool = True,
                          block_n: int | None = None, stages: int | None = None):
    """kernels._hopper.hopper_forward, launching a cached compiled kernel directly after the first call."""
    batch, heads, n_q, head_dim = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    default_n, default_stages = _hopper.default_config(head_dim)
    block_n, stages = block_n or default_n, stages or default_stages
    out = torch.empty((batch, heads, n_q, head_dim), device=q.device, dtype=q.dtype)
    lse = torch.empty((batch, heads, n_q), device=q.device, dtype=torch.float32)
    grid_m, grid_hz = triton.cdiv(n_q, _hopper.BLOCK_M), batch * heads
    scalars = (n_q, n_k, heads, heads // kv_heads, softmax_scale * _hopper.LOG2E)
    constants = (block_n, head_dim, stages, bool(causal), bool(overlap), _hopper.CONSUMER_WARPS)
    device, stream = _launch._device_and_stream()
    key = (device, q.dtype, tuple(q.shape), tuple(k.shape), constants)
    compiled = _compiled.get(key)
    if compiled is None or not _launch.enabled or _launch._hooks_set():
        compiled = _hopper._hopper_fwd[(grid_m, grid_hz)](
            _hopper._descriptor(q, _hopper.HALF_M), _hopper._descriptor(k, block_n), _hopper._descriptor(v, block_n),
            out, lse, *scalars, BLOCK_N=block_n, HEAD_DIM=head_dim, STAGES=stages, CAUSAL=bool(causal),
            OVERLAP=bool(overlap), num_warps=_hopper.CONSUMER_WARPS, maxnreg=_hopper.MAX_REGS)
        if len(_compiled) >= MAX_KEYS:
            _compiled.clear()
        _compiled[key] = compiled
        return out, lse
    compiled.run(grid_m, grid_hz, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                 _rows(q), _rows(k), _rows(v), out, lse, *scalars, *constants)
    return out, lse


def check() -> None:
    """The direct launch against the JIT launch, bit for bit, on fresh tensors each call."""
    shapes = [(2, 4, 4, 1000, 1000, 128), (1, 8, 2, 129, 385, 128), (3, 2, 1, 512, 512, 64),
              (1, 4, 4, 77, 77, 64), (2, 16, 16, 512, 512, 128)]
    for batch, heads, kv_heads, n_q, n_k, head_dim in shapes:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                for call in range(3):  # the first call compiles, the next ones launch directly
                    q = torch.randn(batch, heads, n_q, head_dim, device="cuda", dtype=dtype)
                    k, v = (torch.randn(batch, kv_heads, n_k, head_dim, device="cuda", dtype=dtype) for _ in range(2))
                    scale = head_dim ** -0.5
                    ref_out, ref_lse = _hopper.hopper_forward(q, k, v, scale, causal)
                    out, lse = hopper_forward_direct(q, k, v, scale, causal)
                    torch.cuda.synchronize()
                    same = torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
                    print(f"check {batch}x{heads}/{kv_heads}x{n_q}x{n_k} d{head_dim} {str(dtype)[6:]} causal={causal} "
                          f"call {call}: {'equal' if same else 'DIFFERS'}", flush=True)
                    if not same:
                        raise SystemExit("direct launch differs from the JIT launch")


def timing() -> None:
    import host_overhead
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels import flash_attention

    jit_forward = _hopper.hopper_forward
    print("shape,causal,what,us_per_call", flush=True)
    for shape in ((1, 1, 128, 128), (32, 16, 512, 128), (16, 16, 1024, 128)):
        for causal in (True, False):
            q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16) for _ in range(3))
            label = "x".join(map(str, shape))

            def row(what, fn):
                print(f"{label},{int(causal)},{what},{host_overhead.per_call_us(fn, 2000, 100):.1f}", flush=True)

            def sdpa():
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            with torch.no_grad():
                row("sdpa_flash", sdpa)
                row("ours hopper=False", lambda: flash_attention(q, k, v, causal=causal, hopper=False))
                _hopper.hopper_forward = jit_forward
                row("ours default, JIT launch", lambda: flash_attention(q, k, v, causal=causal))
                _hopper.hopper_forward = hopper_forward_direct
                row("ours default, direct launch", lambda: flash_attention(q, k, v, causal=causal))
                row("hopper_forward_direct alone", lambda: hopper_forward_direct(q, k, v, 0.1, causal))
                row("torch.empty x2 alone", lambda: (torch.empty_like(q), torch.empty(q.shape[:3], device="cuda")))
    _hopper.hopper_forward = hopper_forward_direct
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
    _hopper.hopper_forward = jit_forward
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
    print("\ncProfile of 1000 default forward calls with the direct launch, by own time:")
    print(text.getvalue())


if __name__ == "__main__":
    check()
    timing()
