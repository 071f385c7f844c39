"""Time the Hopper forward (kernels/_hopper.py) against the portable forward, cuDNN and SDPA flash,
in one process on the paper's shapes (fp16, batch x seqlen = 16k tokens, hidden 2048).

    python3 notes/hopper_fwd_probe.py OUT.csv [--passes 2] [--seqlens 2048 4096 8192 16384]

Rows: pass, mode (fwd; fwd_bwd: the forward, then the portable backward from its out and lse),
head dim, causal, seqlen, provider, median ms of triton.testing.do_bench, TFLOP/s by the paper's
count, and the SM clock (NVML) after the cell. Providers: ours (the portable forward), hopper
(overlap of softmax and P V), hopper_serial (no overlap), sdpa_cudnn, sdpa_flash. A probe for
notes/perf.md, not the pipeline: the report's numbers come from the `speed` ablation.
"""
import argparse
import csv
import sys
from pathlib import Path

import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernels import flash_attention  # noqa: E402
from kernels._hopper import hopper_forward  # noqa: E402

TOKENS, HIDDEN = 16384, 2048


def sm_clock() -> int:
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    except Exception:
        return -1


def calls(q, k, v, causal, mode):
    scale = q.shape[-1] ** -0.5

    def sdpa(backend):
        def run():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    fwd = {
        "ours": lambda: flash_attention(q, k, v, causal=causal),
        "hopper": lambda: hopper_forward(q, k, v, scale, causal, overlap=True)[0],
        "hopper_serial": lambda: hopper_forward(q, k, v, scale, causal, overlap=False)[0],
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }
    if mode == "fwd":
        return fwd
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    do = torch.randn_like(q)

    def train(fn):
        def run():
            out = fn(qg, kg, vg)
            torch.autograd.grad(out, (qg, kg, vg), do)
        return run

    def sdpa_train(backend):
        def fn(a, b, c):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=causal)
        return fn

    return {
        "ours": train(lambda a, b, c: flash_attention(a, b, c, causal=causal)),
        "hopper": train(lambda a, b, c: flash_attention(a, b, c, causal=causal, hopper=True)),
        "sdpa_cudnn": train(sdpa_train(SDPBackend.CUDNN_ATTENTION)),
        "sdpa_flash": train(sdpa_train(SDPBackend.FLASH_ATTENTION)),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--seqlens", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--modes", nargs="+", default=["fwd", "fwd_bwd"])
    args = parser.parse_args()
    fields = ["pass", "mode", "head_dim", "causal", "seqlen", "provider", "ms", "tflops", "sm_clock_mhz"]
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for p in range(args.passes):
            for mode in args.modes:
                for head_dim in (64, 128):
                    for causal in (False, True):
                        for n in args.seqlens:
                            batch, heads = TOKENS // n, HIDDEN // head_dim
                            q, k, v = (torch.randn(batch, heads, n, head_dim, device="cuda", dtype=torch.float16)
                                       for _ in range(3))
                            flops = 4 * batch * heads * n * n * head_dim / (2 if causal else 1)
                            flops *= 3.5 if mode == "fwd_bwd" else 1.0
                            for provider, fn in calls(q, k, v, causal, mode).items():
                                ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                                row = dict(pass_=p, mode=mode, head_dim=head_dim, causal=int(causal), seqlen=n,
                                           provider=provider, ms=f"{ms:.4f}", tflops=f"{flops / ms / 1e9:.1f}",
                                           sm_clock_mhz=sm_clock())
                                row["pass"] = row.pop("pass_")
                                writer.writerow(row)
                                f.flush()
                                print(f"{p} {mode} d{head_dim} {'causal' if causal else 'full'} {n} {provider}: "
                                      f"{ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
