"""Registers and spills of the backward kernels with softcap, compiled for sm_90a on a machine without a GPU.

    PYTHONPATH=. python3 notes/round25/softcap_compile.py > softcap_compile.csv      (TRITON_INTERPRET unset)

Rows: the portable kernels (a flash_attention call with hopper=False, hopper_backward=False, recorded and
compiled by tests/sm90_compile.py) and the Hopper backward (tests/hopper_compile.py), at head dims 64 and 128,
full and causal, softcap 30 alone and with a window and ALiBi (the Hopper one only)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import hopper_compile  # noqa: E402
from sm90_compile import compile_sm90, launches_of  # noqa: E402

from kernels import flash_attention  # noqa: E402

print("kernel,head_dim,causal,features,registers,spill_bytes")
for head_dim in (64, 128):
    for causal in (False, True):
        qkv = [torch.randn(1, 2, 1024, head_dim, dtype=torch.float16, requires_grad=True) for _ in range(3)]
        for launch in launches_of(flash_attention, *qkv, causal=causal, softcap=30.0, hopper=False,
                                  hopper_backward=False):
            c = compile_sm90(launch)
            print(f"{c.name},{head_dim},{int(causal)},softcap,{c.registers},{c.spill_bytes}", flush=True)
        for features, extra in (("softcap", {}), ("window softcap alibi", dict(window_size=(511, 0), alibi=True))):
            line = hopper_compile.compile_backward(head_dim, causal, softcap=30.0, **extra)
            registers = int(line.split("Used ")[1].split(" registers")[0])
            spills = int(line.split(" bytes spill stores")[0].rsplit(" ", 1)[1])
            print(f"hopper_bwd,{head_dim},{int(causal)},{features},{registers},{spills}", flush=True)
