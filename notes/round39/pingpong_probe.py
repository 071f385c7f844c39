"""The consumers taking turns (v42's pingpong) on the fp8 Hopper forward before and after v44 (notes/round39's
0019), in one process: v43 (kernels/_hopper_v43.py, 3f48b13's kernels/_hopper.py, placed in the probe's tree by
pingpong_probe.sh) and v44 (the tree's kernels/_hopper.py), each with and without pingpong, and the fp16 Hopper
forward with two consumers with and without it, beside our fp16 default through flash_attention. Head dim 128 at
the fp8 ablation's shapes (16k tokens, hidden 2048), full and causal; the kernels called directly and timed back to
back (CUDA events around REPS calls) in ROUNDS rounds that alternate the arms' order; a row per (shape, arm, round).
equal_v43: whether an fp8 arm's output equals v43's without pingpong bit for bit.

    python3 pingpong_probe.py OUT.csv
"""
import csv
import sys
import time

import torch

from kernels import flash_attention
from kernels._hopper import hopper_forward, hopper_fp8_forward
from kernels._hopper_v43 import hopper_fp8_forward as hopper_fp8_forward_v43
from probe_timing import quantise, timed  # beside this script

REPS, ROUNDS = 20, 5
HEAD_DIM = 128


def main():
    path = sys.argv[1]
    gpu = torch.cuda.get_device_name()
    scale = HEAD_DIM ** -0.5
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "head_dim", "causal", "seqlen", "batch", "heads", "arm", "round", "ms", "tflops",
                    "equal_v43"])
        for seqlen in (4096, 16384, 8192, 2048):
            for causal in (False, True):
                batch, heads = max(1, 16384 // seqlen), 2048 // HEAD_DIM
                torch.manual_seed(seqlen)
                x = [torch.randn(batch, heads, seqlen, HEAD_DIM, device="cuda") for _ in range(3)]
                q16, k16, v16 = (t.half() for t in x)
                (q8, qd), (k8, kd), (v8, vd) = (quantise(t) for t in x)
                del x
                fns = {
                    "fp16_default": lambda: flash_attention(q16, k16, v16, causal=causal),
                    "fp16_2c": lambda: hopper_forward(q16, k16, v16, scale, causal, consumers=2),
                    "fp16_2c_pingpong": lambda: hopper_forward(q16, k16, v16, scale, causal, consumers=2,
                                                               pingpong=True),
                    "fp8_v43": lambda: hopper_fp8_forward_v43(q8, k8, v8, qd, kd, vd, scale, causal),
                    "fp8_v43_pingpong": lambda: hopper_fp8_forward_v43(q8, k8, v8, qd, kd, vd, scale, causal,
                                                                       pingpong=True),
                    "fp8_v44": lambda: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal),
                    "fp8_v44_pingpong": lambda: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal,
                                                                   pingpong=True),
                }
                base = fns["fp8_v43"]()[0]
                equal = {name: (int(torch.equal(fn()[0], base)) if name.startswith("fp8") else "")
                         for name, fn in fns.items()}
                flops = 4 * batch * heads * seqlen * seqlen * HEAD_DIM / (2 if causal else 1)
                for r in range(ROUNDS):
                    for name, fn in (fns.items() if r % 2 == 0 else reversed(list(fns.items()))):
                        ms = timed(fn, REPS)
                        w.writerow([gpu, HEAD_DIM, int(causal), seqlen, batch, heads, name, r, f"{ms:.5f}",
                                    f"{flops / ms / 1e9:.1f}", equal[name]])
                f.flush()
                print(time.strftime("%H:%M:%S"), seqlen, causal, equal, flush=True)
                del q16, k16, v16, q8, k8, v8
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
