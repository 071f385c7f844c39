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

sys.path.insert(0, "tests")
from sm90_compile import _ptxas_report, compile_launch, launches_of  # noqa: E402

from kernels import flash_attention  # noqa: E402


def main(n: int = 4096) -> None:
    print("head_dim,dropout,kernel,block_m,block_n,convert_layout,bar_sync,st_shared,ld_shared,mul_hi,registers,spill_bytes")
    for head_dim in (64, 128):
        for p in (0.0, 0.1):
            qkv = [torch.randn(1, 2, n, head_dim, dtype=torch.float16, requires_grad=True) for _ in range(3)]
            for launch in launches_of(flash_attention, *qkv, hopper=False, hopper_backward=False, dropout_p=p):
                name = launch.kernel.__name__
                if name not in ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq"):
                    continue
                compiled, _ = compile_launch(launch)
                ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
                registers, spills = _ptxas_report(ptx, compiled.metadata.name)
                print(f"{head_dim},{p},{name},{launch.kwargs.get('BLOCK_M')},{launch.kwargs.get('BLOCK_N')},"
                      f"{len(re.findall(r'ttg[.]convert_layout', ttgir))},{ptx.count('bar.sync')},"
                      f"{ptx.count('st.shared')},{ptx.count('ld.shared')},{ptx.count('mul.hi')},{registers},{spills}",
                      flush=True)


if __name__ == "__main__":
    main()
