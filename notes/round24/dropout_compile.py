"""The portable kernels with dropout, compiled for sm_90 on a machine without a GPU: what the keep mask costs.

For head dims 64 and 128, full, the forward, dK/dV and dQ kernels of a call with and without dropout (p = 0.1, the
engine's default tiles; `hopper=False`, `hopper_backward=False`, as dropout runs): the TTGIR's layout conversions,
and from the PTX the barriers, shared-memory stores and loads and 32-bit high multiplies (Philox's), with ptxas's
registers and spill bytes. A layout conversion that goes through shared memory shows up as extra barriers and
shared loads and stores beside the plain kernel's.

    PYTHONPATH=. python3 notes/round24/dropout_compile.py          (TRITON_INTERPRET unset)
"""
import re
import sys

import torch
import triton
from triton.compiler import compile as triton_compile
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

sys.path.insert(0, "tests")
from sm90_compile import SM90, _ptxas_report, launches_of  # noqa: E402

from kernels import flash_attention  # noqa: E402


def compile_launch(launch):
    kernel = launch.kernel
    backend = make_backend(SM90)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(launch.kwargs)
    kwargs.setdefault("debug", False)
    bound_args, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound_args, specialization, options)
    return triton_compile(triton.compiler.ASTSource(kernel, signature, constexprs, attrs), target=SM90,
                          options=options.__dict__)


def main(n: int = 4096) -> None:
    print("head_dim,dropout,kernel,block_m,block_n,convert_layout,bar_sync,st_shared,ld_shared,mul_hi,registers,spill_bytes")
    for head_dim in (64, 128):
        for p in (0.0, 0.1):
            qkv = [torch.randn(1, 2, n, head_dim, dtype=torch.float16, requires_grad=True) for _ in range(3)]
            for launch in launches_of(flash_attention, *qkv, hopper=False, hopper_backward=False, dropout_p=p):
                name = launch.kernel.__name__
                if name not in ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq"):
                    continue
                compiled = compile_launch(launch)
                ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
                registers, spills = _ptxas_report(ptx, compiled.metadata.name)
                print(f"{head_dim},{p},{name},{launch.kwargs.get('BLOCK_M')},{launch.kwargs.get('BLOCK_N')},"
                      f"{len(re.findall(r'ttg[.]convert_layout', ttgir))},{ptx.count('bar.sync')},"
                      f"{ptx.count('st.shared')},{ptx.count('ld.shared')},{ptx.count('mul.hi')},{registers},{spills}",
                      flush=True)


if __name__ == "__main__":
    main()
