"""Compile the Hopper forward (kernels/_hopper.py) and backward (kernels/_hopper_bwd.py) for sm_90a
on a machine without a GPU.

Gluon kernels never run on Triton's interpreter, so this is where a layout, register or shared
memory problem shows up before the GPU: every configuration (head dim x mask x pipeline) goes
through Triton's compiler for the H100/H200 target with the signature a launch would have, and
ptxas reports its registers, spills and barriers.

    PYTHONPATH=. python3 tests/hopper_compile.py

Run by tests/test_hopper.py in a subprocess (the interpreter must be off).
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time

import torch
import triton
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import make_backend
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import _hopper, _hopper_bwd, _hopper_bwd_wide

SM90 = GPUTarget("cuda", 90, 32)


def _ptxas_report(ptx: str) -> tuple[str, str]:
    arch = re.search(r"\.target (sm_\w+)", ptx).group(1)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        report = subprocess.run([get_ptxas(90).path, "-v", f"--gpu-name={arch}", f.name, "-o", "/dev/null"],
                                capture_output=True, text=True, check=True).stderr
    info = "; ".join(line.split("info    : ")[-1].strip() for line in report.splitlines()
                     if "Used" in line or "spill" in line)
    return arch, info


def compile_sm90(kernel, args: tuple, constants: dict, maxnreg: int):
    """Compile a Gluon kernel for sm_90a from the arguments a launch would pass: tensors and descriptors
    specialised as Triton's launcher would, floats as fp32 and ints as i32, `constants` the constexprs.
    Returns (compiled kernel, its PTX, the PTX target, ptxas' register and spill report, seconds taken).
    The drafts in notes/ compile through it too."""
    names = kernel.arg_names
    signature = {}
    for name, value in zip(names, args):
        if isinstance(value, (torch.Tensor, TensorDescriptor)):
            signature[name] = native_specialize_impl(BaseBackend, value, False, True, True)[0]
        else:
            signature[name] = "fp32" if isinstance(value, float) else "i32"
    signature.update({name: "constexpr" for name in constants})
    constexprs = {(names.index(name),): value for name, value in constants.items()}
    options = make_backend(SM90).parse_options(dict(num_warps=constants["num_warps"], maxnreg=maxnreg))
    start = time.time()
    compiled = triton.compile(GluonASTSource(kernel, signature, constexprs, {}), target=SM90, options=options.__dict__)
    ptx = compiled.asm["ptx"]
    arch, info = _ptxas_report(ptx)
    return compiled, ptx, arch, info, time.time() - start


def _feature_names(constants: dict) -> str:
    """" window softcap alibi" (those the compile-time switches turn on), for a report line."""
    return "".join(f" {name}" for name in ("window", "softcap", "alibi") if constants[name.upper()])


def compile_config(head_dim: int, causal: bool, overlap: bool, dtype=torch.float16, n: int = 4096,
                   window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0, alibi: bool = False) -> str:
    """One configuration compiled for sm_90a; returns a line with what ptxas reports."""
    x = torch.empty(1, 2, n, head_dim, dtype=dtype)
    f32 = torch.empty(1, 2, n, dtype=torch.float32)
    slopes = torch.ones(1, 2, dtype=torch.float32) if alibi else None
    args, constants = _hopper.kernel_args(x, x, x, x, f32, head_dim ** -0.5, causal, overlap, window_size=window_size,
                                          softcap=softcap, alibi_slopes=slopes)
    compiled, ptx, arch, info, seconds = compile_sm90(_hopper._hopper_fwd, args, constants, _hopper.MAX_REGS)
    features = _feature_names(constants)
    return (f"d{head_dim} causal={causal} overlap={overlap}{features}: {arch} shared={compiled.metadata.shared} "
            f"wgmma={ptx.count('wgmma.mma_async')} setmaxnreg={ptx.count('setmaxnreg')} "
            f"tanh={ptx.count('tanh.approx')} ({seconds:.1f} s) | {info}")


# The forward's features, compiled at head dims 64 and 128 with the overlapped pipeline: a causal
# sliding window, a two-sided one, softcap, ALiBi, and all of them together.
FEATURE_CONFIGS = [
    dict(causal=True, window_size=(1023, 0)),
    dict(causal=False, window_size=(256, 127)),
    dict(causal=False, softcap=30.0),
    dict(causal=True, alibi=True),
    dict(causal=True, window_size=(511, 0), softcap=50.0, alibi=True),
]


def compile_backward(head_dim: int, causal: bool, dtype=torch.float16, n: int = 4096,
                     window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0, alibi: bool = False) -> str:
    """The one-pass backward at its default schedule for sm_90a (the wide kernel at 192 and 256, which has no
    features); a line with its MMA, TMA and ptxas counts."""
    x = torch.empty(1, 2, n, head_dim, dtype=dtype)
    f32 = torch.empty(1, 2, n, dtype=torch.float32)
    features = ""
    if head_dim in _hopper_bwd.WIDE_HEAD_DIMS:
        wide = _hopper_bwd_wide.SCHEDULE
        args, constants = _hopper_bwd_wide.kernel_args(x, x, x, x, torch.empty(1, 2, head_dim, n), f32, f32, x, x,
                                                       head_dim ** -0.5, causal, **wide)
        schedule = "wide " + " ".join(f"{k}={v}" for k, v in wide.items())
        compiled, ptx, arch, info, seconds = compile_sm90(_hopper_bwd_wide._wide_bwd, args, constants,
                                                          _hopper_bwd_wide.max_regs(wide["self_loading"]))
    else:
        slopes = torch.ones(1, 2, dtype=torch.float32) if alibi else None
        args, constants = _hopper_bwd.kernel_args(x, x, x, x, torch.empty(1, 2, n, head_dim), f32, f32, x, x,
                                                  head_dim ** -0.5, causal, window_size=window_size, softcap=softcap,
                                                  alibi_slopes=slopes)
        schedule = _hopper_bwd.SCHEDULES[head_dim][0]
        compiled, ptx, arch, info, seconds = compile_sm90(_hopper_bwd._hopper_bwd, args, constants,
                                                          _hopper_bwd.max_regs(schedule))
        features = _feature_names(constants)
    return (f"bwd d{head_dim} causal={causal} {schedule}{features}: {arch} shared={compiled.metadata.shared} "
            f"wgmma={ptx.count('wgmma.mma_async')} setmaxnreg={ptx.count('setmaxnreg')} "
            f"tma_reduce={ptx.count('cp.reduce.async.bulk.tensor')} tma_load={ptx.count('cp.async.bulk.tensor')} "
            f"tanh={ptx.count('tanh.approx')} ({seconds:.1f} s) | {info}")


def main() -> int:
    for head_dim in _hopper.HEAD_DIMS:
        for causal in (False, True):
            for overlap in (False, True):
                print(compile_config(head_dim, causal, overlap), flush=True)
    for head_dim in (64, 128):
        for features in FEATURE_CONFIGS:
            print(compile_config(head_dim, overlap=True, **features), flush=True)
    for head_dim in _hopper_bwd.HEAD_DIMS:
        for causal in (False, True):
            print(compile_backward(head_dim, causal), flush=True)
        for features in FEATURE_CONFIGS if head_dim in _hopper_bwd.FEATURE_HEAD_DIMS else ():
            print(compile_backward(head_dim, **features), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
