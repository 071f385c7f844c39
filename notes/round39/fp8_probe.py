"""v45 (notes/round39's 0021: the lazy rescale, fp16 and fp8; also with v42's pingpong) against v44 (0019: P's
e4m3 operand carried packed) and v43 (the fp8 forward before both), imported from kernels/_hopper_v44.py and
kernels/_hopper_v43.py (copies of 0020's and 3f48b13's kernels/_hopper.py that fp8_probe.sh places in the probe's
tree), the portable fp8 forward and our fp16 forward through flash_attention, in one process: TFLOP/s by the
paper's count, at the fp8 ablation's shapes (16k tokens, hidden 2048: batch = 16384 // seqlen, heads = 2048 //
head_dim), full and causal. The kernels are called
directly and timed back to back (CUDA events around REPS calls, so the host's launch time hides behind the GPU's, as
in the benchmark), in ROUNDS rounds that alternate the arms' order; a row per (shape, arm, round). equal_v43: whether
the arm's output equals v43's bit for bit; err_vs_fp16: relative RMS against our fp16 forward's output. The
v_copy arms time V^T's key-order copy alone (`transposed_keys`) at its default tile and at COPY_TILES (ms only:
their tflops column is the forward's count over the copy's time).

    python3 fp8_probe.py OUT.csv [head dims...]
"""
import csv
import sys
import time

import torch

from kernels import flash_attention
from kernels._forward import fp8_forward, transposed_keys
from kernels._hopper import hopper_forward, hopper_fp8_forward
from kernels._hopper_v43 import hopper_fp8_forward as hopper_fp8_forward_v43
from kernels._hopper_v44 import hopper_forward as hopper_forward_v44
from kernels._hopper_v44 import hopper_fp8_forward as hopper_fp8_forward_v44
from kernels.options import AttentionOptions
from kernels.tiles import default_tiles
from probe_timing import quantise, timed  # beside this script

REPS, ROUNDS = 20, 3
COPY_TILES = [(128, 64, 4), (128, 128, 8), (256, 64, 8)]  # V^T's copy besides its default (64, 64, 4)


def arms(q16, k16, v16, q8, k8, v8, ds, causal, head_dim):
    qd, kd, vd = ds
    scale = head_dim ** -0.5
    tiles = default_tiles(head_dim, "fwd", fp8=True)
    portable = AttentionOptions(softmax_scale=scale, causal=causal, fwd_tiles=(tiles.block_m, tiles.block_n,
                                                                              tiles.num_warps, tiles.num_stages))
    return {
        "fp16_default": lambda: flash_attention(q16, k16, v16, causal=causal),
        "fp16_v44": lambda: hopper_forward_v44(q16, k16, v16, scale, causal),
        "fp16_v45": lambda: hopper_forward(q16, k16, v16, scale, causal),
        "fp8_v45": lambda: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal),
        "fp8_v44": lambda: hopper_fp8_forward_v44(q8, k8, v8, qd, kd, vd, scale, causal),
        "fp8_v43": lambda: hopper_fp8_forward_v43(q8, k8, v8, qd, kd, vd, scale, causal),
        # the consumers taking turns (v42's pingpong), slower before v44 cut the softmax's instructions
        "fp16_v45_pingpong": lambda: hopper_forward(q16, k16, v16, scale, causal, consumers=2, pingpong=True),
        "fp8_v45_pingpong": lambda: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal, pingpong=True),
        "fp8_portable": lambda: fp8_forward(q8, k8, v8, qd, kd, vd, portable),
        "v_copy_key_order": lambda: transposed_keys(v8, key_order=True),
        **{f"v_copy_{n}x{d}w{w}": (lambda t=(n, d, w): transposed_keys(v8, key_order=True, tile=t))
           for n, d, w in COPY_TILES},
    }


def main():
    path = sys.argv[1]
    head_dims = [int(a) for a in sys.argv[2:]] or [128, 256, 64]
    seqlens = [4096, 16384, 8192, 1024, 2048]
    gpu = torch.cuda.get_device_name()
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "head_dim", "causal", "seqlen", "batch", "heads", "arm", "round", "ms", "tflops",
                    "err_vs_fp16", "equal_v43"])
        for head_dim in head_dims:
            for seqlen in seqlens:
                for causal in (False, True):
                    batch, heads = max(1, 16384 // seqlen), 2048 // head_dim
                    torch.manual_seed(seqlen + head_dim)
                    x = [torch.randn(batch, heads, seqlen, head_dim, device="cuda") for _ in range(3)]
                    q16, k16, v16 = (t.half() for t in x)
                    (q8, qd), (k8, kd), (v8, vd) = (quantise(t) for t in x)
                    del x
                    fns = arms(q16, k16, v16, q8, k8, v8, (qd, kd, vd), causal, head_dim)
                    ref = fns["fp16_default"]().float()
                    v43 = fns["fp8_v43"]()[0]
                    errs, equal = {}, {}
                    for name, fn in fns.items():
                        if name.startswith("v_copy"):  # equal_v43 here: equal to the default tile's copy
                            errs[name] = float("nan")
                            equal[name] = int(torch.equal(fn(), fns["v_copy_key_order"]()))
                            continue
                        o = fn()
                        o = o[0] if isinstance(o, tuple) else o
                        errs[name] = ((o.float() - ref).norm() / ref.norm()).item()
                        equal[name] = int(torch.equal(o, v43)) if o.dtype == v43.dtype else ""
                    flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
                    for r in range(ROUNDS):
                        for name, fn in (fns.items() if r % 2 == 0 else reversed(list(fns.items()))):
                            ms = timed(fn, REPS)
                            w.writerow([gpu, head_dim, int(causal), seqlen, batch, heads, name, r, f"{ms:.5f}",
                                        f"{flops / ms / 1e9:.1f}", f"{errs[name]:.4f}", equal[name]])
                    f.flush()
                    print(time.strftime("%H:%M:%S"), head_dim, seqlen, causal, "v44 equal to v43:", equal["fp8_v44"],
                          {n: round(e, 4) for n, e in errs.items()}, flush=True)
                    del q16, k16, v16, q8, k8, v8
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
