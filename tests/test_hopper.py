"""The Hopper forward (kernels/_hopper.py, `flash_attention(..., hopper=True)`) and backward
(kernels/_hopper_bwd.py, `hopper_backward=True`).

On an sm_90 GPU: the output, the log-sum-exp and (through the portable backward it feeds) every
gradient against the float64 reference, with test_kernels' rule (at most twice PyTorch's own error
at the same precision), on odd lengths, Nq != Nk, grouped-query heads and both pipelines
(`overlap`), with every allocation poisoned; the Hopper backward's three gradients the same way,
alone and after the Hopper forward, for each of its tile configs; which forward the default
(hopper=None) picks: the Hopper one exactly where it covers the call at head dim 128. Anywhere: the refusals (what hopper=True does not
cover raises NotImplementedError naming it), and the sm_90a compile of every configuration, in a
subprocess (the interpreter must be off there), with no spills and the instructions it is for.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import TileConfig, attention_reference, flash_attention
from kernels.attention import HOPPER_DEFAULT_HEAD_DIMS, hopper_forward_by_default
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
@pytest.mark.parametrize("shape", [(2, 4, 2, 777, 777, 128), (1, 4, 4, 256, 1000, 64)],
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
    (dict(window_size=(8, 0)), "window_size"),
    (dict(softcap=5.0), "softcap"),
    (dict(dropout_p=0.1), "dropout_p"),
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
    (lambda: (_t(1, 2, 64, 96),) * 3, "head dim 96"),
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
    assert len(lines) == 8, done.stdout
    for line in lines:
        assert "sm_90a" in line and " 0 bytes spill stores" in line and "wgmma=0 " not in line, line
        assert "setmaxnreg=0" not in line, line
    # The one-pass backward: wgmma, TMA loads and the TMA reduce-add of dQ in every configuration (it
    # spills at its default tiles, the fastest measured; notes/perf.md, v12).
    backward = [line for line in done.stdout.splitlines() if line.startswith("bwd d")]
    assert len(backward) == 4, done.stdout
    for line in backward:
        assert "sm_90a" in line and "wgmma=0 " not in line and "tma_reduce=0 " not in line, line
        assert "tma_load=0 " not in line, line


def test_overlap_switch_needs_hopper():
    q = _t(1, 2, 64, 64)
    with pytest.raises(ValueError, match="hopper_overlap=False .* needs hopper=True"):
        flash_attention(q, q, q, hopper_overlap=False)


@sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_serial_switch_matches_reference(causal, poisoned_allocations):
    q, k, v = make_inputs(1, 4, 2, 600, 900, 128, torch.float16)
    check_against_reference(q, k, v, causal, hopper=True, hopper_overlap=False)


# The Hopper backward (kernels/_hopper_bwd.py): one pass, dQ by TMA reduce-add.
BACKWARD_SHAPES = [
    (2, 4, 4, 1024, 1024, 128),
    (1, 8, 2, 1000, 1000, 64),     # grouped-query, lengths off the tile size
    (2, 3, 1, 129, 385, 128),      # multi-query, Nq < Nk (causal bottom-right), ragged blocks
    (1, 2, 2, 64, 64, 64),         # one key tile
    (1, 2, 2, 1, 300, 128),        # a single query
    (1, 2, 2, 777, 200, 64),       # Nq > Nk, full mask
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
@pytest.mark.parametrize("tiles", [(64, 128, 8, 2), (64, 64, 8, 2), (32, 128, 8, 2), (64, 128, 8, 3)],
                         ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("head_dim", [64, 128])
def test_hopper_backward_tile_configs(tiles, head_dim, poisoned_allocations):
    from kernels import TileConfig

    q, k, v = make_inputs(1, 4, 2, 700, 900, head_dim, torch.float16)
    check_against_reference(q, k, v, True, hopper_backward=True, bwd_tiles=TileConfig(*tiles))


def test_hopper_backward_is_not_deterministic():
    q = _t(1, 2, 64, 64)
    with pytest.raises(ValueError, match="deterministic=True cannot be combined with hopper_backward=True"):
        flash_attention(q, q, q, hopper_backward=True, deterministic=True)


@pytest.mark.parametrize("kwargs, named", [
    (dict(window_size=(8, 0)), "window_size"),
    (dict(softcap=5.0), "softcap"),
    (dict(dropout_p=0.1), "dropout_p"),
    (dict(recompute=False), "recompute=False"),
    (dict(atomic_dq=True), "atomic_dq=True"),
])
def test_hopper_backward_unsupported_features_are_named(kwargs, named):
    q = _t(1, 2, 64, 64)
    with pytest.raises(NotImplementedError, match=r"hopper_backward=True does not support .*"
                       + named.replace("(", r"\(").replace(")", r"\)")):
        flash_attention(q, q, q, hopper_backward=True, **kwargs)


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


def test_default_forward_is_portable_off_hopper():
    assert HOPPER_DEFAULT_HEAD_DIMS == (128,)
    assert not hopper_forward_by_default(128, torch.device("cpu"))
    if torch.cuda.is_available():
        assert hopper_forward_by_default(128, torch.device("cuda")) == IS_SM90
        assert not hopper_forward_by_default(64, torch.device("cuda"))


def _same(a, b):
    a, b = (a,) if torch.is_tensor(a) else a, (b,) if torch.is_tensor(b) else b
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@sm90
def test_default_forward_is_the_hopper_one_where_it_covers_the_call():
    """hopper=None runs exactly what hopper=True runs at head dim 128 on dense inputs, and exactly
    the portable forward at 64 and wherever the Hopper forward does not cover the call; the two
    forwards differ in their rounding, so bitwise equality says which one ran."""
    q, k, v = (t.detach() for t in make_inputs(2, 4, 2, 700, 900, 128, torch.float16))
    for causal in (False, True):
        default = flash_attention(q, k, v, causal=causal, return_lse=True)
        assert _same(default, flash_attention(q, k, v, causal=causal, return_lse=True, hopper=True))
        assert not _same(default, flash_attention(q, k, v, causal=causal, return_lse=True, hopper=False))
    q64, k64, v64 = (t.detach() for t in make_inputs(2, 4, 2, 700, 900, 64, torch.float16))
    assert _same(flash_attention(q64, k64, v64, return_lse=True),
                 flash_attention(q64, k64, v64, return_lse=True, hopper=False))
    portable_cases = [
        ((q, k, v), dict(softcap=20.0)),
        ((q, k, v), dict(window_size=(100, 0), causal=True)),
        ((q, k, v), dict(fwd_tiles=TileConfig(64, 64, 4, 2))),
        ((q, k, v), dict(alibi_slopes=torch.rand(4, device=DEVICE, dtype=torch.float32))),
        ((q.transpose(1, 2).contiguous().transpose(1, 2), k, v), {}),  # (B, N, H, D) memory
        ((k.repeat_interleave(2, 1), q[:, :, :300].contiguous(), q[:, :, :300].contiguous()), dict(causal=True)),  # Nq > Nk
    ]
    for (qq, kk, vv), kwargs in portable_cases:
        assert _same(flash_attention(qq, kk, vv, return_lse=True, **kwargs),
                     flash_attention(qq, kk, vv, return_lse=True, hopper=False, **kwargs)), kwargs


@sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_default_forward_gradients_match_reference(causal, poisoned_allocations):
    """The default at head dim 128 (the Hopper forward, then the portable backward from its output)."""
    q, k, v = make_inputs(2, 4, 2, 517, 1030, 128, torch.float16)
    check_against_reference(q, k, v, causal)
