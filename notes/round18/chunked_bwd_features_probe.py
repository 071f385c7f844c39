"""The portable forward+backward at d192 (chunks 128 + 64) per training feature, under the backward's 64 x 64 and
32 x 64 tiles (8 warps, 2 stages), beside SDPA flash where it has the feature (a CUDA GPU).

    PYTHONPATH=. python3 notes/round18/chunked_bwd_features_probe.py > notes/round18/chunked_bwd_features_probe_h200.csv

triton.testing.do_bench median ms, fp16, batch 2 x 10 heads x 8192, causal; the sm_90 spills of the same kernels are
in notes/round18/chunked_bwd_features_sm90.txt.
"""
import torch
from triton.testing import do_bench

from kernels import TileConfig, flash_attention

FEATURES = {"plain": {}, "window": dict(window_size=(1024, 0)), "softcap": dict(softcap=30.0),
            "alibi": dict(alibi_slopes=torch.rand(10, device="cuda")), "dropout": dict(dropout_p=0.1)}


def main():
    print("feature,bwd_tiles,ms", flush=True)
    q, k, v = (torch.randn(2, 10, 8192, 192, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    grad_out = torch.randn_like(q)
    for name, feature in FEATURES.items():
        for config in ((64, 64, 8, 2), (32, 64, 8, 2)):
            def step():
                flash_attention(q, k, v, causal=True, hopper_backward=False, bwd_tiles=TileConfig(*config),
                                **feature).backward(grad_out)
            step()
            ms = do_bench(step, warmup=25, rep=100, grad_to_none=[q, k, v])
            print(f"{name},{'x'.join(map(str, config))},{ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
