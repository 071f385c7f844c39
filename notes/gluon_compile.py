"""Compile a Gluon kernel for sm_90a on a machine without a GPU, from the arguments a launch would pass.

Shared by the drafts in notes/ (gluon_bwd_v16_draft.py, hopper_fp8_draft.py): tensors and descriptors are
specialised as Triton's launcher would, floats become fp32 and ints i32, `constants` are the constexprs;
ptxas' report comes from tests/hopper_compile.py.
"""
from __future__ import annotations

import os
import sys
import time

import torch
import triton
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend
from triton.compiler import make_backend
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from hopper_compile import SM90, _ptxas_report  # noqa: E402


def compile_sm90(kernel, args: tuple, constants: dict, maxnreg: int):
    """(compiled kernel, its PTX, the PTX target, ptxas' register and spill report, seconds taken)."""
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
    compiled = triton.compile(GluonASTSource(kernel, signature, constexprs, {}), target=SM90,
                              options=options.__dict__)
    ptx = compiled.asm["ptx"]
    arch, info = _ptxas_report(ptx)
    return compiled, ptx, arch, info, time.time() - start
