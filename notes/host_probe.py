"""Host time per call at the speed grid's 512 cells, as the pipeline measures it, and where ours goes.

    PYTHONPATH=. python3 notes/host_probe.py > notes/host_probe_h200.txt     (a CUDA GPU; about a minute)

For each cell (batch 32, seqlen 512, hidden 2048, head dims 64 and 128, causal and full, fp16, inputs
that require grad) and each of SDPA flash, ours, and ours with the plans off (every call resolves its
arguments again, as before `kernels.attention._PLANS`): `experiments.measure._host_and_gpu_ms`, the
median host time to issue one call into an empty queue and the median GPU time, for the forward and
for forward+backward. The arm ours_maps_encoded launches the Hopper kernels with Triton's own descriptor
wrapper, which encodes every tensor map on every launch (`kernels._launch.maps_kept` False; v17), where
ours keeps them. Then a cProfile of ours at head dim 128 (the Hopper kernels), by own time. The plans
are v16's (1e32447): on a tree without them (main while v16 is reverted) the ours_no_plans rows are left out.
"""
import cProfile
import io
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_overhead import sdpa as sdpa_flash  # noqa: E402  (notes/, beside this script)
from experiments.measure import _host_and_gpu_ms  # noqa: E402
from kernels import _launch, attention, flash_attention  # noqa: E402


class _NoPlans(dict):
    """A plan dict that never holds a plan: every call resolves its arguments."""

    def get(self, key, default=None):
        return default


def ours(q, k, v, causal):
    return flash_attention(q, k, v, causal=causal)


def main():
    plans = getattr(attention, "_PLANS", None)
    print("head_dim,causal,mode,provider,host_us,gpu_us", flush=True)
    for head_dim in (64, 128):
        for causal in (False, True):
            shape = (32, 2048 // head_dim, 512, head_dim)
            q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
            do = torch.randn(*shape, device="cuda", dtype=torch.float16)
            arms = [("sdpa_flash", sdpa_flash), ("ours", ours)]
            if plans is not None:
                arms.append(("ours_no_plans", ours))
            if hasattr(_launch, "maps_kept"):
                arms.append(("ours_maps_encoded", ours))
            for name, attend in arms:
                if name == "ours_no_plans":
                    attention._PLANS = _NoPlans()
                if name == "ours_maps_encoded":
                    _launch.maps_kept = False
                    _launch._keyed.clear()  # the next launch keeps its kernel without a map launcher
                for mode in ("fwd", "fwd_bwd"):
                    if mode == "fwd":
                        def fn():
                            return attend(q, k, v, causal)
                    else:
                        def fn():
                            return torch.autograd.grad(attend(q, k, v, causal), (q, k, v), do)
                    for _ in range(20):
                        fn()
                    host, gpu = _host_and_gpu_ms(fn, 101)
                    print(f"{head_dim},{int(causal)},{mode},{name},{host * 1e3:.1f},{gpu * 1e3:.1f}", flush=True)
                if name == "ours_no_plans":
                    attention._PLANS = plans
                if name == "ours_maps_encoded":
                    _launch.maps_kept = True
                    _launch._keyed.clear()

    shape = (32, 16, 512, 128)
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    do = torch.randn(*shape, device="cuda", dtype=torch.float16)
    for label, calls, fn in (("forward calls (inputs require grad)", 1000, lambda: ours(q, k, v, True)),
                             ("forward+backward calls on one thread", 300,
                              lambda: torch.autograd.grad(ours(q, k, v, True), (q, k, v), do))):
        with torch.autograd.set_multithreading_enabled(False):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
        print(f"\ncProfile of {calls} {label}, d128 causal, by own time:")
        print(text.getvalue(), flush=True)


if __name__ == "__main__":
    main()
