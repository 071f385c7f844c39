"""The Hopper forward and backward with a sliding window, softcap and ALiBi against the portable ones (and
FlexAttention's window with a block mask, as the `features` ablation runs it, for scale): decides
`HOPPER_FORWARD_FEATURES` and `HOPPER_BACKWARD_FEATURES`.

    PYTHONPATH=. python3 notes/round22/hopper_features_probe.py > $OUT/hopper_features_probe_h200.csv   (sm_90)

v22 lets `flash_attention(..., hopper=True, hopper_backward=True)` run kernels/_hopper.py and
kernels/_hopper_bwd.py with `window_size`, `softcap` and `alibi_slopes`; the defaults keep the portable
kernels for them until this says the Hopper ones win.

First a check per head dim and feature (a ragged grouped-query shape, fp16 and bf16, both forward
pipelines, then the Hopper backward): output, lse and the three gradients against the float64 reference
with the tests' rule (tests/test_kernels.py), no NaN; a `# check ...` line each, and nothing is timed for
a (head dim, feature) that fails. Then
triton.testing.do_bench medians (ms) on the `features` ablation's shapes (batch x seqlen = 16k tokens,
2048 // head dim heads, fp16; its window of 1024 keys, softcap 30, the paper's ALiBi slopes), inputs that
require grad as the pipeline's:
  fwd       `hopper` (hopper=True), `portable` (hopper=False), and `flex` for the window (a block mask)
  fwd_bwd   `portable` (both passes), `hopper_fwd` (the Hopper forward, the portable backward), `hopper`
            (both Hopper kernels), and `flex` for the window
TFLOP/s count the visible score entries (experiments.flops.visible_pairs), as the ablation does.
The last lines say, per mode, feature and arm, the least and most speed over `portable`'s.
"""
import os
import sys
from collections import defaultdict
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from experiments import flops  # noqa: E402
from experiments.features import alibi_slopes  # noqa: E402
from kernels import _hopper_bwd, attention_reference, flash_attention  # noqa: E402
from test_kernels import assert_close_to_reference, make_inputs  # noqa: E402

# PROBE_HEAD_DIMS="128", PROBE_MODES="fwd_bwd" and PROBE_CHECKS (full: fp16 and bf16, both forward pipelines;
# quick: fp16 with the overlap; none: no check, for head dims checked before) cut a run to what is left to decide.
HEAD_DIMS = tuple(int(d) for d in os.environ.get("PROBE_HEAD_DIMS", "64,128").split(","))
MODES = tuple(os.environ.get("PROBE_MODES", "fwd,fwd_bwd").split(","))
CHECKS = os.environ.get("PROBE_CHECKS", "full")
SEQLENS = (1024, 4096, 16384)
FEATURES = {  # name -> (causal, flash_attention's keyword arguments; "alibi" filled per shape)
    "plain_causal": (True, {}),
    "window1024": (True, dict(window_size=(1023, 0))),
    "softcap30": (False, dict(softcap=30.0)),
    "softcap30_causal": (True, dict(softcap=30.0)),
    "alibi": (False, dict(alibi_slopes="alibi")),
    "alibi_causal": (True, dict(alibi_slopes="alibi")),
    "window_softcap_alibi": (True, dict(window_size=(1023, 0), softcap=30.0, alibi_slopes="alibi")),
}


def resolve(kwargs: dict, heads: int) -> dict:
    if kwargs.get("alibi_slopes") == "alibi":
        return dict(kwargs, alibi_slopes=torch.tensor(alibi_slopes(heads), device="cuda", dtype=torch.float32))
    return kwargs


