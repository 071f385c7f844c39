"""Correctness of the Triton engine against a float64 reference.

The pass rule follows flash-attn's tests: the max error of ours against the float64 reference
is at most twice the max error of PyTorch's own attention in the same precision (matmul,
softmax, matmul in fp16/bf16), plus a small absolute floor for outputs that are exactly zero.
Inputs are fresh random draws; shapes are odd on purpose. Every allocation the op makes is
poisoned with NaN, so an element the kernels forget to write shows up.

Without a GPU this runs on the CPU through Triton's interpreter (small shapes); with one it
runs natively and adds larger shapes and 64-bit offsets.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from kernels import TileConfig, attention_reference, flash_attention, flash_attn_func
from kernels.options import AttentionOptions


HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
DTYPES = [torch.float16, torch.bfloat16]
ABS_FLOOR = 1e-5


@pytest.fixture
def poisoned_allocations(monkeypatch):
    """Fill every torch.empty / torch.empty_like buffer with NaN while the op runs."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def poison(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **kw: poison(real_empty(*a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: poison(real_empty_like(*a, **kw)))


def make_inputs(batch, heads, kv_heads, n_q, n_k, head_dim, dtype, device=DEVICE):
    def draw(*shape):
        return torch.randn(*shape, device=device, dtype=dtype).requires_grad_()

    return draw(batch, heads, n_q, head_dim), draw(batch, kv_heads, n_k, head_dim), draw(batch, kv_heads, n_k, head_dim)


def describe_mismatch(name, ours, ref, bound):
    """A verbose failure message: count, first indices, NaN/Inf presence."""
    ours, ref = ours.double(), ref.double()
    both_inf = torch.isinf(ours) & torch.isinf(ref) & (torch.sign(ours) == torch.sign(ref))
    err = torch.where(both_inf, torch.zeros_like(ours), (ours - ref).abs())
    bad = ~(err <= bound)
    idx = bad.nonzero()[:5].tolist()
    return (f"{name}: {int(bad.sum())}/{bad.numel()} elements over {bound:.3g} "
            f"(max err {err.nan_to_num(float('inf')).max().item():.3g}); first at {idx}; "
            f"NaN in ours: {bool(torch.isnan(ours).any())}, Inf in ours: {bool(torch.isinf(ours).any() & ~both_inf.any())}")


def max_err(x, ref):
    x, ref = x.double(), ref.double()
    both_inf = torch.isinf(x) & torch.isinf(ref) & (torch.sign(x) == torch.sign(ref))
    err = torch.where(both_inf, torch.zeros_like(x), (x - ref).abs())
    return err.nan_to_num(float("inf")).max().item() if err.numel() else 0.0


def assert_close_to_reference(name, ours, lowp, ref):
    bound = 2 * max_err(lowp, ref) + ABS_FLOOR
    assert max_err(ours, ref) <= bound, describe_mismatch(name, ours, ref, bound)


def check_against_reference(q, k, v, causal, softmax_scale=None, **switches):
    """Forward, lse and all three gradients of ours vs the float64 reference."""
    out, lse = flash_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True, **switches)
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), d_out)

    ref_out, ref_lse = attention_reference(q, k, v, causal=causal, softmax_scale=softmax_scale, upcast=True)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), d_out.double())
    low_out, low_lse = attention_reference(q, k, v, causal=causal, softmax_scale=softmax_scale, upcast=False)
    low_grads = torch.autograd.grad(low_out, (q, k, v), d_out)

    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert not torch.isnan(out).any(), "output has NaN"
    assert not torch.isnan(lse).any(), "lse has NaN"
    assert_close_to_reference("out", out, low_out, ref_out)
    assert_close_to_reference("lse", lse, low_lse, ref_lse)
    for name, ours, low, ref in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
        assert ours.shape == ref.shape
        assert not torch.isnan(ours).any(), f"{name} has NaN"
        assert_close_to_reference(name, ours, low, ref)
    return out, lse, grads


# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim): odd lengths and head dims, Nq != Nk,
# grouped-query and multi-query heads, the extremes (1 and 256) of the head dim.
SHAPES = [
    (1, 1, 1, 1, 1, 1),
    (2, 3, 3, 113, 113, 40),
    (1, 2, 2, 203, 203, 59),
    (1, 4, 1, 64, 128, 96),      # multi-query, Nq < Nk
    (1, 4, 2, 100, 37, 111),     # grouped-query, Nq > Nk: causal rows with no key
    (1, 1, 1, 17, 1025, 64),
    (1, 2, 2, 65, 65, 160),
    (1, 1, 1, 33, 70, 192),
    (1, 1, 1, 48, 48, 256),
    (2, 2, 2, 7, 9, 128),
]
if HAS_CUDA:
    SHAPES += [(2, 8, 2, 1000, 1000, 64), (1, 4, 4, 2048, 2048, 128), (1, 3, 1, 511, 1537, 96)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_reference(shape, causal, dtype, poisoned_allocations):
    torch.manual_seed(hash((shape, causal)) % 2**31)
    check_against_reference(*make_inputs(*shape, dtype), causal)


SWITCHES = [
    dict(recompute=False),
    dict(deferred_rescale=False),
    dict(seq_parallel=False),
    dict(deferred_rescale=False, seq_parallel=False),
    dict(skip_masked_tiles=False),
    dict(atomic_dq=True),
    dict(fwd_tiles=TileConfig(32, 16, 4, 2), bwd_tiles=TileConfig(16, 32, 4, 2)),
    dict(fwd_tiles=TileConfig(16, 64, 2, 1), bwd_tiles=TileConfig(64, 16, 2, 1)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_switches_match_reference(switches, causal, dtype, poisoned_allocations):
    torch.manual_seed(7)
    check_against_reference(*make_inputs(1, 4, 2, 77, 45, 48, dtype), causal, **switches)


@pytest.mark.parametrize("switches", SWITCHES[:6], ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_switches_at_head_dim_128(switches, poisoned_allocations):
    """The default tiles are largest at D=128: every switch must still run (on a GPU, stepping
    the tiles down where a switch needs more shared memory) and stay correct."""
    torch.manual_seed(11)
    n = 1024 if HAS_CUDA else 80
    check_against_reference(*make_inputs(1, 2, 2, n, n, 128, torch.float16), True, **switches)


def test_head_dim_chunks_cover_the_head_dim_with_powers_of_two():
    from kernels.tiles import head_dim_chunks, padded_head_dim
    for d in range(1, 257):
        first, second = head_dim_chunks(d)
        assert first & (first - 1) == 0 and first >= 16 and first + second >= d
        if second:  # two chunks: each a power of two, narrower than the pad together, none under 32
            assert second & (second - 1) == 0 and 32 <= second and 64 <= first < d
            assert first + second < padded_head_dim(d)
        else:
            assert first == padded_head_dim(d)
    assert {d: head_dim_chunks(d) for d in (64, 96, 100, 128, 160, 176, 192, 256)} == {
        64: (64, 0), 96: (64, 32), 100: (128, 0), 128: (128, 0), 160: (128, 32), 176: (128, 64), 192: (128, 64),
        256: (256, 0)}


@pytest.mark.parametrize("switches", [{}, dict(deferred_rescale=False), dict(recompute=False), dict(seq_parallel=False),
                                      dict(skip_masked_tiles=False), dict(atomic_dq=True),
                                      dict(fwd_tiles=TileConfig(16, 32, 4, 1), bwd_tiles=TileConfig(32, 16, 4, 1))],
                         ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()) or "default")
@pytest.mark.parametrize("head_dim", [96, 176])
def test_head_dim_chunks_match_reference_with_every_switch(head_dim, switches, poisoned_allocations, monkeypatch):
    """Forward and backward in two column chunks (176: the second one masked past the head dim),
    under every switch of the portable kernels, against the float64 reference; the spies check
    which kernels ran in chunks: all of them, but the backward's with atomic dQ (its float32
    accumulator keeps padded rows)."""
    import kernels._backward as backward
    import kernels._forward as forward
    from kernels.tiles import head_dim_chunks

    launched = {}
    for module in (forward, backward):
        def spy(kernel, grid, *a, real=module.launch_kernel, **kw):
            launched.setdefault(getattr(kernel, "__name__", None) or kernel.fn.__name__, set()).add(kw.get("HEAD_DIM_B"))
            return real(kernel, grid, *a, **kw)
        monkeypatch.setattr(module, "launch_kernel", spy)
    torch.manual_seed(head_dim + len(switches))
    check_against_reference(*make_inputs(1, 4, 2, 45, 70, head_dim, torch.float16), True, hopper=False,
                            hopper_backward=False, **switches)
    second = head_dim_chunks(head_dim)[1]
    assert second > 0
    names = {name.split(".")[-1]: chunks for name, chunks in launched.items()}
    assert names.pop("_attn_fwd") == {second}
    assert names.pop("_attn_bwd_delta") == {None}
    if switches.get("atomic_dq"):
        assert names == {"_attn_bwd_dkdv": {0}}
    else:
        assert names == {"_attn_bwd_dkdv": {second}, "_attn_bwd_dq": {second}}


def test_head_dim_chunks_switched_off_pad_again(monkeypatch):
    import kernels.tiles as tiles

    monkeypatch.setattr(tiles, "CHUNKED_HEAD_DIMS", False)
    assert tiles.head_dim_chunks(192) == (256, 0) and tiles.head_dim_chunks(96) == (128, 0)


def test_backward_in_chunks_128_64_takes_its_own_tiles(monkeypatch):
    """176 and 192 run the backward in chunks 128 + 64 with the 64 x 64 tile; the padded kernels take the
    d256 entry (64 x 64 too since v19, chosen apart: notes/perf.md), and atomic dQ (padded to 256) the
    32 x 64 tile that fits its extra accumulator."""
    import kernels.tiles as tiles
    from kernels.attention import default_tiles_for

    d256, atomic = tiles.default_tiles(256, "bwd"), tiles.default_tiles(256, "bwd", atomic_dq=True)
    assert d256 == TileConfig(64, 64, 8, 2) and atomic == TileConfig(32, 64, 8, 2)
    for head_dim in (176, 192):
        assert tiles.default_tiles(head_dim, "bwd") == TileConfig(64, 64, 8, 2)
        assert default_tiles_for(head_dim, "bwd", "fa2", 0.1) == TileConfig(64, 64, 8, 2)
        assert tiles.default_tiles(head_dim, "bwd", atomic_dq=True) == atomic
        assert default_tiles_for(head_dim, "bwd", atomic_dq=True) == atomic
        assert tiles.default_tiles(head_dim, "fwd") == tiles.default_tiles(256, "fwd")
    assert tiles.default_tiles(160, "bwd") == d256  # chunks 128 + 32: not measured, the d256 entry
    assert tiles.default_tiles(160, "bwd", atomic_dq=True) == atomic
    monkeypatch.setattr(tiles, "CHUNKED_HEAD_DIMS", False)
    assert tiles.default_tiles(192, "bwd") == d256


def test_tile_fallback_steps_down_and_warns():
    from triton.runtime.errors import OutOfResources

    from kernels.tiles import TileFallbackWarning, launch_fitting, smaller_configs

    tried = []

    def launch(config):  # a GPU whose shared memory fits two stages at most
        tried.append(config)
        if config.num_stages > 2:
            raise OutOfResources(300_000, 232_448, "shared memory")

    requested = TileConfig(128, 128, 8, 3)
    assert smaller_configs(requested)[0] == TileConfig(128, 128, 8, 2)
    assert all(c.block_m >= 16 and c.block_n >= 16 for c in smaller_configs(requested))
    with pytest.warns(TileFallbackWarning, match="num_stages=2"):
        assert launch_fitting(launch, requested, True, ("fwd", "test")) == TileConfig(128, 128, 8, 2)
    with pytest.warns(TileFallbackWarning):  # remembered: one launch, still reported
        tried.clear()
        launch_fitting(launch, requested, True, ("fwd", "test"))
    assert tried == [TileConfig(128, 128, 8, 2)]
    with pytest.raises(OutOfResources):  # an explicit config is never changed
        launch_fitting(launch, requested, False, ("fwd", "test"))


def test_custom_softmax_scale(poisoned_allocations):
    check_against_reference(*make_inputs(1, 2, 2, 50, 61, 32, torch.float16), True, softmax_scale=0.37)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_negative_softmax_scale_with_a_wide_score_range(causal, poisoned_allocations):
    """A negative scale is valid input: the row max must be taken after scaling (it once gave NaN)."""
    q, k, v = make_inputs(1, 2, 2, 64, 80, 32, torch.float16)
    with torch.no_grad():
        q.mul_(4), k.mul_(4)  # scores spread over hundreds: exp overflows if the max is the wrong one
    check_against_reference(q, k, v, causal, softmax_scale=-0.5)


def test_strided_inputs_need_no_copy(poisoned_allocations):
    """(B, N, H, D) tensors transposed, a sliced (non-dense) q, and an expanded gradient."""
    torch.manual_seed(3)
    base = torch.randn(2, 57, 4, 2 * 24, device=DEVICE, dtype=torch.float16)
    q = base[..., ::2].transpose(1, 2).detach().requires_grad_()  # non-dense view of a transposed layout
    k = torch.randn(2, 71, 2, 24, device=DEVICE, dtype=torch.float16).transpose(1, 2).detach().requires_grad_()
    v = torch.randn(2, 71, 2, 24, device=DEVICE, dtype=torch.float16).transpose(1, 2).detach().requires_grad_()
    assert not q.is_contiguous() and not k.is_contiguous()
    check_against_reference(q, k, v, causal=True)

    out = flash_attention(q, k, v, causal=True)
    out.sum().backward()  # d_out arrives as an expanded tensor with zero strides
    ref = attention_reference(q, k, v, causal=True)[0]
    ref_grad = torch.autograd.grad(ref.sum(), q)[0]
    low_grad = torch.autograd.grad(attention_reference(q, k, v, causal=True, upcast=False)[0].sum(), q)[0]
    assert_close_to_reference("dq (expanded d_out)", q.grad, low_grad, ref_grad)


def test_flash_attn_layout(poisoned_allocations):
    """flash_attn_func (flash-attn's API, dropout_p fourth) on (B, N, H, D) equals flash_attention
    on the transposed view, bitwise. tests/test_flash_attn_api.py covers the rest of that API."""
    torch.manual_seed(4)
    q = torch.randn(2, 45, 4, 32, device=DEVICE, dtype=torch.bfloat16)
    k = torch.randn(2, 60, 2, 32, device=DEVICE, dtype=torch.bfloat16)
    v = torch.randn(2, 60, 2, 32, device=DEVICE, dtype=torch.bfloat16)
    out = flash_attn_func(q, k, v, 0.0, causal=True)
    assert out.shape == q.shape and out.is_contiguous()
    expected = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    assert torch.equal(out, expected.transpose(1, 2))


@pytest.mark.parametrize("head_dim, causal", [(64, True), (64, False), (128, False), (96, True)])
def test_deterministic_backward_is_bitwise_reproducible(head_dim, causal):
    """deterministic=True: the same gradients bit for bit, also where the default backward on sm_90 is
    the Hopper one (whose dQ additions land in any order)."""
    torch.manual_seed(5)
    q, k, v = make_inputs(1, 4, 2, 150, 150, head_dim, torch.float16)
    out = flash_attention(q, k, v, causal=causal, deterministic=True)
    d_out = torch.randn_like(out)
    first = torch.autograd.grad(out, (q, k, v), d_out, retain_graph=True)
    second = torch.autograd.grad(out, (q, k, v), d_out)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_deterministic_refuses_atomic_dq():
    q, k, v = make_inputs(1, 1, 1, 16, 16, 16, torch.float16)
    with pytest.raises(ValueError, match="deterministic=True cannot be combined with atomic_dq=True"):
        flash_attention(q, k, v, deterministic=True, atomic_dq=True)


def test_causal_skips_tiles_above_the_diagonal(poisoned_allocations):
    """With stored scores, tiles above the diagonal are never written unless skipping is off."""
    torch.manual_seed(6)
    tiles = TileConfig(32, 32, 4, 2)
    q, k, v = make_inputs(1, 1, 1, 128, 128, 32, torch.float16)
    opts = AttentionOptions(softmax_scale=0.1, causal=True, fwd_tiles=(32, 32, 4, 2), fit_fwd_tiles=False,
                            recompute=False)
    with torch.no_grad():
        _, _, scores = torch.ops.flash_attn_triton.fwd(q, k, v, None, None, opts.encode())
        _, _, all_scores = torch.ops.flash_attn_triton.fwd(
            q, k, v, None, None, dataclasses.replace(opts, skip_masked_tiles=False).encode())
    tile_rows = torch.arange(128, device=q.device)[:, None] // tiles.block_m
    tile_cols = torch.arange(128, device=q.device)[None, :] // tiles.block_n
    above = tile_cols > tile_rows
    assert torch.isnan(scores[0, 0][above]).all(), "a tile above the diagonal was computed"
    assert not torch.isnan(scores[0, 0][~above]).any()
    assert not torch.isnan(all_scores).any(), "skip_masked_tiles=False must compute every tile"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_inputs_on_a_device_other_than_the_current_one():
    torch.manual_seed(12)
    other = (torch.cuda.current_device() + 1) % torch.cuda.device_count()  # xdist workers differ in current device
    check_against_reference(*make_inputs(1, 2, 2, 100, 100, 64, torch.float16, device=f"cuda:{other}"), True)


def test_empty_query_batch():
    q = torch.empty(0, 2, 5, 16, device=DEVICE, dtype=torch.float16)
    k = torch.randn(0, 2, 7, 16, device=DEVICE, dtype=torch.float16)
    out, lse = flash_attention(q, k, k, return_lse=True)
    assert out.shape == q.shape and lse.shape == (0, 2, 5)


def _t(*shape, dtype=torch.float16, device=DEVICE):
    return torch.randn(*shape, device=device, dtype=dtype)


BAD_INPUTS = [
    ("wrong rank", lambda: (_t(2, 8, 16), _t(2, 8, 16), _t(2, 8, 16)), "rank 4"),
    ("batch mismatch", lambda: (_t(2, 2, 8, 16), _t(3, 2, 8, 16), _t(3, 2, 8, 16)), "batch size mismatch"),
    ("head dim mismatch", lambda: (_t(1, 2, 8, 16), _t(1, 2, 8, 32), _t(1, 2, 8, 32)), "head dim mismatch"),
    ("dtype mismatch", lambda: (_t(1, 2, 8, 16), _t(1, 2, 8, 16, dtype=torch.bfloat16), _t(1, 2, 8, 16)), "one dtype"),
    ("float32", lambda: (_t(1, 2, 8, 16, dtype=torch.float32),) * 3, "supported dtypes are torch.float16 and torch.bfloat16"),
    ("heads not divisible", lambda: (_t(1, 3, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 8, 16)), "multiple of the number of key/value heads"),
    ("head dim over 256", lambda: (_t(1, 1, 8, 320), _t(1, 1, 8, 320), _t(1, 1, 8, 320)), "between 1 and 256"),
    ("k/v length mismatch", lambda: (_t(1, 2, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 9, 16)), "same sequence length"),
    ("k/v heads mismatch", lambda: (_t(1, 2, 8, 16), _t(1, 2, 8, 16), _t(1, 1, 8, 16)), "same number of heads"),
    ("no keys", lambda: (_t(1, 2, 8, 16), _t(1, 2, 0, 16), _t(1, 2, 0, 16)), "at least one key"),
    ("not a tensor", lambda: ([1.0], _t(1, 2, 8, 16), _t(1, 2, 8, 16)), "must be a torch.Tensor"),
]
if HAS_CUDA:
    BAD_INPUTS.append(("device mismatch", lambda: (_t(1, 2, 8, 16), _t(1, 2, 8, 16, device="cpu"), _t(1, 2, 8, 16)),
                       "one device"))


@pytest.mark.parametrize("make,message", [(m, msg) for _, m, msg in BAD_INPUTS], ids=[n for n, _, _ in BAD_INPUTS])
def test_bad_input_is_refused(make, message):
    with pytest.raises(ValueError, match=message):
        flash_attention(*make())


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(1, 1, 8, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        flash_attention(x, x, x)


@pytest.mark.parametrize("bad", [dict(softmax_scale=math.inf), dict(fwd_tiles=(64, 64, 4, 2))])
def test_bad_options_are_refused(bad):
    x = _t(1, 1, 8, 16)
    with pytest.raises(ValueError):
        flash_attention(x, x, x, **bad)


def test_a_repeated_call_matches_its_first_and_the_reference(poisoned_allocations):
    """The second call of a layout and arguments runs on the plan the first one resolved (kernels.attention
    _PLANS); both match the float64 reference, a negative scale included, and so does the same call on a
    strided layout of the same shape, which resolves a plan of its own."""
    from kernels import attention

    torch.manual_seed(11)
    q, k, v = make_inputs(1, 2, 1, 45, 70, 32, torch.float16)
    for scale in (None, -0.3):
        attention._PLANS.clear()
        torch.manual_seed(12)  # the same output gradient for both calls
        first = check_against_reference(q, k, v, True, softmax_scale=scale)
        assert len(attention._PLANS) == 1
        torch.manual_seed(12)
        second = check_against_reference(q, k, v, True, softmax_scale=scale)
        assert len(attention._PLANS) == 1  # the same plan served the second call
        for a, b in zip((first[0], first[1], *first[2]), (second[0], second[1], *second[2])):
            assert torch.equal(a, b)
    strided = [t.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for t in (q, k, v)]
    assert strided[0].stride() != q.stride()
    check_against_reference(*strided, True, softmax_scale=-0.3)
    assert len(attention._PLANS) == 2


@pytest.mark.parametrize("accepted,refused,message", [
    (dict(dropout_p=0.0), dict(dropout_p=False), "dropout_p"),
    (dict(softcap=0.0), dict(softcap=False), "softcap"),
    (dict(window_size=(-1, -1)), dict(window_size=(-1.0, -1)), "window_size"),
    (dict(causal=False, hopper_backward=None), dict(causal=False, hopper_backward=0), "hopper_backward"),
], ids=["dropout_p", "softcap", "window_size", "hopper_backward"])
def test_a_refused_call_stays_refused_after_an_equal_accepted_one(accepted, refused, message):
    """The plans never let a call skip a check that its first call would fail: a value equal to an accepted
    one but of a refused type (False for 0.0) still raises."""
    x = _t(1, 1, 8, 16)
    flash_attention(x, x, x, **accepted)
    flash_attention(x, x, x, **accepted)
    with pytest.raises(ValueError, match=message):
        flash_attention(x, x, x, **refused)


def test_the_plans_keep_the_interpreter_check(monkeypatch):
    """A CPU call accepted under the interpreter is refused when the interpreter is off, plan or not."""
    x = _t(1, 1, 8, 16, device="cpu")
    if not HAS_CUDA:
        flash_attention(x, x, x)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        flash_attention(x, x, x)


@pytest.mark.parametrize("bad", [dict(block_m=48), dict(block_n=8), dict(num_warps=3), dict(num_stages=0)])
def test_bad_tile_config_is_refused(bad):
    args = dict(block_m=64, block_n=64, num_warps=4, num_stages=2) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        TileConfig(**args)


def test_torch_compile_fullgraph():
    """A model calling flash_attention compiles with fullgraph=True (no graph break)."""
    torch._dynamo.reset()
    torch.manual_seed(8)
    proj = torch.nn.Linear(32, 32, device=DEVICE, dtype=torch.float16)

    def block(x):  # x: (B, H, N, D)
        y = proj(x)
        return flash_attention(y, y, y, causal=True).float().square().mean()

    x = torch.randn(1, 2, 40, 32, device=DEVICE, dtype=torch.float16, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    loss = compiled(x)
    loss.backward()
    grad_compiled = x.grad.clone()
    x.grad = None
    eager = block(x)
    eager.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(grad_compiled, x.grad, rtol=1e-2, atol=1e-3)


@pytest.mark.usefixtures("exclusive_gpu_memory")
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU with > 30 GB")
@pytest.mark.parametrize("algorithm", ["fa2", "fa1"])
@pytest.mark.parametrize("layout", ["bhnd_many_heads", "bnhd_long_rows"])
def test_tensors_over_2_31_elements(layout, algorithm):
    """64-bit offsets: batch/head bases and row offsets past 2^31 elements (and FA1's float32 scratch)."""
    torch.manual_seed(9)
    if layout == "bhnd_many_heads":
        q = torch.randn(1 << 15, 1, 256, 256, device="cuda", dtype=torch.float16)  # 2^31 elements
        k, v = torch.randn_like(q), torch.randn_like(q)
        picks = [0, (1 << 15) - 1]
        view = lambda t, i: t[i:i + 1]
    else:
        q = torch.randn(1, 2048, 4096, 256, device="cuda", dtype=torch.float16).transpose(1, 2)  # row stride 2^20
        k, v = torch.randn_like(q), torch.randn_like(q)
        picks = [0, 4095]
        view = lambda t, i: t[:, i:i + 1]
    assert q.numel() >= 2**31
    out = flash_attention(q, k, v, causal=True, algorithm=algorithm)
    for i in picks:
        ref = attention_reference(view(q, i), view(k, i), view(v, i), causal=True)[0]
        low = attention_reference(view(q, i), view(k, i), view(v, i), causal=True, upcast=False)[0]
        assert_close_to_reference(f"out[{i}]", view(out, i), low, ref)
    if algorithm == "fa2":  # the backward, with its float32 dQ accumulator of 2^31 rows x 256
        del out
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        d_out = torch.randn_like(q)
        grads = torch.autograd.grad(flash_attention(q, k, v, causal=True), (q, k, v), d_out)
        for i in picks:
            parts = [view(t, i).detach().requires_grad_() for t in (q, k, v)]
            ref = torch.autograd.grad(attention_reference(*parts, causal=True)[0], parts, view(d_out, i).double())
            low = torch.autograd.grad(attention_reference(*parts, causal=True, upcast=False)[0], parts, view(d_out, i))
            for name, ours, lo, hi in zip(("dq", "dk", "dv"), grads, low, ref):
                assert_close_to_reference(f"{name}[{i}]", view(ours, i), lo, hi)


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("switches", [{}, {"atomic_dq": True}, {"deterministic": True},
                                      {"hopper": True, "hopper_backward": True}],
                         ids=["default", "atomic_dq", "deterministic", "hopper"])
def test_cuda_graph_capture_and_replay(switches):
    """Forward and backward captured once in a CUDA graph and replayed on new inputs give what
    eager calls give (no host synchronisation or host-side state inside the op), on the portable
    kernels and (sm_90) the Hopper ones, which the default runs at this head dim there."""
    from kernels.attention import hopper_backward_by_default

    if switches.get("hopper") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper kernels need a compute capability 9.0 GPU")
    # dQ by atomic adds or TMA reduce-adds: the order of the float32 additions varies
    exact_dq = switches.get("deterministic") or not (
        switches.get("atomic_dq") or switches.get("hopper_backward")
        or hopper_backward_by_default(64, True, torch.device("cuda")))
    torch.manual_seed(10)
    static = make_inputs(2, 4, 2, 200, 200, 64, torch.float16)
    d_out = torch.randn(2, 4, 200, 64, device="cuda", dtype=torch.float16)

    def step():
        out = flash_attention(*static, causal=True, **switches)
        return (out, *torch.autograd.grad(out, static, d_out))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up compiles the kernels outside the capture
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for _ in range(2):
        fresh = make_inputs(2, 4, 2, 200, 200, 64, torch.float16)
        with torch.no_grad():
            for dst, src in zip(static, fresh):
                dst.copy_(src)
        graph.replay()
        out = flash_attention(*fresh, causal=True, **switches)
        expected = (out, *torch.autograd.grad(out, fresh, d_out))
        for name, got, want in zip(("out", "dq", "dk", "dv"), captured, expected):
            exact = exact_dq or name != "dq"
            torch.testing.assert_close(got, want, rtol=0 if exact else 2e-3, atol=0 if exact else 2e-3,
                                       msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.skipif(not HAS_CUDA, reason="reduce-overhead compiles CUDA graphs")
def test_torch_compile_reduce_overhead():
    """torch.compile(mode="reduce-overhead") records the op in CUDA graphs and replays it."""
    torch._dynamo.reset()
    torch.manual_seed(11)

    def loss_and_grads(q, k, v):
        out = flash_attention(q, k, v, causal=True)
        return torch.autograd.grad(out.float().square().sum(), (q, k, v))

    def fwd(q, k, v):
        return flash_attention(q, k, v, causal=True)

    compiled = torch.compile(fwd, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # recorded on the first calls, replayed after
        q, k, v = make_inputs(1, 4, 4, 300, 300, 128, torch.float16)
        got = compiled(q, k, v)
        torch.testing.assert_close(got, fwd(q, k, v), rtol=0, atol=0)
        got.float().square().sum().backward()
        grads = [t.grad.clone() for t in (q, k, v)]
        for want, g in zip(loss_and_grads(q, k, v), grads):
            torch.testing.assert_close(g, want, rtol=1e-2, atol=2e-3)
