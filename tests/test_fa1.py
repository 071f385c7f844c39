"""The FlashAttention-1 arm (`flash_attention(..., algorithm="fa1")`) against the float64 reference.

Same pass rule, inputs and NaN-poisoned allocations as tests/test_kernels.py, whose helpers
are reused. Every correctness test also counts the FA1 kernel launches and makes the FA2
forward and dK/dV/dQ kernels refuse to run, so a silent fallback to the FA2 path fails.
On the CPU this runs through Triton's interpreter, so the shapes are small; the lengths are
chosen against the default tiles (64) and the explicit small tiles so that every case spans
several key and query blocks, with ragged edges or without.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from kernels import TileConfig, TileFallbackWarning, _backward, _fa1, _forward, attention_reference, flash_attention
from kernels._fa1 import fa1_default_tiles
from kernels.tiles import padded_head_dim
from test_kernels import (DEVICE, DTYPES, HAS_CUDA, assert_close_to_reference, check_against_reference,  # noqa: F401
                          make_inputs, poisoned_allocations)


@pytest.fixture
def fa1_launches(monkeypatch):
    """Record every launch of the FA1 kernels (their tile sizes) and fail any FA2 kernel launch."""
    launches = {"fwd": [], "bwd": []}

    def recording(pass_, run):
        def wrapped(*args, **kwargs):
            launches[pass_].append((kwargs["BLOCK_M"], kwargs["BLOCK_N"]))
            return run(*args, **kwargs)
        return wrapped

    def refuse(*args, **kwargs):
        raise AssertionError("an FA2 kernel ran on the fa1 path")

    monkeypatch.setattr(_fa1._fa1_fwd, "run", recording("fwd", _fa1._fa1_fwd.run))
    monkeypatch.setattr(_fa1._fa1_bwd, "run", recording("bwd", _fa1._fa1_bwd.run))
    for kernel in (_forward._attn_fwd, _backward._attn_bwd_dkdv, _backward._attn_bwd_dq):
        monkeypatch.setattr(kernel, "run", refuse)
    return launches


# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim). In bfloat16 the pass rule is only as
# steady as the baseline's max error over few elements: at 1x1x1x9x12x16 7 of 8 random draws
# fail it, at 1x2x2x67x67x40 causal 2 of 8, and at head dim 1 most, for the FA2 kernels as for
# these and on the same draws (2026-11, interpreter). So the shapes below keep a few thousand
# elements per tensor (those measured passed 8 to 10 further draws), and head dim 1 runs at
# the one length where it is exact.
SHAPES = [
    (2, 2, 2, 67, 67, 40),       # lengths not a multiple of the tile, padded head dim
    (1, 2, 2, 33, 65, 32),       # Nq < Nk
    (1, 4, 2, 65, 33, 32),       # Nq > Nk: causal rows that see no key; grouped-query
    (1, 4, 2, 50, 70, 64),       # grouped-query
    (2, 4, 1, 40, 29, 48),       # multi-query, two batches
    (1, 2, 1, 128, 128, 64),     # lengths a multiple of the tiles: the unmasked inner steps
    (1, 2, 1, 40, 50, 16),
    (1, 2, 1, 33, 47, 96),
    (1, 2, 1, 24, 40, 128),
    (1, 2, 2, 30, 70, 256),      # D=256 has its own default tiles
    (1, 1, 1, 1, 1, 1),
]
if HAS_CUDA:
    SHAPES += [(2, 8, 2, 1000, 1000, 64), (1, 4, 4, 1024, 1024, 128), (1, 3, 1, 511, 1537, 96),
               (1, 2, 2, 300, 700, 256)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fa1_matches_reference(shape, causal, dtype, poisoned_allocations, fa1_launches):
    torch.manual_seed(hash((shape, causal)) % 2**31)
    check_against_reference(*make_inputs(*shape, dtype), causal, algorithm="fa1")
    head_dim = shape[-1]
    fwd, bwd = fa1_default_tiles(head_dim, "fwd"), fa1_default_tiles(head_dim, "bwd")
    assert fa1_launches == {"fwd": [(fwd.block_m, fwd.block_n)], "bwd": [(bwd.block_m, bwd.block_n)]}


# Small tiles: many key blocks per query row, so O, l, m (and dQ) go through HBM many times.
TILES = [
    dict(fwd_tiles=TileConfig(16, 32, 4, 1), bwd_tiles=TileConfig(32, 16, 4, 1)),
    dict(fwd_tiles=TileConfig(32, 16, 2, 2), bwd_tiles=TileConfig(16, 64, 2, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tiles", TILES, ids=lambda t: "fwd{0}x{1}-bwd{2}x{3}".format(
    t["fwd_tiles"].block_m, t["fwd_tiles"].block_n, t["bwd_tiles"].block_m, t["bwd_tiles"].block_n))
def test_fa1_small_tiles_match_reference(tiles, causal, dtype, poisoned_allocations, fa1_launches):
    torch.manual_seed(7)
    check_against_reference(*make_inputs(1, 4, 2, 77, 45, 48, dtype), causal, algorithm="fa1", **tiles)
    assert fa1_launches["fwd"] == [(tiles["fwd_tiles"].block_m, tiles["fwd_tiles"].block_n)]
    assert fa1_launches["bwd"] == [(tiles["bwd_tiles"].block_m, tiles["bwd_tiles"].block_n)]


def test_fa1_rows_that_see_no_key(poisoned_allocations, fa1_launches):
    """Causal with Nq > Nk: the first Nq - Nk rows give exactly 0, lse -inf and no dQ."""
    torch.manual_seed(13)
    q, k, v = make_inputs(1, 2, 1, 70, 20, 32, torch.float16)
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True, algorithm="fa1",
                               fwd_tiles=TileConfig(16, 16, 4, 1), bwd_tiles=TileConfig(16, 16, 4, 1))
    dq, = torch.autograd.grad(out, q, torch.randn_like(out))
    blind = slice(0, 50)
    assert torch.equal(out[:, :, blind], torch.zeros_like(out[:, :, blind]))
    assert torch.isneginf(lse[:, :, blind]).all()
    assert torch.equal(dq[:, :, blind], torch.zeros_like(dq[:, :, blind]))
    assert torch.isfinite(lse[:, :, 50:]).all()


def test_fa1_custom_softmax_scale(poisoned_allocations, fa1_launches):
    torch.manual_seed(14)
    q, k, v = make_inputs(1, 2, 2, 50, 61, 32, torch.float16)
    check_against_reference(q, k, v, True, softmax_scale=0.37, algorithm="fa1")
    check_against_reference(q, k, v, False, softmax_scale=-0.3, algorithm="fa1")


def test_fa1_strided_inputs(poisoned_allocations, fa1_launches):
    """(B, N, H, D) tensors transposed, a sliced (non-dense) q, and an expanded gradient."""
    torch.manual_seed(3)
    base = torch.randn(2, 57, 4, 2 * 24, device=DEVICE, dtype=torch.float16)
    q = base[..., ::2].transpose(1, 2).detach().requires_grad_()
    k = torch.randn(2, 71, 2, 24, device=DEVICE, dtype=torch.float16).transpose(1, 2).detach().requires_grad_()
    v = torch.randn(2, 71, 2, 24, device=DEVICE, dtype=torch.float16).transpose(1, 2).detach().requires_grad_()
    assert not q.is_contiguous() and not k.is_contiguous()
    check_against_reference(q, k, v, causal=True, algorithm="fa1")

    out = flash_attention(q, k, v, causal=True, algorithm="fa1")
    out.sum().backward()  # d_out arrives as an expanded tensor with zero strides
    ref = attention_reference(q, k, v, causal=True)[0]
    ref_grad = torch.autograd.grad(ref.sum(), q)[0]
    low_grad = torch.autograd.grad(attention_reference(q, k, v, causal=True, upcast=False)[0].sum(), q)[0]
    assert_close_to_reference("dq (expanded d_out)", q.grad, low_grad, ref_grad)


def test_fa1_default_tiles_cover_every_head_dim():
    for head_dim in range(1, 257):
        for pass_ in ("fwd", "bwd"):
            tiles = fa1_default_tiles(head_dim, pass_)
            assert isinstance(tiles, TileConfig)
    assert {padded_head_dim(d) for d in range(1, 257)} == {16, 32, 64, 128, 256}
    with pytest.raises(ValueError):
        fa1_default_tiles(257, "fwd")
    with pytest.raises(ValueError):
        fa1_default_tiles(64, "both")


@pytest.mark.parametrize("algorithm", ["fa3", "FA1", "", None, 1])
def test_unknown_algorithm_is_refused(algorithm):
    x = torch.randn(1, 1, 8, 16, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="algorithm must be one of 'fa2', 'fa1'"):
        flash_attention(x, x, x, algorithm=algorithm)


@pytest.mark.parametrize("switch", [dict(recompute=False), dict(deferred_rescale=False), dict(seq_parallel=False),
                                    dict(skip_masked_tiles=False), dict(atomic_dq=True)],
                         ids=lambda s: next(iter(s)))
def test_fa2_only_switches_are_refused_with_fa1(switch, fa1_launches):
    x = torch.randn(1, 1, 8, 16, device=DEVICE, dtype=torch.float16)
    name = next(iter(switch))
    with pytest.raises(ValueError, match=f"algorithm='fa1' cannot be combined with {name}="):
        flash_attention(x, x, x, causal=True, algorithm="fa1", **switch)
    assert fa1_launches == {"fwd": [], "bwd": []}


def test_fa1_torch_compile_fullgraph(fa1_launches):
    """A model calling flash_attention(..., algorithm="fa1") compiles with fullgraph=True."""
    torch._dynamo.reset()
    torch.manual_seed(8)
    proj = torch.nn.Linear(32, 32, device=DEVICE, dtype=torch.float16)

    def block(x):  # x: (B, H, N, D)
        y = proj(x)
        return flash_attention(y, y, y, causal=True, algorithm="fa1").float().square().mean()

    x = torch.randn(1, 2, 40, 32, device=DEVICE, dtype=torch.float16, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    loss = compiled(x)
    loss.backward()
    assert len(fa1_launches["fwd"]) == 1 and len(fa1_launches["bwd"]) == 1
    grad_compiled = x.grad.clone()
    x.grad = None
    eager = block(x)
    eager.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(grad_compiled, x.grad, rtol=1e-2, atol=1e-3)


@pytest.mark.skipif(not HAS_CUDA, reason="the interpreter has no shared-memory limit")
@pytest.mark.parametrize("head_dim", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_fa1_default_tiles_fit_the_gpu(head_dim, dtype):
    """The FA1 defaults are meant to fit as they are: a step down (TileFallbackWarning) fails here."""
    torch.manual_seed(15)
    q, k, v = make_inputs(1, 2, 2, 256, 256, head_dim, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TileFallbackWarning)
        for causal in (False, True):
            out = flash_attention(q, k, v, causal=causal, algorithm="fa1")
            torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
