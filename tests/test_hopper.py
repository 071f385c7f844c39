"""The Hopper forward (kernels/_hopper.py, `flash_attention(..., hopper=True)`) and backward
(kernels/_hopper_bwd.py, `hopper_backward=True`).

On an sm_90 GPU: the output, the log-sum-exp and (through the portable backward it feeds) every
gradient against the float64 reference, with test_kernels' rule (at most twice PyTorch's own error
at the same precision), on odd lengths, Nq != Nk, grouped-query heads and both pipelines
(`overlap`), with every allocation poisoned; the same with the forward's features (sliding windows
with edges on and off the key tiles, softcap, ALiBi, alone and together), one compiled kernel for
every window; the Hopper backward's three gradients the same way,
after either forward, with both consumer schedules at both head dims, and past 2^31 elements; which
forward and backward the defaults (hopper=None, hopper_backward=None) pick: the Hopper ones exactly
where they cover the call at their head dims, the portable backward with deterministic=True.
Anywhere: the refusals (what hopper=True or hopper_backward=True does not cover raises
NotImplementedError naming it, and only that), and the sm_90a compile of every configuration, in a subprocess (the
interpreter must be off there), with no spills in the forward and the instructions each is for.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import TileConfig, attention_reference, flash_attention
from kernels._hopper import HEAD_DIMS
from kernels._hopper_bwd import HEAD_DIMS as BACKWARD_HEAD_DIMS
from kernels.attention import (HOPPER_BACKWARD_DEFAULTS, HOPPER_FORWARD_MIN_KEYS, hopper_backward_by_default,
                               hopper_forward_by_default)
from test_features import _resolve, check_features
from test_kernels import (DEVICE, assert_close_to_reference, check_against_reference, make_inputs,  # noqa: F401
                          poisoned_allocations)  # (a fixture)

ROOT = Path(__file__).resolve().parents[1]
IS_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
sm90 = pytest.mark.skipif(not IS_SM90, reason="the Hopper forward needs a compute capability 9.0 GPU")

# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim)
SHAPES = [
    (2, 4, 4, 1024, 1024, 128),
    (1, 8, 2, 1000, 1000, 64),     # grouped-query, lengths off the tile size
    (2, 3, 1, 129, 385, 128),      # multi-query, Nq < Nk, one row past a program
    (1, 2, 2, 64, 64, 64),         # one key tile, half a program
    (1, 4, 4, 2048, 4096, 64),     # causal bottom-right over longer keys
    (1, 2, 2, 1, 300, 128),        # a single query
    (1, 4, 2, 700, 900, 96),       # head dim 96 in tiles of 128: grouped-query, Nq < Nk, ragged
    (2, 2, 2, 333, 333, 192),      # head dim 192 in tiles of 256
    (1, 3, 1, 1000, 1000, 256),    # head dim 256 (64-key tiles): multi-query
]


@sm90
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_matches_reference(shape, causal, dtype, overlap, poisoned_allocations):
    from kernels._hopper import hopper_forward

    q, k, v = (t.detach() for t in make_inputs(*shape, dtype))
    scale = shape[-1] ** -0.5
    out, lse = hopper_forward(q, k, v, scale, causal, overlap=overlap)
    ref_out, ref_lse = attention_reference(q, k, v, causal=causal, upcast=True)
    low_out, low_lse = attention_reference(q, k, v, causal=causal, upcast=False)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == q.shape[:3]
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert_close_to_reference("out", out, low_out, ref_out)
    assert_close_to_reference("lse", lse, low_lse, ref_lse)


@sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 4, 2, 777, 777, 128), (1, 4, 4, 256, 1000, 64), (1, 2, 1, 300, 500, 96),
                                   (1, 3, 3, 400, 400, 192), (1, 2, 2, 640, 640, 256)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gradients_through_the_portable_backward(shape, causal, poisoned_allocations):
    q, k, v = make_inputs(*shape, torch.bfloat16)
    check_against_reference(q, k, v, causal, hopper=True)


@sm90
def test_repeated_runs_agree_bitwise():
    """A moving result would be a race between the producer and the consumers."""
    q, k, v = (t.detach() for t in make_inputs(4, 16, 4, 4096, 4096, 128, torch.float16))
    first = flash_attention(q, k, v, causal=True, hopper=True)
    for _ in range(5):
        assert torch.equal(flash_attention(q, k, v, causal=True, hopper=True), first)


@sm90
def test_negative_scale_and_output_against_the_portable_forward():
    q, k, v = (t.detach() for t in make_inputs(1, 4, 4, 500, 700, 64, torch.float16))
    ours = flash_attention(q, k, v, softmax_scale=-0.1, hopper=True)
    ref, _ = attention_reference(q, k, v, softmax_scale=-0.1)
    low, _ = attention_reference(q, k, v, softmax_scale=-0.1, upcast=False)
    assert_close_to_reference("out", ours, low, ref)


def _t(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("kwargs, named", [
    (dict(dropout_p=0.1), "dropout_p"),
    (dict(dropout_p=0.1, window_size=(8, 0), softcap=5.0), "does not support dropout_p[:;]"),  # only what it lacks
    (dict(algorithm="fa1"), "algorithm='fa1'"),
    (dict(recompute=False), "recompute=False"),
    (dict(deferred_rescale=False), "deferred_rescale=False"),
    (dict(skip_masked_tiles=False), "skip_masked_tiles=False"),
])
def test_unsupported_features_are_named(kwargs, named):
    q = _t(1, 2, 64, 64)
    with pytest.raises(NotImplementedError, match=named.replace("(", r"\(").replace(")", r"\)")):
        flash_attention(q, q, q, hopper=True, **kwargs)


@pytest.mark.parametrize("make, named", [
    (lambda: (_t(1, 2, 64, 80),) * 3, "head dim 80"),
    (lambda: (_t(1, 2, 64, 64).transpose(1, 2).contiguous().transpose(1, 2),) * 3, "q's strides"),
    (lambda: (_t(1, 2, 128, 64), _t(1, 2, 64, 64), _t(1, 2, 64, 64)), "seqlen_q > seqlen_k"),
])
def test_unsupported_inputs_are_named(make, named):
    q, k, v = make()
    with pytest.raises(NotImplementedError, match=named):
        flash_attention(q, k, v, causal=True, hopper=True)


@pytest.mark.skipif(IS_SM90, reason="checks the refusal off Hopper")
def test_refused_without_a_hopper_gpu():
    q = _t(1, 2, 64, 64)
    with pytest.raises(NotImplementedError, match="compute capability 9.0"):
        flash_attention(q, q, q, hopper=True)


@pytest.mark.skipif(IS_SM90, reason="checks the refusal off Hopper")
@pytest.mark.parametrize("kwargs", [dict(window_size=(8, 0)), dict(window_size=(16, 16)), dict(softcap=5.0),
                                    dict(alibi_slopes="h"), dict(window_size=(8, -1), softcap=5.0, alibi_slopes="h",
                                                                 causal=True)],
                         ids=["window-causal", "window", "softcap", "alibi", "all"])
@pytest.mark.parametrize("switch", ["hopper", "hopper_backward"])
def test_features_are_covered(kwargs, switch):
    """hopper=True or hopper_backward=True with the window, softcap or ALiBi names only the missing GPU:
    both Hopper kernels cover them."""
    q = _t(1, 2, 64, 64)
    if kwargs.get("alibi_slopes") == "h":
        kwargs = dict(kwargs, alibi_slopes=torch.rand(2, device=DEVICE))
    which = "forward" if switch == "hopper" else "backward"
    with pytest.raises(NotImplementedError, match=rf"{switch}=True does not support a compute capability 9\.0 "
                       rf"\(Hopper\) GPU: the Hopper {which} covers .*sliding windows, softcap, ALiBi"):
        flash_attention(q, q, q, **{switch: True}, **kwargs)


def test_features_are_named_at_head_dims_a_kernel_lacks_them(monkeypatch):
    """A kernel takes the features only at its FEATURE_HEAD_DIMS (a backward that grows head dims does not
    take the features there unwritten): elsewhere hopper_backward=True names them."""
    from kernels import _hopper_bwd

    monkeypatch.setattr(_hopper_bwd, "FEATURE_HEAD_DIMS", (64,))
    q = _t(1, 2, 64, 128)
    with pytest.raises(NotImplementedError, match=r"hopper_backward=True does not support window_size; softcap"):
        flash_attention(q, q, q, hopper_backward=True, window_size=(8, 0), softcap=5.0)
    from kernels.attention import _hopper_features

    assert _hopper_features("hopper_backward", 64) == _hopper_bwd.FEATURES
    assert _hopper_features("hopper_backward", 128) == ()
    assert _hopper_features("hopper", 128) == ("window_size", "softcap", "alibi_slopes")


@pytest.mark.parametrize("n_q, n_k, window", [(128, 64, (16, 0)), (100, 40, (-1, 59)), (100, 40, (3, 10))])
@pytest.mark.parametrize("switch", ["hopper", "hopper_backward"])
def test_window_with_queries_that_see_no_key_is_refused(n_q, n_k, window, switch):
    """Queries past seqlen_k + window_size[1] see no key (the portable kernels give them a zero row and an
    lse of -inf); the Hopper kernels refuse such calls, naming why."""
    q, k = _t(1, 2, n_q, 64), _t(1, 2, n_k, 64)
    with pytest.raises(NotImplementedError, match=r"a window whose first queries see no key"):
        flash_attention(q, k, k, window_size=window, **{switch: True})


def test_fp8_refuses_hopper():
    q = _t(1, 2, 64, 64).to(torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="hopper=True"):
        flash_attention(q, q, q, hopper=True)


def test_compiles_for_sm90a_without_spills():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "hopper_compile.py")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("d")]
    plain = [line for line in lines if not any(f in line.split(":")[0] for f in ("window", "softcap", "alibi"))]
    assert len(plain) == 4 * len(HEAD_DIMS), done.stdout
    # the features at head dims 64 and 128 (hopper_compile.FEATURE_CONFIGS): no spills either, and the
    # hardware's tanh wherever softcap is on
    assert len(lines) - len(plain) == 2 * 5, done.stdout
    for line in lines:
        assert "sm_90a" in line and " 0 bytes spill stores" in line and "wgmma=0 " not in line, line
        assert "setmaxnreg=0" not in line, line
        assert ("tanh=0 " in line) == ("softcap" not in line.split(":")[0]), line
    # The one-pass backward: wgmma, TMA loads, setmaxnreg and the TMA reduce-add of dQ in every
    # configuration; no spills at head dims 64, 192 and 256 and at 128 full (the self-loading schedule;
    # causal spills 220 bytes there, against 308 with the producer warp; notes/perf.md, v16).
    backward = [line for line in done.stdout.splitlines() if line.startswith("bwd d")]
    plain = [line for line in backward if not any(f in line.split(":")[0] for f in ("window", "softcap", "alibi"))]
    assert len(plain) == 2 * len(BACKWARD_HEAD_DIMS) and len(backward) - len(plain) == 2 * 5, done.stdout
    for line in backward:
        assert "sm_90a" in line and "wgmma=0 " not in line and "tma_reduce=0 " not in line, line
        assert "tma_load=0 " not in line and "setmaxnreg=0" not in line, line
        assert ("tanh=0 " in line) == ("softcap" not in line.split(":")[0]), line
        if line in plain and line.startswith(("bwd d64", "bwd d128 causal=False", "bwd d192", "bwd d256")):
            assert " 0 bytes spill stores" in line, line
        # with the features: at most 24 bytes at head dim 64 (all three together) and 440 at 128, where the
        # plain causal default spills 220 (notes/round22/hopper_compile_v22.txt)
        spilled = int(line.split(" bytes spill stores")[0].rsplit(" ", 1)[1])
        assert spilled <= (24 if line.startswith("bwd d64") else 440), line


def test_overlap_switch_needs_hopper():
    q = _t(1, 2, 64, 64)
    with pytest.raises(ValueError, match="hopper_overlap=False .* needs hopper=True"):
        flash_attention(q, q, q, hopper_overlap=False)


@sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_serial_switch_matches_reference(causal, poisoned_allocations):
    q, k, v = make_inputs(1, 4, 2, 600, 900, 128, torch.float16)
    check_against_reference(q, k, v, causal, hopper=True, hopper_overlap=False)


def assert_gradients_match(grads, q, k, v, d_out, causal, **features):
    """A direct hopper_backward call's dq, dk, dv against the float64 reference's (test_kernels' rule), with the
    features."""
    ref = attention_reference(q, k, v, causal=causal, upcast=True, **features)[0]
    low = attention_reference(q, k, v, causal=causal, upcast=False, **features)[0]
    ref_grads = torch.autograd.grad(ref, (q, k, v), d_out.double())
    low_grads = torch.autograd.grad(low, (q, k, v), d_out)
    for name, ours, lo, hi in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
        assert ours.shape == hi.shape and ours.dtype == q.dtype
        assert_close_to_reference(name, ours, lo, hi)


# The forward's and the backward's features (the window, softcap, ALiBi).
# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim), causal, features: windows whose edges fall on,
# before and after the 128-key tiles (and the 64-key tiles of head dim 256), alone and with softcap and
# ALiBi ("h": (H,) slopes, "bh": (B, H)), odd lengths, Nq != Nk, grouped-query heads.
FEATURE_CASES = [
    ("window-causal", (2, 4, 2, 1000, 1000, 128), True, dict(window_size=(255, -1))),
    ("window-causal-tile-edge", (1, 4, 4, 777, 1300, 64), True, dict(window_size=(128, 0))),
    ("window-causal-long", (1, 2, 1, 4100, 4100, 128), True, dict(window_size=(1023, 0))),
    ("window-two-sided", (1, 4, 2, 700, 900, 128), False, dict(window_size=(300, 127))),
    ("window-left-only", (2, 2, 2, 333, 200, 64), False, dict(window_size=(129, -1))),
    ("window-right-only", (1, 2, 2, 300, 257, 96), False, dict(window_size=(-1, 64))),
    ("window-diagonal", (1, 2, 1, 385, 385, 192), False, dict(window_size=(0, 0))),
    ("window-d256", (1, 3, 1, 1000, 1000, 256), True, dict(window_size=(63, -1))),
    ("softcap", (2, 4, 2, 700, 900, 128), False, dict(softcap=30.0)),
    ("softcap-causal", (1, 8, 2, 1000, 1000, 64), True, dict(softcap=5.0)),
    ("alibi-heads-causal", (1, 4, 2, 900, 900, 128), True, dict(alibi_slopes="h")),
    ("alibi-batch-heads", (2, 2, 1, 129, 385, 64), False, dict(alibi_slopes="bh")),
    ("window-softcap-alibi", (2, 4, 2, 600, 1100, 128), False, dict(window_size=(400, 50), softcap=20.0,
                                                                  alibi_slopes="bh")),
    ("window-softcap-alibi-causal", (1, 4, 4, 1500, 1500, 64), True, dict(window_size=(511, -1), softcap=50.0,
                                                                        alibi_slopes="h")),
]


@sm90
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name, shape, causal, features", FEATURE_CASES, ids=[c[0] for c in FEATURE_CASES])
def test_forward_features_match_reference(name, shape, causal, features, dtype, overlap, poisoned_allocations):
    """The Hopper forward with the features, and the gradients through the portable backward it feeds."""
    torch.manual_seed(sum(map(ord, name)))
    q, k, v = make_inputs(*shape, dtype)
    check_features(q, k, v, causal, switches=dict(hopper=True, hopper_overlap=overlap, hopper_backward=False),
                   **_resolve(features, shape[0], shape[1]))


@sm90
@pytest.mark.parametrize("forward", ["hopper", "portable"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name, shape, causal, features", [c for c in FEATURE_CASES if c[1][-1] in (64, 128)],
                         ids=[c[0] for c in FEATURE_CASES if c[1][-1] in (64, 128)])
def test_hopper_backward_features_match_reference(name, shape, causal, features, dtype, forward,
                                                  poisoned_allocations):
    """The Hopper backward with the features (its default schedule at each head dim), after either forward."""
    torch.manual_seed(sum(map(ord, name)) + 1)
    q, k, v = make_inputs(*shape, dtype)
    check_features(q, k, v, causal, switches=dict(hopper=forward == "hopper", hopper_backward=True),
                   **_resolve(features, shape[0], shape[1]))


@sm90
@pytest.mark.parametrize("schedule", ["plain", "fused", "self_loading"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal, features", [(True, dict(window_size=(200, 0))),
                                              (False, dict(window_size=(130, 70), softcap=10.0, alibi_slopes="bh"))],
                         ids=["window-causal", "window-softcap-alibi"])
def test_hopper_backward_schedules_with_features(schedule, head_dim, causal, features, poisoned_allocations):
    """Every schedule with the features, on a ragged grouped-query shape with Nq != Nk."""
    from kernels._hopper_bwd import hopper_backward

    torch.manual_seed(head_dim)
    q, k, v = make_inputs(2, 4, 2, 700, 900, head_dim, torch.float16)
    features = _resolve(features, 2, 4)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True, hopper=False, **features)
    d_out = torch.randn_like(out)
    slopes = features.get("alibi_slopes")
    grads = hopper_backward(d_out, q.detach(), k.detach(), v.detach(), out.detach(), lse, head_dim ** -0.5, causal,
                            schedule=schedule, window_size=features.get("window_size", (-1, -1)),
                            softcap=features.get("softcap", 0.0), alibi_slopes=slopes)
    assert_gradients_match(grads, q, k, v, d_out, causal, **features)


@sm90
def test_window_runs_agree_bitwise_and_reuse_one_kernel():
    """A moving result would be a race; and the window's bounds are launch arguments, not compile-time
    constants, so another window reuses the compiled kernel."""
    from kernels import _hopper

    q, k, v = (t.detach() for t in make_inputs(2, 8, 2, 4096, 4096, 128, torch.float16))
    first = flash_attention(q, k, v, causal=True, hopper=True, window_size=(1000, 0))
    for _ in range(3):
        assert torch.equal(flash_attention(q, k, v, causal=True, hopper=True, window_size=(1000, 0)), first)
    compiled = set(_hopper._hopper_fwd.device_caches[q.device.index][0])
    other = flash_attention(q, k, v, causal=True, hopper=True, window_size=(777, 0))
    assert set(_hopper._hopper_fwd.device_caches[q.device.index][0]) == compiled
    ref, _ = attention_reference(q, k, v, causal=True, window_size=(777, 0))
    low, _ = attention_reference(q, k, v, causal=True, window_size=(777, 0), upcast=False)
    assert_close_to_reference("out", other, low, ref)


def test_default_feature_lists_name_only_what_the_kernels_have():
    """The default's feature lists name features the Hopper kernels have, never dropout; at a head dim where a
    kernel has none of them (the backward at 192 and 256), the default takes none there."""
    from kernels import _hopper, _hopper_bwd
    from kernels.attention import HOPPER_BACKWARD_FEATURES, HOPPER_FORWARD_FEATURES, hopper_features_by_default

    for switch, kernel, listed in (("hopper", _hopper, HOPPER_FORWARD_FEATURES),
                                   ("hopper_backward", _hopper_bwd, HOPPER_BACKWARD_FEATURES)):
        assert listed <= set(kernel.FEATURES) and "dropout_p" not in listed
        for head_dim in kernel.HEAD_DIMS:
            expected = listed if head_dim in kernel.FEATURE_HEAD_DIMS else frozenset()
            assert hopper_features_by_default(switch, head_dim) == expected, (switch, head_dim)


@sm90
def test_default_kernels_with_features_follow_the_feature_lists(hopper_calls):
    """hopper=None (hopper_backward=None) runs the Hopper forward (backward) with a window, softcap or ALiBi
    only if HOPPER_FORWARD_FEATURES (HOPPER_BACKWARD_FEATURES) names it; with dropout never."""
    from kernels.attention import HOPPER_BACKWARD_FEATURES, HOPPER_FORWARD_FEATURES

    q, k, v = make_inputs(2, 4, 2, 700, 900, 128, torch.float16)
    slopes = torch.rand(4, device=DEVICE, dtype=torch.float32)
    for name, kwargs in (("window_size", dict(window_size=(100, 0), causal=True)), ("softcap", dict(softcap=20.0)),
                         ("alibi_slopes", dict(alibi_slopes=slopes)), ("dropout_p", dict(dropout_p=0.1))):
        hopper_calls.clear()
        out = flash_attention(q, k, v, **kwargs)
        torch.autograd.grad(out, k, torch.randn_like(out))
        assert ("fwd" in hopper_calls) == (name in HOPPER_FORWARD_FEATURES), name
        assert ("bwd" in hopper_calls) == (name in HOPPER_BACKWARD_FEATURES), name


# The Hopper backward (kernels/_hopper_bwd.py): one pass, dQ by TMA reduce-add.
BACKWARD_SHAPES = [
    (2, 4, 4, 1024, 1024, 128),
    (1, 8, 2, 1000, 1000, 64),     # grouped-query, lengths off the tile size
    (2, 3, 1, 129, 385, 128),      # multi-query, Nq < Nk (causal bottom-right), ragged blocks
    (1, 2, 2, 64, 64, 64),         # one key tile
    (1, 2, 2, 1, 300, 128),        # a single query
    (1, 2, 2, 777, 200, 64),       # Nq > Nk, full mask
    (1, 4, 2, 700, 900, 256),      # the wide kernel (kernels/_hopper_bwd_wide.py): GQA, Nq < Nk
    (2, 3, 1, 129, 385, 192),      # 192 in the tiles of 256, multi-query, ragged
    (1, 2, 2, 1, 300, 256),        # a single query (the dQ^T accumulator's rows padded to 4 floats)
]


@sm90
@pytest.mark.parametrize("forward", ["portable", "hopper"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", BACKWARD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_hopper_backward_matches_reference(shape, causal, dtype, forward, poisoned_allocations):
    if causal and shape[3] > shape[4]:
        pytest.skip("the Hopper kernels' causal mask needs seqlen_q <= seqlen_k")
    q, k, v = make_inputs(*shape, dtype)
    check_against_reference(q, k, v, causal, hopper=forward == "hopper", hopper_backward=True)


@sm90
@pytest.mark.parametrize("schedule, stages", [("plain", 2), ("fused", 3), ("fused", 2), ("self_loading", 2),
                                             ("self_loading", 3)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_hopper_backward_schedules(schedule, stages, causal, head_dim, poisoned_allocations):
    """Every schedule at both head dims (each default uses one), on ragged GQA shapes, and a
    d_out that is not contiguous."""
    from kernels._hopper_bwd import hopper_backward

    q, k, v = make_inputs(1, 4, 2, 700, 900, head_dim, torch.float16)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    d_out = torch.randn(1, 700, 4, head_dim, device=DEVICE, dtype=torch.float16).transpose(1, 2)
    grads = hopper_backward(d_out, q.detach(), k.detach(), v.detach(), out.detach(), lse, head_dim ** -0.5, causal,
                            schedule=schedule, stages=stages)
    assert_gradients_match(grads, q, k, v, d_out, causal)


WIDE_SCHEDULES = [dict(self_loading=True, do_stages=1, dq_bufs=2), dict(self_loading=True, do_stages=2, dq_bufs=1),
                  dict(self_loading=False, do_stages=1, dq_bufs=2), dict(self_loading=False, do_stages=2, dq_bufs=1)]


@sm90
@pytest.mark.parametrize("schedule", WIDE_SCHEDULES, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [192, 256])
def test_wide_backward_schedules(schedule, causal, head_dim, poisoned_allocations):
    """Every schedule of the wide kernel (self-loading or a producer warp, one or two dO slots, one or two
    dQ^T staging buffers) at both of its head dims, on a ragged GQA shape with a d_out that is not
    contiguous."""
    from kernels._hopper_bwd_wide import wide_backward

    q, k, v = make_inputs(1, 4, 2, 700, 900, head_dim, torch.bfloat16)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    d_out = torch.randn(1, 700, 4, head_dim, device=DEVICE, dtype=torch.bfloat16).transpose(1, 2)
    grads = wide_backward(d_out, q.detach(), k.detach(), v.detach(), out.detach(), lse, head_dim ** -0.5, causal,
                          **schedule)
    assert_gradients_match(grads, q, k, v, d_out, causal)


@pytest.mark.usefixtures("exclusive_gpu_memory")
@sm90
@pytest.mark.parametrize("head_dim", [64, 256])
def test_hopper_backward_tensors_over_2_31_elements(head_dim):
    """2^31 elements in q (2^31 / (1024 x D) heads x 1024 x D) and 2^33 bytes of float32 dQ accumulator: the
    descriptors' rows and the dK/dV epilogue's 64-bit offsets, checked on the first and last heads."""
    torch.manual_seed(9)
    heads = (1 << 31) // (1024 * head_dim)
    q, k, v = (torch.randn(1, heads, 1024, head_dim, device="cuda", dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    assert q.numel() >= 2**31
    d_out = torch.randn_like(q)
    grads = torch.autograd.grad(flash_attention(q, k, v, hopper_backward=True), (q, k, v), d_out)
    for i in (0, heads - 1):
        parts = [t[:, i:i + 1].detach().requires_grad_() for t in (q, k, v)]
        ref = torch.autograd.grad(attention_reference(*parts)[0], parts, d_out[:, i:i + 1].double())
        low = torch.autograd.grad(attention_reference(*parts, upcast=False)[0], parts, d_out[:, i:i + 1])
        for name, ours, lo, hi in zip(("dq", "dk", "dv"), grads, low, ref):
            assert_close_to_reference(f"{name}[{i}]", ours[:, i:i + 1], lo, hi)


@pytest.fixture
def hopper_calls(monkeypatch):
    """Which Hopper kernels each flash_attention call ran: a list with "fwd" or "bwd" per launch."""
    from kernels import _hopper, _hopper_bwd

    calls = []
    forward, backward = _hopper.hopper_forward, _hopper_bwd.hopper_backward

    def spy_forward(*args, **kwargs):
        calls.append("fwd")
        return forward(*args, **kwargs)

    def spy_backward(*args, **kwargs):
        calls.append("bwd")
        return backward(*args, **kwargs)

    monkeypatch.setattr(_hopper, "hopper_forward", spy_forward)
    monkeypatch.setattr(_hopper_bwd, "hopper_backward", spy_backward)
    return calls


@sm90
def test_default_backward_is_the_hopper_one_where_it_covers_the_call(hopper_calls):
    """hopper_backward=None runs the Hopper backward at HOPPER_BACKWARD_DEFAULTS on dense inputs, the
    portable one elsewhere, with deterministic=True and with what it does not cover."""
    def backward_ran(q, k, v, causal, **kwargs):
        hopper_calls.clear()
        out = flash_attention(q, k, v, causal=causal, **kwargs)
        torch.autograd.grad(out, k, torch.randn_like(out))
        return "bwd" in hopper_calls

    for head_dim in (64, 128, 192, 256):
        q, k, v = make_inputs(2, 4, 2, 700, 900, head_dim, torch.float16)
        for causal in (False, True):
            assert backward_ran(q, k, v, causal) == ((head_dim, causal) in HOPPER_BACKWARD_DEFAULTS)
            assert backward_ran(q, k, v, causal, hopper_backward=True)
            assert not backward_ran(q, k, v, causal, hopper_backward=False)
            assert not backward_ran(q, k, v, causal, deterministic=True)
        assert not backward_ran(q, k, v, False, dropout_p=0.1)  # (window, softcap, ALiBi: the next test but one)
        assert not backward_ran(q, k, v, False, bwd_tiles=TileConfig(64, 64, 4, 2))
        assert not backward_ran(q, k, v, False, atomic_dq=True)
        strided = q.transpose(1, 2).contiguous().transpose(1, 2).detach().requires_grad_()  # (B, N, H, D) memory
        assert not backward_ran(strided, k, v, False)


def test_hopper_backward_is_not_deterministic():
    q = _t(1, 2, 64, 64)
    with pytest.raises(ValueError, match="deterministic=True cannot be combined with hopper_backward=True"):
        flash_attention(q, q, q, hopper_backward=True, deterministic=True)


@pytest.mark.parametrize("kwargs, named", [
    (dict(dropout_p=0.1), "dropout_p"),
    (dict(dropout_p=0.1, window_size=(8, 0), softcap=5.0), "dropout_p"),
    (dict(recompute=False), "recompute=False"),
    (dict(atomic_dq=True), "atomic_dq=True"),
    (dict(bwd_tiles=TileConfig(64, 64, 4, 2)), "bwd_tiles"),
])
def test_hopper_backward_unsupported_features_are_named(kwargs, named):
    q = _t(1, 2, 64, 64)
    with pytest.raises(NotImplementedError, match=r"hopper_backward=True does not support .*"
                       + named.replace("(", r"\(").replace(")", r"\)")) as refused:
        flash_attention(q, q, q, hopper_backward=True, **kwargs)
    assert "window_size" not in str(refused.value) and "softcap;" not in str(refused.value)  # both covered


@pytest.mark.parametrize("head_dim", [96, 80])
def test_hopper_backward_refuses_the_head_dims_it_does_not_cover(head_dim):
    q = _t(1, 2, 64, head_dim)
    with pytest.raises(NotImplementedError, match=rf"hopper_backward=True does not support .*head dim {head_dim} "
                       r"\(64, 128, 192 and 256 only\).*the Hopper backward covers float16/bfloat16, head dims 64, "
                       r"128, 192 and 256,"):
        flash_attention(q, q, q, hopper_backward=True)


def test_hopper_forward_names_the_head_dims_it_covers():
    q = _t(1, 2, 64, 80)
    with pytest.raises(NotImplementedError, match=r"hopper=True does not support .*head dim 80 \(64, 96, 128, 192 "
                       r"and 256 only\).*the Hopper forward covers float16/bfloat16, "
                       r"head dims 64, 96, 128, 192 and 256,"):
        flash_attention(q, q, q, hopper=True)


@pytest.mark.skipif(IS_SM90, reason="checks the refusal off Hopper")
def test_hopper_backward_refused_without_a_hopper_gpu():
    q = _t(1, 2, 64, 64)
    with pytest.raises(NotImplementedError, match="hopper_backward=True .*compute capability 9.0"):
        flash_attention(q, q, q, hopper_backward=True)


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_hopper_switch_is_none_or_a_bool(value):
    q = _t(1, 2, 64, 64)
    with pytest.raises(ValueError, match="hopper must be None"):
        flash_attention(q, q, q, hopper=value)
    with pytest.raises(ValueError, match="hopper_backward must be None"):
        flash_attention(q, q, q, hopper_backward=value)


def test_default_forward_is_portable_off_hopper():
    assert HOPPER_FORWARD_MIN_KEYS == {64: 4096, 96: 0, 128: 0, 192: 0, 256: 0}
    assert not hopper_forward_by_default(128, 8192, torch.device("cpu"))
    assert not hopper_forward_by_default(64, 8192, torch.device("cpu"))
    if torch.cuda.is_available():
        assert hopper_forward_by_default(128, 1, torch.device("cuda")) == IS_SM90
        assert hopper_forward_by_default(64, 4096, torch.device("cuda")) == IS_SM90
        assert not hopper_forward_by_default(64, 4095, torch.device("cuda"))
        for head_dim in (96, 192, 256):
            assert hopper_forward_by_default(head_dim, 1, torch.device("cuda")) == IS_SM90
        assert not hopper_forward_by_default(80, 8192, torch.device("cuda"))
    assert HOPPER_BACKWARD_DEFAULTS == ((64, False), (64, True), (128, False), (128, True), (192, False), (192, True),
                                        (256, False), (256, True))
    assert not any(hopper_backward_by_default(d, c, torch.device("cpu")) for d, c in HOPPER_BACKWARD_DEFAULTS)
    if torch.cuda.is_available():
        for head_dim in (64, 128, 192, 256):
            assert hopper_backward_by_default(head_dim, True, torch.device("cuda")) == IS_SM90
        assert not hopper_backward_by_default(96, False, torch.device("cuda"))


@sm90
def test_default_forward_is_the_hopper_one_where_it_covers_the_call(hopper_calls):
    """hopper=None runs the Hopper forward on dense inputs at head dims 96, 128, 192 and 256 and at 64 from 4096
    keys, and the portable forward at other head dims, at 64 below 4096 keys and wherever the Hopper forward
    does not cover the call."""
    def forward_ran(q, k, v, **kwargs):
        hopper_calls.clear()
        flash_attention(q, k, v, return_lse=True, **kwargs)
        return "fwd" in hopper_calls

    q, k, v = (t.detach() for t in make_inputs(2, 4, 2, 700, 900, 128, torch.float16))
    for causal in (False, True):
        assert forward_ran(q, k, v, causal=causal)
        assert forward_ran(q, k, v, causal=causal, hopper=True)
        assert not forward_ran(q, k, v, causal=causal, hopper=False)
    q64, k64, v64 = (t.detach() for t in make_inputs(1, 4, 2, 300, 4096, 64, torch.float16))
    assert forward_ran(q64, k64, v64)
    assert forward_ran(q64, k64, v64, causal=True)
    k_short, v_short = k64[:, :, :4095].contiguous(), v64[:, :, :4095].contiguous()  # dense, one key short
    assert not forward_ran(q64, k_short, v_short)
    assert not forward_ran(q64, k_short, v_short, causal=True)
    assert forward_ran(q64, k_short, v_short, hopper=True)
    for head_dim in (96, 192, 256):
        qd, kd, vd = (t.detach() for t in make_inputs(1, 2, 2, 300, 500, head_dim, torch.float16))
        assert forward_ran(qd, kd, vd) and forward_ran(qd, kd, vd, causal=True)
        assert not forward_ran(qd, kd, vd, hopper=False)
    q80, k80, v80 = (t.detach() for t in make_inputs(1, 2, 2, 300, 500, 80, torch.float16))
    assert not forward_ran(q80, k80, v80)
    portable_cases = [  # (the features: test_default_forward_with_features_follows_hopper_forward_features)
        ((q, k, v), dict(dropout_p=0.1)),
        ((q, k, v), dict(fwd_tiles=TileConfig(64, 64, 4, 2))),
        ((q.transpose(1, 2).contiguous().transpose(1, 2), k, v), {}),  # (B, N, H, D) memory
        ((k.repeat_interleave(2, 1), q[:, :, :300].contiguous(), q[:, :, :300].contiguous()), dict(causal=True)),  # Nq > Nk
    ]
    for (qq, kk, vv), kwargs in portable_cases:
        assert not forward_ran(qq, kk, vv, **kwargs), kwargs


@sm90
@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_default_forward_gradients_match_reference(causal, head_dim, poisoned_allocations):
    """The defaults (the Hopper forward, then at head dims 64 and 128 the Hopper backward from its output, at
    96, 192 and 256 the portable one), and with deterministic=True (the Hopper forward, then the portable
    backward); at 64 with enough keys for the Hopper forward (HOPPER_FORWARD_MIN_KEYS)."""
    n_k = max(1030, HOPPER_FORWARD_MIN_KEYS[head_dim] + 15)
    q, k, v = make_inputs(2, 4, 2, 517, n_k, head_dim, torch.float16)
    check_against_reference(q, k, v, causal)
    check_against_reference(q, k, v, causal, deterministic=True)


@sm90
def test_compiled_default_with_misaligned_inputs_matches_reference():
    """Under torch.compile an input's address is unknown while tracing, so the Hopper kernels are chosen
    by shape and copy an input that is not 16-byte aligned when the graph runs (eager calls send such an
    input to the portable kernels instead)."""
    torch._dynamo.reset()
    torch.manual_seed(12)
    shape = (1, 4, 300, 64)

    def misaligned():
        return torch.randn(1 * 4 * 300 * 64 + 1, device=DEVICE, dtype=torch.float16)[1:].view(shape).requires_grad_()

    q, k, v = misaligned(), misaligned(), misaligned()
    assert q.data_ptr() % 16
    compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v, hopper=True), fullgraph=True)
    out = compiled(q, k, v)
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    ref = attention_reference(q, k, v, upcast=True)[0]
    low = attention_reference(q, k, v, upcast=False)[0]
    assert_close_to_reference("out", out, low, ref)
    for name, ours, lo, hi in zip(("dq", "dk", "dv"), grads, torch.autograd.grad(low, (q, k, v), d_out),
                                  torch.autograd.grad(ref, (q, k, v), d_out.double())):
        assert_close_to_reference(name, ours, lo, hi)
