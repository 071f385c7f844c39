"""Compile the engine's Triton kernels for the H100/H200 (sm_90) on a machine without a GPU.

The interpreter (TRITON_INTERPRET=1) runs the kernels' Python semantics but never compiles them, so
code that only the compiler sees (inline PTX, layouts, shared-memory and register limits) would
first fail on the GPU. This module runs our host code on CPU tensors with every kernel launch
replaced by a recorder, then hands each recorded launch to Triton's compiler for the sm_90 target
exactly as `JITFunction.run` would (same binder, specialisation and options), and reads the
register and spill counts from ptxas.

    PYTHONPATH=. python3 tests/sm90_compile.py        # every kernel, each head dim and feature

It is run by tests/test_sm90_compile.py (in a subprocess: the interpreter must be off there).
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import compile as triton_compile
from triton.compiler import make_backend
from triton.runtime.autotuner import Heuristics
from triton.runtime.jit import JITFunction, create_function_from_signature

SM90 = GPUTarget("cuda", 90, 32)


@dataclass
class Launch:
    kernel: JITFunction  # under any heuristics, whose constexprs are in kwargs
    args: tuple
    kwargs: dict


class _Recorder:
    """Stands in for a JITFunction: `kernel[grid](*args, **kwargs)` records the launch."""

    def __init__(self, kernel: JITFunction, launches: list[Launch]):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kernel = self.kernel
            while isinstance(kernel, Heuristics):  # add the constexprs it computes, as its run would
                for name, rule in kernel.values.items():
                    kwargs[name] = rule({**dict(zip(kernel.arg_names, args)), **kwargs})
                kernel = kernel.fn
            self.launches.append(Launch(kernel, args, kwargs))
        return launch


@contextlib.contextmanager
def recorded_launches():
    """Within the block, our host code runs on CPU tensors and every kernel launch is recorded
    (nothing runs; outputs stay uninitialised). Yields the list of `Launch`es."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("sm90_compile needs the real compiler: unset TRITON_INTERPRET")
    import kernels._backward
    import kernels._decode
    import kernels._forward
    import kernels.attention

    launches: list[Launch] = []
    patched = []
    for module in (kernels._forward, kernels._backward, kernels._decode):
        for name, value in vars(module).items():
            if name in KERNELS and isinstance(value, (JITFunction, Heuristics)):
                patched.append((module, name, value))
                setattr(module, name, _Recorder(value, launches))
    saved = kernels.attention._interpreter_on
    kernels.attention._interpreter_on = lambda: True  # let check_inputs take CPU tensors
    try:
        yield launches
    finally:
        kernels.attention._interpreter_on = saved
        for module, name, value in patched:
            setattr(module, name, value)


# the kernels the host code launches (helpers, called only from kernels, stay in place)
KERNELS = {"_attn_fwd", "_transpose_rows", "_attn_probs", "_attn_bwd_delta", "_attn_bwd_dkdv", "_attn_bwd_dq",
           "_decode_fwd", "_decode_combine"}


@dataclass
class Compiled:
    name: str
    num_warps: int
    num_stages: int
    registers: int
    spill_bytes: int
    shared_bytes: int
    ptx: str


def compile_launch(launch: Launch):
    """Compile one recorded launch for sm_90 as JITFunction.run would; returns Triton's compiled kernel
    (its `asm` holds the TTGIR and PTX) and the options it was compiled with."""
    kernel = launch.kernel
    backend = make_backend(SM90)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(launch.kwargs)
    kwargs.setdefault("debug", False)
    bound_args, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound_args, specialization, options)
    source = triton.compiler.ASTSource(kernel, signature, constexprs, attrs)
    return triton_compile(source, target=SM90, options=options.__dict__), options


def compile_sm90(launch: Launch) -> Compiled:
    """Compile one recorded launch for sm_90 as JITFunction.run would, and read ptxas's report."""
    compiled, options = compile_launch(launch)
    registers, spills = _ptxas_report(compiled.asm["ptx"], compiled.metadata.name)
    return Compiled(launch.kernel.__name__, options.num_warps, options.num_stages, registers, spills,
                    compiled.metadata.shared, compiled.asm["ptx"])


def _ptxas_report(ptx: str, name: str) -> tuple[int, int]:
    """(registers per thread, spill store bytes) of `name` in `ptx`, from `ptxas -v` for sm_90a."""
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        result = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", path, "-o", os.path.join(tmp, "kernel.cubin")],
                                capture_output=True, text=True, check=True)
    log = result.stderr + result.stdout
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores", log)
    return int(registers.group(1)) if registers else -1, int(spills.group(1)) if spills else 0


