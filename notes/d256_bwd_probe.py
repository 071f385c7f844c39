"""Backward tile configs at head dim 256: which fit the H200 and how fast each runs.

    python3 notes/d256_bwd_probe.py > notes/d256_bwd_probe.csv        (on a CUDA GPU)

The default backward tiles at head dim 256 (kernels/tiles.py) are BLOCK_M 16, BLOCK_N 64, eight
warps, two stages (four warps before, which spilled): the dK/dV kernel holds 64 keys and walks the
queries 16 rows at a time, and the dQ kernel mirrors it. The backward runs at a fraction of SDPA flash's there. This times the
backward alone (gradients of a kept forward graph, triton.testing.do_bench median) of each config
below on the paper's shape at seqlen 4k (batch 4, 2048 hidden: 8 heads), full and causal, with
the dQ kernel (default) and with atomic dQ (`RUNS`); configs that do not fit raise OutOfResources and are
listed as such. The default config is measured first and last, to show drift.
"""
import sys

import torch
from triton.runtime.errors import OutOfResources
from triton.testing import do_bench

from experiments.flops import attention_flops
from kernels import TileConfig, flash_attention

OLD_DEFAULT, DEFAULT = (16, 64, 4, 2), (16, 64, 8, 2)
# (causal, atomic_dq, configs): the configs without spills at sm_90 (tests/sm90_compile.py), the
# earlier default (spills 1.7 KB per thread in the dK/dV kernel), the default first and last
RUNS = [(False, False, [DEFAULT, OLD_DEFAULT, (32, 64, 8, 2), (64, 32, 8, 1), (32, 32, 8, 1), (16, 32, 4, 2),
                        DEFAULT])]


def main():
    print("seqlen,causal,atomic_dq,block_m,block_n,num_warps,num_stages,bwd_ms,bwd_tflops,status", flush=True)
    head_dim, heads = 256, 8
    seqlen = 4096
    for causal, atomic_dq, configs in RUNS:
        batch = 16384 // seqlen
        q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16, requires_grad=True)
                   for _ in range(3))
        d_out = torch.randn_like(q)
        flops = attention_flops(batch, heads, seqlen, seqlen, head_dim, causal, "bwd")
        for config in configs:
            tiles = TileConfig(*config)
            try:
                out = flash_attention(q, k, v, causal=causal, bwd_tiles=tiles, atomic_dq=atomic_dq)
                ms = do_bench(lambda: torch.autograd.grad(out, (q, k, v), d_out, retain_graph=True),
                              warmup=50, rep=300, return_mode="median")
                status, tflops = "ok", flops / (ms * 1e-3) / 1e12
            except OutOfResources as error:
                ms, tflops, status = float("nan"), float("nan"), f"out of resources ({error.name})"
            except Exception as error:  # report and go on: this is a probe
                ms, tflops, status = float("nan"), float("nan"), f"{type(error).__name__}: {error}"[:120]
            status = status.replace(",", ";").replace("\n", " ")
            print(f"{seqlen},{int(causal)},{int(atomic_dq)},{','.join(map(str, config))},{ms:.3f},{tflops:.1f},"
                  f"{status}", flush=True)
        del q, k, v, d_out
        torch.cuda.empty_cache()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
