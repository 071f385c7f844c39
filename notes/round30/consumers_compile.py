"""Compile the Hopper forward with three consumer warpgroups (192 query rows a program) for sm_90a on the CPU, beside
the two-consumer default, and print what ptxas reports (registers, spills):

    PYTHONPATH=. python3 notes/round30/consumers_compile.py

Run from a tree with round 30's 0007 patch (kernels/_hopper.py's `consumers`)."""
import sys

import torch

sys.path.insert(0, "tests")
from hopper_compile import compile_sm90  # noqa: E402

from kernels import _hopper  # noqa: E402

CONFIGS = [dict(causal=False), dict(causal=True), dict(causal=True, window_size=(1023, 0)),
           dict(causal=False, softcap=30.0), dict(causal=True, alibi=True)]

for head_dim in (64, 128):
    for consumers in (2, 3):
        for config in CONFIGS:
            config = dict(config)
            alibi = config.pop("alibi", False)
            x = torch.empty(1, 2, 4096, head_dim, dtype=torch.float16)
            f32 = torch.empty(1, 2, 4096, dtype=torch.float32)
            slopes = torch.ones(1, 2, dtype=torch.float32) if alibi else None
            args, constants = _hopper.kernel_args(x, x, x, x, f32, head_dim ** -0.5, overlap=True, alibi_slopes=slopes,
                                                  consumers=consumers, **config)
            compiled, ptx, arch, info, seconds = compile_sm90(_hopper._hopper_fwd, args, constants,
                                                              _hopper.REGISTERS[consumers][0])
            print(f"d{head_dim} consumers={consumers} {config}{' alibi' if alibi else ''}: shared="
                  f"{compiled.metadata.shared} wgmma={ptx.count('wgmma.mma_async')} "
                  f"setmaxnreg={ptx.count('setmaxnreg')} ({seconds:.1f} s) | {info}", flush=True)
