"""The fp8 Hopper forward (next tree, notes/round38's 0014-0015: kernels._hopper.hopper_fp8_forward, P's keys
reordered) against the portable fp8 forward and our fp16 forward, and both Hopper forwards with the consumers taking
turns (0016's pingpong; fp16 with two consumers), in one process: TFLOP/s by the paper's count, at the fp8
ablation's shapes (16k tokens, hidden 2048: batch = 16384 // seqlen, heads = 2048 // head_dim), full and causal;
other ring depths of the fp8 Hopper forward; and V's transposed copy alone, in the natural order (the portable fp8
forward's) and in the Hopper forward's key order (ms only: its tflops column is the forward's count over the copy's
time). Each arm is timed by CUDA events over REPS calls after a warm-up, in ROUNDS rounds that alternate the arms'
order; a row per (shape, arm, round). err_vs_fp16: relative RMS against our fp16 forward's output.

    python3 fp8_probe.py OUT.csv [head dims...]
"""
import csv
import sys
import time

import torch

from kernels import flash_attention
from kernels._forward import fp8_forward, transposed_keys
from kernels._hopper import hopper_forward, hopper_fp8_forward
from kernels.options import AttentionOptions
from kernels.tiles import default_tiles

E4M3 = torch.float8_e4m3fn
REPS, ROUNDS = 30, 3
STAGES = {64: (3, 4), 128: (3, 4), 256: (3,)}  # ring depths besides the default (_hopper._FP8_CONFIGS)


def quantise(x):
    descale = (x.abs().amax(dim=(2, 3)).float().clamp_min(1e-12) / 448.0).contiguous()
    return (x.float() / descale[:, :, None, None]).clamp(-448, 448).to(E4M3), descale


def timed(fn):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(REPS):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2], times[len(times) // 5], times[(4 * len(times)) // 5]


def arms(q16, k16, v16, q8, k8, v8, ds, causal, head_dim):
    qd, kd, vd = ds
    scale = head_dim ** -0.5
    fp8 = dict(q_descale=qd, k_descale=kd, v_descale=vd)
    tiles = default_tiles(head_dim, "fwd", fp8=True)
    portable = AttentionOptions(softmax_scale=scale, causal=causal, fwd_tiles=(tiles.block_m, tiles.block_n,
                                                                              tiles.num_warps, tiles.num_stages))
    out = {
        "fp16_default": lambda: flash_attention(q16, k16, v16, causal=causal),
        "fp8_portable": lambda: flash_attention(q8, k8, v8, causal=causal, hopper=False, **fp8),
        "fp8_hopper": lambda: flash_attention(q8, k8, v8, causal=causal, hopper=True, **fp8),
        # the same kernels called directly: what flash_attention's own host time adds (each timed call waits for
        # the GPU, so a call's host time shows where the GPU's is short)
        "fp8_hopper_direct": lambda: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal),
        "fp8_portable_direct": lambda: fp8_forward(q8, k8, v8, qd, kd, vd, portable),
        "v_copy_natural": lambda: transposed_keys(v8),
        "v_copy_key_order": lambda: transposed_keys(v8, key_order=True),
    }
    if head_dim in (64, 128):  # the consumers taking turns (v42), fp16 with two consumers and fp8
        out["fp16_hopper_2c"] = lambda: hopper_forward(q16, k16, v16, scale, causal, consumers=2)
        out["fp16_hopper_2c_pingpong"] = lambda: hopper_forward(q16, k16, v16, scale, causal, consumers=2,
                                                                pingpong=True)
        out["fp8_hopper_pingpong"] = lambda: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal, pingpong=True)
    for stages in STAGES.get(head_dim, ()):
        out[f"fp8_hopper_stages{stages}"] = (
            lambda stages=stages: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal, stages=stages))
    return out


def main():
    path = sys.argv[1]
    head_dims = [int(a) for a in sys.argv[2:]] or [128, 64, 256]
    seqlens = [4096, 16384, 1024, 8192, 2048]
    gpu = torch.cuda.get_device_name()
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "head_dim", "causal", "seqlen", "batch", "heads", "arm", "round", "ms", "ms_p20",
                    "ms_p80", "tflops", "err_vs_fp16"])
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
                    errs = {}
                    for name, fn in fns.items():
                        if name.startswith("v_copy"):
                            errs[name] = float("nan")
                            continue
                        o = fn()
                        o = o[0] if isinstance(o, tuple) else o
                        errs[name] = ((o.float() - ref).norm() / ref.norm()).item()
                    flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
                    for r in range(ROUNDS):
                        for name, fn in (fns.items() if r % 2 == 0 else reversed(list(fns.items()))):
                            ms, p20, p80 = timed(fn)
                            w.writerow([gpu, head_dim, int(causal), seqlen, batch, heads, name, r, f"{ms:.5f}",
                                        f"{p20:.5f}", f"{p80:.5f}", f"{flops / ms / 1e9:.1f}", f"{errs[name]:.4f}"])
                    f.flush()
                    print(time.strftime("%H:%M:%S"), head_dim, seqlen, causal,
                          {n: round(e, 4) for n, e in errs.items()}, flush=True)
                    del q16, k16, v16, q8, k8, v8
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
