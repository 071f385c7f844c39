"""The d256 backward tile candidates where they spill most: a ragged length (2000 keys) and every training feature
together (causal, window, softcap, ALiBi, dropout), fp16 forward+backward with the portable kernels, on an sm_90 GPU.
At sm_90 the dK/dV kernel spills (bytes per thread, length 200, `tests/sm90_compile.py`'s recorder): 32 x 64 x 8 x 2
192 plain, 776 with every feature; 64 x 64 x 8 x 2 1064 and 2664; 128 x 32 x 8 x 2 636 and 1588.
  PYTHONPATH=. python3 notes/round19/d256_bwd_ragged_probe.py > $OUT/d256_bwd_ragged_probe_h200.csv
"""
import torch
from triton.testing import do_bench

from kernels import TileConfig, flash_attention

TILES = [(32, 64, 8, 2), (64, 64, 8, 2), (128, 32, 8, 2)]
N, BATCH, HEADS = 2000, 8, 8
CASES = {"ragged": {}, "ragged_causal": dict(causal=True),
         "every_feature": dict(causal=True, window_size=(512, 0), softcap=30.0, dropout_p=0.1)}


def main():
    print("case,tiles,ms", flush=True)
    q, k, v = (torch.randn(BATCH, HEADS, N, 256, device="cuda", dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    grad_out = torch.randn_like(q)
    slopes = torch.rand(HEADS, device="cuda", dtype=torch.float32)
    for case, kwargs in CASES.items():
        if case == "every_feature":
            kwargs = dict(kwargs, alibi_slopes=slopes)
        for tiles in TILES:
            def call():
                flash_attention(q, k, v, hopper=False, hopper_backward=False, bwd_tiles=TileConfig(*tiles),
                                **kwargs).backward(grad_out)
            try:
                call()
                ms = do_bench(call, warmup=20, rep=60, grad_to_none=[q, k, v])
            except Exception as error:
                print(f"# {case} {tiles}: {type(error).__name__}: {error}"[:300], flush=True)
                continue
            print(f"{case},{'x'.join(map(str, tiles))},{ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
