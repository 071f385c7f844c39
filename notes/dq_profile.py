"""Registers, spills and shared memory of the backward kernels, atomic dQ against the dQ kernel.

    python3 notes/dq_profile.py > notes/dq_profile.csv       (on a CUDA GPU)

For head dims 64 and 128 (fp16, 8k tokens, the default tiles, non-causal) runs one backward with
deterministic=False (dQ by atomic adds in the dK/dV kernel) and one with deterministic=True (the
separate dQ kernel), then reads the compiled kernels out of Triton's in-memory cache: registers
per thread, bytes spilled, shared memory per program, warps and stages. Also the backward's
do_bench median (ms) of each, for orientation (the pipeline's numbers are in the archive).
"""
import torch
from triton.testing import do_bench

from kernels import _backward, flash_attention


def compiled(jit_fn):
    fn = getattr(jit_fn, "fn", jit_fn)  # under @triton.heuristics
    kernels = {}
    for cache in fn.device_caches.values():
        kernels.update(cache[0])
    return kernels


def main():
    print("head_dim,deterministic,kernel,num_warps,num_stages,shared_bytes,n_regs,n_spills,bwd_ms")
    for head_dim in (64, 128):
        heads = 2048 // head_dim
        for deterministic in (False, True):
            q, k, v = (torch.randn(2, heads, 8192, head_dim, device="cuda", dtype=torch.float16, requires_grad=True)
                       for _ in range(3))
            seen = {name: set(compiled(getattr(_backward, name))) for name in ("_attn_bwd_dkdv", "_attn_bwd_dq")}
            out = flash_attention(q, k, v, deterministic=deterministic)
            d_out = torch.randn_like(out)
            ms = do_bench(lambda: torch.autograd.grad(out, (q, k, v), d_out, retain_graph=True), return_mode="median")
            for name in ("_attn_bwd_dkdv", "_attn_bwd_dq"):
                for key, kernel in compiled(getattr(_backward, name)).items():
                    if key in seen[name]:
                        continue
                    meta = kernel.metadata
                    print(f"{head_dim},{int(deterministic)},{name},{meta.num_warps},{meta.num_stages},{meta.shared},"
                          f"{getattr(kernel, 'n_regs', 'na')},{getattr(kernel, 'n_spills', 'na')},{ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
