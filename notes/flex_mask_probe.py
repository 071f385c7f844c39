"""Where FlexAttention's first causal call at 16k spends its time (features' precompile, notes/perf.md v12).

    TORCHINDUCTOR_COMPILE_THREADS=1 python3 notes/flex_mask_probe.py {compiled|eager} N

As run for notes/flex_mask_probe_h200.txt, each in a fresh Inductor and Triton cache:
    for a in "compiled 4096" "eager 4096" "compiled 16384" "eager 16384"; do
      TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$RANDOM TRITON_CACHE_DIR=/tmp/tri_$RANDOM timeout 100 \
        python notes/flex_mask_probe.py $a; done

Times, in one process per mask: create_block_mask of a causal mask at 4k and 16k with
_compile=True and with _compile=False, then the first compiled flex_attention forward at 16k with
that block mask, and a second call.
"""
import sys
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def timed(label, fn):
    torch.cuda.synchronize()
    start = time.time()
    out = fn()
    torch.cuda.synchronize()
    print(f"{label}: {time.time() - start:.1f} s", flush=True)
    return out


which = sys.argv[1]
n = int(sys.argv[2])
compiled_mask = which == "compiled"
mask = timed(f"create_block_mask n={n} _compile={compiled_mask}",
             lambda: create_block_mask(causal, None, None, n, n, device="cuda", _compile=compiled_mask))
flex = torch.compile(flex_attention, dynamic=False)
q = torch.randn(1, 16, n, 128, device="cuda", dtype=torch.float16)
timed(f"first flex forward n={n}", lambda: flex(q, q, q, block_mask=mask))
timed(f"second flex forward n={n}", lambda: flex(q, q, q, block_mask=mask))