def launches_of(fn, *args, **kwargs) -> list[Launch]:
    """The kernel launches `fn(*args, **kwargs)` makes (forward, and backward if it returns a tensor
    that requires grad, through autograd)."""
    with recorded_launches() as launches:
        out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            torch.autograd.grad(out, [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad],
                                torch.zeros_like(out))
    return list(launches)


def check_cases():
    """(label, launches) of the configurations every kernel must compile in: each head dim class,
    each feature and their combination, causal and not, atomic dQ, the probabilities kernel and
    the decoding kernels (split and combine), and the fp8 forward at each head dim class."""
    from kernels import flash_attention
    from kernels._decode import decode_forward

    def qkv(head_dim, n=200):
        return [torch.randn(1, 2, n, head_dim, dtype=torch.float16, requires_grad=True) for _ in range(3)]

    cases = []
    for head_dim in (40, 64, 96, 128, 192, 256):  # 96 and 192: the column chunks (kernels.tiles.head_dim_chunks)
        everything = dict(window_size=(50, 0), softcap=10.0, alibi_slopes=torch.rand(2), dropout_p=0.1)
        cases.append((f"d{head_dim} plain", launches_of(flash_attention, *qkv(head_dim))))
        cases.append((f"d{head_dim} causal, every feature",
                      launches_of(flash_attention, *qkv(head_dim), causal=True, **everything)))
        cases.append((f"d{head_dim} causal, atomic dQ",
                      launches_of(flash_attention, *qkv(head_dim), causal=True, atomic_dq=True)))
    cases.append(("probabilities", launches_of(lambda *a, **k: flash_attention(*a, **k)[0], *qkv(64), dropout_p=0.1,
                                               return_probs=True)))
    q = torch.randn(2, 1, 8, 128, dtype=torch.float16)
    cache = torch.randn(2, 4096, 1, 128, dtype=torch.float16)
    with recorded_launches() as launches:
        decode_forward(q, cache, cache, torch.tensor([4000, 100], dtype=torch.int32), None, None, None,
                       torch.rand(2, 8), 0.1, True, (-1, -1), 5.0, 0, 4000)
    cases.append(("decoding, softcap and ALiBi", list(launches)))
    # the fp8 forward (default tiles), GQA, per-head descales; lengths a multiple of 16 as in the
    # measurements (ragged ones compile too, with more spills: the last case)
    for head_dim, n, causal in [(d, 1024, c) for d in (16, 40, 64, 128, 256) for c in (False, True)] + [(128, 300, True)]:
        q8 = torch.randn(2, 4, n, head_dim).to(torch.float8_e4m3fn)
        k8, v8 = (torch.randn(2, 2, n, head_dim).to(torch.float8_e4m3fn) for _ in range(2))
        descales = dict(q_descale=torch.rand(2, 4), k_descale=torch.rand(2, 2), v_descale=torch.rand(2, 2))
        label = f"d{head_dim} fp8{' causal' if causal else ''}{', ragged' if n % 16 else ''}"
        cases.append((label, launches_of(flash_attention, q8, k8, v8, causal=causal, **descales)))
    return cases


def main(argv: list[str]) -> int:
    """Compile every case's kernels for sm_90; print a table; exit 1 if any fails to compile.
    `--max-spill KERNEL:HEAD_DIM:BYTES` (repeatable) also fails when a plain case spills more."""
    limits = [arg.split(":") for arg in argv[argv.index("--max-spill") + 1:]] if "--max-spill" in argv else []
    failed = 0
    print(f"{'case':<32}{'kernel':<18}{'warps':>6}{'stages':>7}{'regs':>6}{'spill B':>8}{'smem KiB':>9}")
    for label, launches in check_cases():
        for launch in launches:
            try:
                c = compile_sm90(launch)
            except Exception as error:  # report every failure, then fail
                failed += 1
                print(f"{label:<32}{launch.kernel.__name__:<18} FAILED: {type(error).__name__}: {error}")
                continue
            print(f"{label:<32}{c.name:<18}{c.num_warps:>6}{c.num_stages:>7}{c.registers:>6}{c.spill_bytes:>8}"
                  f"{c.shared_bytes / 1024:>9.0f}", flush=True)
            for kernel, head_dim, most in limits:
                if label == f"d{head_dim} plain" and c.name == kernel and c.spill_bytes > int(most):
                    failed += 1
                    print(f"  {kernel} at head dim {head_dim} spills {c.spill_bytes} bytes, more than {most}")
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