def check(head_dim: int, name: str) -> bool:
    causal, kwargs = FEATURES[name]
    ok = True
    if CHECKS == "none":
        return ok
    backward = head_dim in _hopper_bwd.FEATURE_HEAD_DIMS  # else the portable backward after the Hopper forward
    for dtype in (torch.float16,) if CHECKS == "quick" else (torch.float16, torch.bfloat16):
        for overlap in (True,) if CHECKS == "quick" else (True, False):
            q, k, v = make_inputs(1, 4, 2, 1501, 1703, head_dim, dtype)
            features = resolve(kwargs, 4)
            try:
                out, lse = flash_attention(q, k, v, causal=causal, hopper=True, hopper_overlap=overlap,
                                           hopper_backward=backward, return_lse=True, **features)
                d_out = torch.randn_like(out)
                grads = torch.autograd.grad(out, (q, k, v), d_out)
                ref_out, ref_lse = attention_reference(q, k, v, causal=causal, upcast=True, **features)
                low_out, low_lse = attention_reference(q, k, v, causal=causal, upcast=False, **features)
                ref_grads = torch.autograd.grad(ref_out, (q, k, v), d_out.double())
                low_grads = torch.autograd.grad(low_out, (q, k, v), d_out)
                assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "NaN"
                assert_close_to_reference("out", out, low_out, ref_out)
                assert_close_to_reference("lse", lse, low_lse, ref_lse)
                for grad_name, ours, low, ref in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
                    assert not torch.isnan(ours).any(), f"{grad_name} NaN"
                    assert_close_to_reference(grad_name, ours, low, ref)
                print(f"# check d{head_dim} {name} {dtype} overlap={overlap}: ok", flush=True)
            except Exception as error:  # say what failed, time nothing of this feature at this head dim
                print(f"# check d{head_dim} {name} {dtype} overlap={overlap}: FAILED {type(error).__name__}: "
                      f"{error}"[:400], flush=True)
                ok = False
    return ok


def flex_window(q, k, v, window: int):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    block_mask = create_block_mask(mask, None, None, q.shape[2], k.shape[2], device="cuda")
    compiled = torch.compile(flex_attention)
    return lambda: compiled(q, k, v, block_mask=block_mask)


def main():
    checked = [(d, name) for d in HEAD_DIMS for name in FEATURES if check(d, name)]
    print("mode,head_dim,feature,seqlen,arm,ms,tflops", flush=True)
    ratios = defaultdict(list)
    for mode in MODES:
        for head_dim, name in checked:
            causal, kwargs = FEATURES[name]
            for seqlen in SEQLENS:
                backward = mode == "fwd_bwd"
                batch, heads = 16384 // seqlen, 2048 // head_dim
                q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16,
                                       requires_grad=True) for _ in range(3))
                grad_out = torch.randn_like(q)
                features = resolve(kwargs, heads)
                window = features.get("window_size", (-1, -1))
                pairs = batch * flops.visible_pairs(seqlen, seqlen, causal, tuple(window))
                work = flops.pairs_flops(heads, pairs, head_dim, mode)

                def ours(hopper, hopper_backward=False):
                    return lambda: flash_attention(q, k, v, causal=causal, hopper=hopper,
                                                   hopper_backward=hopper_backward, **features)

                arms = [("portable", ours(False)), ("hopper_fwd" if backward else "hopper", ours(True))]
                if backward and head_dim in _hopper_bwd.FEATURE_HEAD_DIMS:
                    arms.append(("hopper", ours(True, True)))
                if name == "window1024":
                    arms.append(("flex", flex_window(q, k, v, 1024)))
                ms_of = {}
                for arm, forward in arms:
                    def call():
                        out = forward()
                        if backward:
                            out.backward(grad_out)
                    try:
                        call()
                        ms = do_bench(call, warmup=20, rep=60, grad_to_none=[q, k, v] if backward else None)
                    except Exception as error:  # a peer that declines the shape: say so and go on
                        print(f"# {mode} d{head_dim} {name} {seqlen} {arm}: {type(error).__name__}: {error}"[:300],
                              flush=True)
                        continue
                    ms_of[arm] = ms
                    print(f"{mode},{head_dim},{name},{seqlen},{arm},{ms:.4f},{work / ms / 1e9:.1f}", flush=True)
                for arm in ms_of:
                    if arm != "portable" and "portable" in ms_of:
                        ratios[(mode, name, arm)].append(ms_of["portable"] / ms_of[arm])
    for (mode, name, arm), values in ratios.items():
        print(f"# {mode} {name} {arm}: speed over portable {min(values):.2f}-{max(values):.2f}x over {len(values)} "
              f"cells (head dims {', '.join(map(str, HEAD_DIMS))}; seqlens {', '.join(map(str, SEQLENS))})",
              flush=True)
    return 0 if CHECKS == "none" or len(checked) == len(HEAD_DIMS) * len(FEATURES) else 1


if __name__ == "__main__":
    sys.exit(main())
