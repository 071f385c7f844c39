"""The Hopper forward (kernels/_hopper.py, `flash_attention(..., hopper=True)`) and backward
(kernels/_hopper_bwd.py, `hopper_backward=True`).

On an sm_90 GPU: the output, the log-sum-exp and (through the portable backward it feeds) every
gradient against the float64 reference, with test_kernels' rule (at most twice PyTorch's own error
at the same precision), on odd lengths, Nq != Nk, grouped-query heads and both pipelines
(`overlap`), with every allocation poisoned; the Hopper backward's three gradients the same way,
after either forward, with both consumer schedules at both head dims, and past 2^31 elements; which
forward and backward the defaults (hopper=None, hopper_backward=None) pick: the Hopper ones exactly
where they cover the call at their head dims, the portable backward with deterministic=True.
Anywhere: the refusals (what hopper=True or hopper_backward=True does not cover raises
NotImplementedError naming it), and the sm_90a compile of every configuration, in a subprocess (the
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
    assert len(lines) == 4 * len(HEAD_DIMS), done.stdout
    for line in lines:
        assert "sm_90a" in line and " 0 bytes spill stores" in line and "wgmma=0 " not in line, line
        assert "setmaxnreg=0" not in line, line
    # The one-pass backward: wgmma, TMA loads, setmaxnreg and the TMA reduce-add of dQ in every
    # configuration; no spills at head dim 64 and at 128 full (the self-loading schedule; causal spills
    # 220 bytes there, against 308 with the producer warp; notes/perf.md, v16).
    backward = [line for line in done.stdout.splitlines() if line.startswith("bwd d")]
    assert len(backward) == 2 * len(BACKWARD_HEAD_DIMS), done.stdout
    for line in backward:
        assert "sm_90a" in line and "wgmma=0 " not in line and "tma_reduce=0 " not in line, line
        assert "tma_load=0 " not in line and "setmaxnreg=0" not in line, line
        if line.startswith("bwd d64") or line.startswith("bwd d128 causal=False"):
            assert " 0 bytes spill stores" in line, line


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
    ref = attention_reference(q, k, v, causal=causal, upcast=True)[0]
    low = attention_reference(q, k, v, causal=causal, upcast=False)[0]
    ref_grads = torch.autograd.grad(ref, (q, k, v), d_out.double())
    low_grads = torch.autograd.grad(low, (q, k, v), d_out)
    for name, ours, lo, hi in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
        assert ours.shape == hi.shape and ours.dtype == q.dtype
        assert_close_to_reference(name, ours, lo, hi)


@pytest.mark.usefixtures("exclusive_gpu_memory")
@sm90
def test_hopper_backward_tensors_over_2_31_elements():
    """2^31 elements in q (2^15 heads x 1024 x 64) and 2^32 bytes of float32 dQ accumulator: the
    descriptors' rows and the dK/dV epilogue's 64-bit offsets, checked on the first and last heads."""
    torch.manual_seed(9)
    q, k, v = (torch.randn(1, 1 << 15, 1024, 64, device="cuda", dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    assert q.numel() >= 2**31
    d_out = torch.randn_like(q)
    grads = torch.autograd.grad(flash_attention(q, k, v, hopper_backward=True), (q, k, v), d_out)
    for i in (0, (1 << 15) - 1):
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

    for head_dim in (64, 128):
        q, k, v = make_inputs(2, 4, 2, 700, 900, head_dim, torch.float16)
        for causal in (False, True):
            assert backward_ran(q, k, v, causal) == ((head_dim, causal) in HOPPER_BACKWARD_DEFAULTS)
            assert backward_ran(q, k, v, causal, hopper_backward=True)
            assert not backward_ran(q, k, v, causal, hopper_backward=False)
            assert not backward_ran(q, k, v, causal, deterministic=True)
        assert not backward_ran(q, k, v, False, softcap=20.0)
        assert not backward_ran(q, k, v, False, bwd_tiles=TileConfig(64, 64, 4, 2))
        assert not backward_ran(q, k, v, False, atomic_dq=True)
        strided = q.transpose(1, 2).contiguous().transpose(1, 2).detach().requires_grad_()  # (B, N, H, D) memory
        assert not backward_ran(strided, k, v, False)


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
    (dict(bwd_tiles=TileConfig(64, 64, 4, 2)), "bwd_tiles"),
])
def test_hopper_backward_unsupported_features_are_named(kwargs, named):
    q = _t(1, 2, 64, 64)
    with pytest.raises(NotImplementedError, match=r"hopper_backward=True does not support .*"
                       + named.replace("(", r"\(").replace(")", r"\)")):
        flash_attention(q, q, q, hopper_backward=True, **kwargs)


@pytest.mark.parametrize("head_dim", [96, 192, 256])
def test_hopper_backward_refuses_the_head_dims_only_the_forward_covers(head_dim):
    q = _t(1, 2, 64, head_dim)
    with pytest.raises(NotImplementedError, match=rf"hopper_backward=True does not support .*head dim {head_dim} "
                       r"\(64 and 128 only\).*the Hopper backward covers float16/bfloat16, head dims 64 and 128,"):
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
    assert HOPPER_BACKWARD_DEFAULTS == ((64, False), (64, True), (128, False), (128, True))
    assert not any(hopper_backward_by_default(d, c, torch.device("cpu")) for d, c in HOPPER_BACKWARD_DEFAULTS)
    if torch.cuda.is_available():
        assert hopper_backward_by_default(64, True, torch.device("cuda")) == IS_SM90
        assert hopper_backward_by_default(128, True, torch.device("cuda")) == IS_SM90
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
    portable_cases = [
        ((q, k, v), dict(softcap=20.0)),
        ((q, k, v), dict(window_size=(100, 0), causal=True)),
        ((q, k, v), dict(fwd_tiles=TileConfig(64, 64, 4, 2))),
        ((q, k, v), dict(alibi_slopes=torch.rand(4, device=DEVICE, dtype=torch.float32))),
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
