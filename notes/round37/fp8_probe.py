"""The Hopper fp8 forward (branch next38, v39-v41: kernels._hopper.hopper_fp8_forward) against the portable fp8
forward and our fp16 forward, and both Hopper forwards with v42's pingpong (fp16 with two consumers), in one
process: TFLOP/s by the paper's count, at the fp8 ablation's shapes (16k tokens, hidden 2048: batch = 16384 //
seqlen, heads = 2048 // head_dim), full and causal; and V's transposed copy alone, as the portable
(v_copy_portable) and the Hopper (v_copy_hopper, keys reordered) fp8 forwards make it, and the latter with other
tiles of the copy kernel (v_copy_hopper_BNxBDxWARPS; tflops: the forward's count over the copy's time, only to keep
the column filled; read its ms). Each arm is timed by CUDA events over `REPS` calls after a warm-up, in ROUNDS
rounds that alternate the arms; a row per (shape, arm, round).

    python3 fp8_probe.py OUT.csv [head dims...]
"""
import csv
import sys
import time

import torch

from kernels import flash_attention
from kernels._hopper import hopper_fp8_forward

E4M3 = torch.float8_e4m3fn
REPS, ROUNDS = 30, 3
COPY_TILES = [(128, 64, 4), (128, 128, 8), (256, 64, 8), (128, 128, 4)]


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
    out = {
        "fp16_default": lambda: flash_attention(q16, k16, v16, causal=causal),
        "fp8_portable": lambda: flash_attention(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd,
                                                hopper=False),
        "fp8_hopper": lambda: flash_attention(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd),
    }
    from kernels._forward import transposed_keys
    from kernels._hopper import hopper_forward

    # the consumers taking turns to issue their MMAs (v42's pingpong), fp16 with two consumers and fp8
    out["fp16_hopper_2c"] = lambda: hopper_forward(q16, k16, v16, scale, causal, consumers=2)
    out["fp16_hopper_2c_pingpong"] = lambda: hopper_forward(q16, k16, v16, scale, causal, consumers=2, pingpong=True)
    out["fp8_hopper_pingpong"] = lambda: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal, pingpong=True)

    import kernels._forward as forward

    out["v_copy_portable"] = lambda: transposed_keys(v8)  # V's transposed copy alone, as each fp8 forward makes it
    out["v_copy_hopper"] = lambda: transposed_keys(v8, fp8_key_order=True)
    default_tile = forward.TRANSPOSE_TILE
    for tile in COPY_TILES:  # the copy with other tiles (BLOCK_N, BLOCK_D, num_warps)
        def copy(tile=tile):
            forward.TRANSPOSE_TILE = tile
            try:
                return transposed_keys(v8, fp8_key_order=True)
            finally:
                forward.TRANSPOSE_TILE = default_tile
        out["v_copy_hopper_" + "x".join(map(str, tile))] = copy
    variants = {64: [dict(consumers=3, block_n=64, stages=4), dict(stages=3)],
                128: [dict(stages=2), dict(stages=4)],
                256: [dict(stages=3)]}.get(head_dim, [])
    for v in variants:
        name = "fp8_hopper_" + "_".join(f"{k}{x}" for k, x in v.items())
        out[name] = (lambda v=v: hopper_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal, **v))
    return out


def main():
    path = sys.argv[1]
    head_dims = [int(a) for a in sys.argv[2:]] or [128, 64, 256]
    seqlens = [1024, 4096, 16384, 8192, 2048]
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
