"""First-call (JIT compile) cost of the engine's kernels, and what Triton's on-disk cache saves.

Superseded by the pipeline's `jit` ablation (experiments/jit.py, `snakemake --cores 1 jit`), which measures the same
thing with repetitions and puts it in the report; this script and its CSV stay as the first measurement.

    python3 notes/jit_cost.py > notes/jit_cost.csv       (on a CUDA GPU)

For each head dim and mask, a fresh Python process with an empty TRITON_CACHE_DIR times the first
forward call (compiles the forward kernel), the first backward (compiles the delta and dK/dV
kernels) and the second forward+backward (everything cached in memory); then a second fresh
process with the same, now filled, cache directory times its first calls again: those load the
compiled kernels from disk instead of compiling them. Wall-clock seconds around each call with a
device synchronisation.
"""
import os
import subprocess
import sys
import tempfile
import time

CASES = [(64, False), (64, True), (128, False), (128, True)]


def child(head_dim: int, causal: bool) -> None:
    import torch

    from kernels import flash_attention

    q, k, v = (torch.randn(1, 4, 1024, head_dim, device="cuda", dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    torch.cuda.synchronize()

    def timed(fn):
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        return result, time.perf_counter() - start

    out, fwd = timed(lambda: flash_attention(q, k, v, causal=causal))
    _, bwd = timed(lambda: torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    _, again = timed(lambda: torch.autograd.grad(flash_attention(q, k, v, causal=causal), (q, k, v),
                                                 torch.ones_like(out)))
    print(f"{fwd:.3f},{bwd:.3f},{again:.4f}")


def main() -> None:
    if len(sys.argv) > 1:
        child(int(sys.argv[1]), sys.argv[2] == "1")
        return
    print("head_dim,causal,cache,first_fwd_s,first_bwd_s,second_fwd_bwd_s")
    for head_dim, causal in CASES:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            for label in ("empty", "filled"):
                line = subprocess.run([sys.executable, __file__, str(head_dim), str(int(causal))], env=env,
                                      check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
                print(f"{head_dim},{int(causal)},{label},{line}", flush=True)


if __name__ == "__main__":
    main()
