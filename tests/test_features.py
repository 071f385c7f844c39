"""flash-attn 2.8's training features in the kernels: sliding window, softcap, ALiBi, dropout.

Each feature, alone and combined (with each other, causal, grouped-query heads, Nq != Nk, odd
lengths and head dims), is checked forward (output, log-sum-exp) and backward (dq, dk, dv)
against the float64 reference of kernels/reference.py with the rule of tests/test_kernels.py:
our max error is at most twice that of PyTorch's attention in the same precision, plus a small
floor. Dropout is checked against the reference given the mask rebuilt from the probabilities
the kernels report (flash-attn's S_dmask convention: dropped entries are negative), and its
keep rate, seeding and independence are checked on their own. Window tiles outside every
query's window are shown never to be read (NaN placed there does not reach the results).

Without a GPU this runs on the CPU through Triton's interpreter (small shapes, small tiles so
that every loop segment runs); with one it adds larger shapes and the default tiles.
"""

from __future__ import annotations

import zlib

import pytest
import torch
import triton
import triton.language as tl

from kernels import (TileConfig, attention_reference, flash_attention, flash_attn_func, flash_attn_varlen_func)
from kernels._features import _dropout_keep
from test_kernels import (DEVICE, HAS_CUDA, assert_close_to_reference, make_inputs,  # noqa: F401 (a fixture)
                          poisoned_allocations)

SMALL_TILES = dict(fwd_tiles=TileConfig(16, 32, 4, 1), bwd_tiles=TileConfig(16, 32, 4, 1))


def _seed(*key):
    torch.manual_seed(zlib.crc32(repr(key).encode()))


def _slopes(*shape):
    return torch.rand(*shape, device=DEVICE, dtype=torch.float32) * 0.5 + 0.05


def check_features(q, k, v, causal=False, dropout_p=0.0, switches=None, **features):
    """Forward, lse and the three gradients of ours vs the float64 reference, with the features."""
    switches = switches or {}
    out, lse, probs = flash_attention(q, k, v, causal=causal, return_lse=True, return_probs=True,
                                      dropout_p=dropout_p, **features, **switches)
    assert probs.shape == (*q.shape[:3], k.shape[2]) and probs.dtype == torch.float32
    ref_kw = dict(features)
    if dropout_p > 0:
        ref_kw.update(dropout_mask=probs >= 0, dropout_p=dropout_p)
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    ref_out, ref_lse = attention_reference(q, k, v, causal=causal, upcast=True, **ref_kw)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), d_out.double())
    low_out, low_lse = attention_reference(q, k, v, causal=causal, upcast=False, **ref_kw)
    low_grads = torch.autograd.grad(low_out, (q, k, v), d_out)

    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == q.shape[:3]
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert_close_to_reference("out", out, low_out, ref_out)
    assert_close_to_reference("lse", lse, low_lse, ref_lse)
    # The reported probabilities are those of the reference (undropped softmax), up to sign.
    ref_probs = torch.softmax(_ref_scores(q, k, causal, features), dim=-1).nan_to_num(0.0)
    assert (probs.abs() - ref_probs).abs().max().item() < 2e-3
    for name, ours, low, ref in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
        assert not torch.isnan(ours).any(), f"{name} has NaN"
        assert_close_to_reference(name, ours, low, ref)
    return out, lse, probs


def _ref_scores(q, k, causal, features):
    from kernels.reference import _scores
    return _scores(q.double(), k.double(), causal, None, features.get("window_size", (-1, -1)),
                   features.get("softcap", 0.0), features.get("alibi_slopes"))


# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim), causal, features
CASES = [
    ("window", (1, 2, 1, 45, 70, 40), False, dict(window_size=(8, 3))),
    ("window-left-only", (1, 2, 2, 70, 45, 72), False, dict(window_size=(10, -1))),
    ("window-right-only", (2, 2, 2, 37, 53, 40), False, dict(window_size=(-1, 4))),
    ("window-diagonal", (1, 2, 2, 33, 33, 24), False, dict(window_size=(0, 0))),
    ("window-causal", (1, 4, 2, 45, 70, 40), True, dict(window_size=(12, -1))),
    ("window-causal-right-ignored", (1, 2, 2, 50, 50, 40), True, dict(window_size=(7, 9))),
    ("window-rows-without-keys", (1, 2, 1, 70, 20, 40), False, dict(window_size=(4, 2))),
    ("softcap", (1, 2, 2, 45, 70, 96), False, dict(softcap=2.0)),
    ("softcap-causal", (1, 4, 1, 70, 45, 40), True, dict(softcap=5.0)),
    ("alibi-heads", (2, 2, 2, 45, 70, 40), False, dict(alibi_slopes="h")),
    ("alibi-batch-heads-causal", (2, 2, 1, 70, 45, 40), True, dict(alibi_slopes="bh")),
    ("window-softcap-alibi", (2, 4, 2, 45, 70, 72), False, dict(window_size=(20, 10), softcap=3.0,
                                                               alibi_slopes="bh")),
    ("window-softcap-alibi-causal", (1, 2, 2, 61, 61, 40), True, dict(window_size=(16, -1), softcap=3.0,
                                                                     alibi_slopes="h")),
    ("dropout", (1, 2, 2, 45, 70, 40), False, dict(dropout_p=0.2)),
    ("dropout-gqa", (1, 4, 1, 45, 45, 40), False, dict(dropout_p=0.3)),
    ("dropout-window", (1, 2, 1, 70, 45, 40), False, dict(dropout_p=0.2, window_size=(9, 4))),
    ("dropout-causal-softcap-alibi", (2, 2, 2, 45, 70, 96), True, dict(dropout_p=0.15, softcap=4.0,
                                                                      alibi_slopes="bh")),
    # head dims the forward computes in two column chunks (kernels.tiles.head_dim_chunks)
    ("chunks-window-softcap-alibi", (1, 2, 1, 45, 70, 176), True, dict(window_size=(20, -1), softcap=3.0,
                                                                      alibi_slopes="h")),
    ("chunks-dropout-window", (1, 2, 2, 37, 53, 192), False, dict(dropout_p=0.2, window_size=(9, 4))),
]
if HAS_CUDA:
    CASES += [
        ("gpu-window-causal", (2, 8, 2, 1000, 1000, 64), True, dict(window_size=(256, -1))),
        ("gpu-all", (1, 4, 4, 777, 1537, 128), False, dict(window_size=(300, 200), softcap=30.0,
                                                          alibi_slopes="bh", dropout_p=0.1)),
        ("gpu-dropout", (2, 4, 1, 513, 1031, 96), True, dict(dropout_p=0.2)),
    ]


def _resolve(features, batch, heads):
    features = dict(features)
    if features.get("alibi_slopes") == "h":
        features["alibi_slopes"] = _slopes(heads)
    elif features.get("alibi_slopes") == "bh":
        features["alibi_slopes"] = _slopes(batch, heads)
    return features


# On the interpreter fp16 runs with the default tiles and bf16 with the small ones; a GPU runs all four.
PRECISIONS = [pytest.param(torch.float16, "default", id="fp16-default"),
              pytest.param(torch.bfloat16, "small", id="bf16-small")]
if HAS_CUDA:
    PRECISIONS += [pytest.param(torch.float16, "small", id="fp16-small"),
                   pytest.param(torch.bfloat16, "default", id="bf16-default")]


@pytest.mark.parametrize("dtype,tiles", PRECISIONS)
@pytest.mark.parametrize("name,shape,causal,features", CASES, ids=[c[0] for c in CASES])
def test_feature_matches_reference(name, shape, causal, features, dtype, tiles, poisoned_allocations):
    _seed(name, dtype, tiles)
    b, h, h_kv, n_q, n_k, d = shape
    q, k, v = make_inputs(b, h, h_kv, n_q, n_k, d, dtype)
    features = _resolve(features, b, h)
    dropout_p = features.pop("dropout_p", 0.0)
    check_features(q, k, v, causal, dropout_p, switches=SMALL_TILES if tiles == "small" else None, **features)


def _assert_same(a, b, what):
    """Bitwise on the interpreter; on a GPU the compiler may contract a multiply and a subtract
    into an FMA in the unmasked loop but not in the masked one, so allow a last-bit difference
    there (a dropped key changes results by about its probability, over 1e-2 here)."""
    if HAS_CUDA:
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3, msg=what)
    else:
        assert torch.equal(a, b), what


# Nk - Nq = +-16: each bound of the skipped and the unmasked ranges falls on a tile edge for
# one of left, right = 0, 1, 14, 15 (mod 16); Nk is whole tiles, so the unmasked range runs.
@pytest.mark.parametrize("left", [-1, 0, 1, 14, 15])
@pytest.mark.parametrize("n_q,n_k", [(48, 64), (80, 64)])
def test_window_bounds_at_every_tile_offset(n_q, n_k, left):
    """Windows whose edges fall on, just before and just after tile boundaries (16 x 16 tiles).

    Output and lse go against the reference; the gradients against the same kernels with
    skip_masked_tiles=False, which visit every tile and mask it: skipped tiles only ever
    add exact zeros, so the two agree (bitwise on the interpreter) unless a bound drops a
    visible tile or leaves a partly visible one unmasked. (Against
    the reference, rows that see one or two keys make dq sensitive to the fp16 rounding of O
    in delta = rowsum(dO * O), in flash-attn as here; test_feature_matches_reference covers it.)
    """
    _seed("sweep", n_q, n_k, left)
    tiles = dict(fwd_tiles=TileConfig(16, 16, 4, 1), bwd_tiles=TileConfig(16, 16, 4, 1))
    q, k, v = make_inputs(1, 1, 1, n_q, n_k, 16, torch.float16)
    for window in [(left, right) for right in (-1, 0, 1, 14, 15) if (left, right) != (-1, -1)]:
        out, lse = flash_attention(q, k, v, window_size=window, return_lse=True, **tiles)
        d_out = torch.randn_like(out)
        ref_out, ref_lse = attention_reference(q, k, v, window_size=window)
        low_out, low_lse = attention_reference(q, k, v, window_size=window, upcast=False)
        assert_close_to_reference(f"out {window}", out, low_out, ref_out)
        assert_close_to_reference(f"lse {window}", lse, low_lse, ref_lse)
        grads = torch.autograd.grad(out, (q, k, v), d_out)
        full = flash_attention(q, k, v, window_size=window, skip_masked_tiles=False, **tiles)
        for name, a, b in zip(("out", "dq", "dk", "dv"), (out, *grads),
                              (full, *torch.autograd.grad(full, (q, k, v), d_out))):
            _assert_same(a, b, f"{name} {window}")


SWITCHES = [dict(seq_parallel=False), dict(deferred_rescale=False), dict(skip_masked_tiles=False),
            dict(atomic_dq=True)]


@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_features_with_ablation_switches(switches, poisoned_allocations):
    _seed("switches", switches)
    q, k, v = make_inputs(2, 2, 1, 45, 70, 40, torch.float16)
    check_features(q, k, v, False, 0.2, switches=dict(SMALL_TILES, **switches), window_size=(10, 5), softcap=3.0,
                   alibi_slopes=_slopes(2, 2))


def test_rows_without_keys_give_zero_and_minus_inf():
    """Window entirely before the first key: out 0, lse -inf (flash_attention's convention)."""
    _seed("empty rows")
    q, k, v = make_inputs(1, 2, 2, 40, 10, 32, torch.float16)
    out, lse = flash_attention(q, k, v, window_size=(2, 1), return_lse=True)
    empty = torch.arange(40) + (10 - 40) + 1 < 0  # i + Nk - Nq + right < 0
    assert empty.sum() == 29
    assert (out[:, :, empty] == 0).all() and torch.isneginf(lse[:, :, empty]).all()
    assert torch.isfinite(lse[:, :, ~empty]).all()


def test_window_never_reads_keys_outside_every_window():
    """NaN in keys and values no query can see changes nothing: those tiles are skipped.

    Queries i see keys [i + 112, i + 128] (Nq 32, Nk 160, window (16, 0)); keys below 96 fill
    whole tiles outside every window. With skip_masked_tiles=False the same NaN reaches the
    results, which shows the check can fail.
    """
    _seed("skip")
    q, k, v = make_inputs(1, 2, 1, 32, 160, 32, torch.float16)
    tiles = dict(fwd_tiles=TileConfig(16, 32, 4, 1), bwd_tiles=TileConfig(16, 32, 4, 1))

    def run(k, v, **switches):
        out = flash_attention(q, k, v, window_size=(16, 0), **tiles, **switches)
        return (out, *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))

    clean = run(k, v)
    k_bad, v_bad = k.detach().clone(), v.detach().clone()
    k_bad[:, :, :96], v_bad[:, :, :96] = float("nan"), float("nan")
    k_bad.requires_grad_()
    v_bad.requires_grad_()
    dirty = run(k_bad, v_bad)
    for name, a, b in zip(("out", "dq", "dk", "dv"), clean, dirty):
        assert torch.equal(a, b) or name in ("dk", "dv"), name
    for a, b in zip(clean[2:], dirty[2:]):  # dk, dv: equal where keys are seen, zero where skipped
        assert torch.equal(a[:, :, 96:], b[:, :, 96:]) and (b[:, :, :96] == 0).all()
    assert torch.isnan(run(k_bad, v_bad, skip_masked_tiles=False)[0]).any()


# --------------------------------------------------------------------------------------------
# Dropout: the mask itself.
# --------------------------------------------------------------------------------------------

def _probs(q, k, v, p, **kw):
    return flash_attention(q, k, v, dropout_p=p, return_probs=True, **kw)


def test_dropout_keep_rate_is_binomial():
    _seed("keep rate")
    q, k, v = make_inputs(2, 2, 2, 64, 96, 32, torch.float16)
    for p in (0.1, 0.5):
        _, probs = _probs(q, k, v, p)
        n = probs.numel()
        kept = (probs > 0).double().mean().item()  # undropped softmax entries are > 0 here
        assert (probs != 0).all()
        sd = ((1 - p) * p / n) ** 0.5
        assert abs(kept - (1 - p)) < 5 * sd, (p, kept)
        # independent across heads and rows: no head or row repeats another's mask
        mask = probs > 0
        assert not torch.equal(mask[0, 0], mask[0, 1]) and not torch.equal(mask[0, 0], mask[1, 0])
        assert not torch.equal(mask[0, 0, 0], mask[0, 0, 1])


def test_dropout_same_seed_same_mask_other_seed_other_mask():
    _seed("seeds")
    q, k, v = make_inputs(1, 2, 2, 33, 47, 32, torch.float16)
    torch.manual_seed(123)
    out1, probs1 = _probs(q, k, v, 0.3)
    torch.manual_seed(123)
    out2, probs2 = _probs(q, k, v, 0.3)
    torch.manual_seed(124)
    out3, probs3 = _probs(q, k, v, 0.3)
    assert torch.equal(probs1 >= 0, probs2 >= 0) and torch.equal(out1, out2)
    assert not torch.equal(probs1 >= 0, probs3 >= 0) and not torch.equal(out1, out3)
    # consecutive calls draw fresh seeds
    _, probs4 = _probs(q, k, v, 0.3)
    assert not torch.equal(probs3 >= 0, probs4 >= 0)


def test_dropout_backward_is_deterministic_and_regenerates_the_mask():
    """Same seed twice: identical gradients (the backward rebuilds the forward's mask)."""
    _seed("dropout bwd")
    q, k, v = make_inputs(1, 2, 1, 40, 40, 32, torch.float16)
    results = []
    for _ in range(2):
        torch.manual_seed(7)
        out = flash_attention(q, k, v, dropout_p=0.25)
        results.append(torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_no_dropout_leaves_the_mask_positive():
    _seed("no dropout")
    q, k, v = make_inputs(1, 1, 1, 20, 30, 16, torch.float16)
    _, probs = flash_attention(q, k, v, return_probs=True)
    assert (probs > 0).all()
    assert torch.allclose(probs.sum(-1), torch.ones(1, 1, 20, device=probs.device), atol=1e-5)



@triton.jit
def _keep_tiles(Keep, KeepT, Ref, seed, off_hz, N_Q, N_K, dropout_p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The mask of one (BLOCK_M x BLOCK_N) tile three ways: _dropout_keep on a (queries x keys)
    tile, on a transposed (keys x queries) tile, and one Philox per element selecting 16-bit half
    j % 2 of output (j % 8) // 2 of counter (j // 8, i, off_hz, 0), the documented mapping."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    i, j = offs_m[:, None], offs_n[None, :]
    where = i * N_K + j
    tl.store(Keep + where, _dropout_keep(seed, off_hz, i, j, dropout_p).to(tl.int8))
    keep_t = _dropout_keep(seed, off_hz, offs_m[None, :], offs_n[:, None], dropout_p)
    tl.store(KeepT + offs_m[None, :] * N_K + offs_n[:, None], keep_t.to(tl.int8))
    zero = (i * 0 + j * 0).to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, (j // 8 + zero).to(tl.uint32), (i + zero).to(tl.uint32), zero + off_hz, zero)
    out = (j % 8) // 2 + zero
    r = tl.where(out == 0, r0, tl.where(out == 1, r1, tl.where(out == 2, r2, r3)))
    half = tl.where(j % 2 + zero == 0, r & 0xFFFF, r >> 16)
    tl.store(Ref + where, (half.to(tl.float32) >= dropout_p * 65536.0).to(tl.int8))


def _keep_mask(n_q, n_k, block_m, block_n, seed, off_hz, p):
    keep, keep_t, ref = (torch.empty(n_q, n_k, dtype=torch.int8, device=DEVICE) for _ in range(3))
    _keep_tiles[(n_q // block_m, n_k // block_n)](keep, keep_t, ref, seed, off_hz, n_q, n_k, p,
                                                  BLOCK_M=block_m, BLOCK_N=block_n)
    return keep, keep_t, ref


def test_dropout_mask_is_one_function_of_row_and_column_for_every_tile_shape():
    """Each (row, column) keeps the same decision whatever the tile shape and orientation, and it
    is 16-bit half j % 2 of output (j % 8) // 2 of the Philox counter (j // 8, i, batch x head, 0)."""
    seed, off_hz, p = 987654321, 5, 0.3
    masks = []
    for block_m, block_n in [(16, 16), (16, 32), (32, 64), (64, 16)]:
        keep, keep_t, ref = _keep_mask(64, 128, block_m, block_n, seed, off_hz, p)
        assert torch.equal(keep, ref) and torch.equal(keep_t, ref), (block_m, block_n)
        masks.append(keep)
    assert all(torch.equal(m, masks[0]) for m in masks)
    assert not torch.equal(_keep_mask(64, 128, 16, 16, seed, off_hz + 1, p)[0], masks[0])


def test_dropout_neighbouring_columns_are_independent():
    """Columns j % 8 == 0..7 come from the eight 16-bit halves of one Philox call: each keeps 1 - p
    of its entries, and neighbours (same call or across calls) agree as often as independent draws."""
    n_q, n_k = 128, 256
    for p in (0.2, 0.5):
        keep = _keep_mask(n_q, n_k, 32, 64, 24680, 3, p)[0].bool()
        for r in range(8):
            col = keep[:, r::8].double()
            sd = ((1 - p) * p / col.numel()) ** 0.5
            assert abs(col.mean().item() - (1 - p)) < 5 * sd, (p, r, col.mean().item())
        agree = p * p + (1 - p) * (1 - p)
        for shift in range(8):  # pairs (j, j + 1) with j % 8 == shift; shift 7 crosses calls
            same = (keep[:, shift:n_k - 1:8] == keep[:, shift + 1::8]).double()
            sd = (agree * (1 - agree) / same.numel()) ** 0.5
            assert abs(same.mean().item() - agree) < 5 * sd, (p, shift, same.mean().item())
        # and no pair of the eight halves repeats another
        groups = keep.view(n_q, n_k // 8, 8)
        for a in range(8):
            for b in range(a + 1, 8):
                assert not torch.equal(groups[..., a], groups[..., b])


@pytest.mark.parametrize("fwd, bwd", [(TileConfig(16, 32, 4, 1), TileConfig(32, 16, 4, 1)),
                                      (TileConfig(32, 64, 4, 1), TileConfig(16, 16, 4, 1)),
                                      (None, TileConfig(16, 64, 4, 1))],
                         ids=["16x32-vs-32x16", "32x64-vs-16x16", "default-vs-16x64"])
def test_dropout_mask_does_not_depend_on_the_tiles(fwd, bwd, poisoned_allocations):
    """Forward and backward with different tiles (from each other and across calls) still use one
    mask: same output and probabilities as with the small tiles, gradients match the reference
    given the mask the probabilities report."""
    _seed("dropout tiles")
    q, k, v = make_inputs(1, 2, 1, 70, 96, 32, torch.float16)
    torch.manual_seed(11)
    base_out, base_probs = _probs(q, k, v, 0.25, **SMALL_TILES)
    torch.manual_seed(11)
    out, _, probs = check_features(q, k, v, dropout_p=0.25, switches=dict(fwd_tiles=fwd, bwd_tiles=bwd))
    assert torch.equal(probs >= 0, base_probs >= 0)
    assert (out.float() - base_out.float()).abs().max().item() < 2e-3


# --------------------------------------------------------------------------------------------
# Refusals.
# --------------------------------------------------------------------------------------------

BAD = [
    (dict(window_size=(-2, 0)), ValueError, "window_size"),
    (dict(window_size=(3,)), ValueError, "window_size"),
    (dict(softcap=-1.0), ValueError, "softcap"),
    (dict(dropout_p=1.0), ValueError, "dropout_p"),
    (dict(alibi_slopes=torch.ones(3)), ValueError, "alibi_slopes must have shape"),
    (dict(alibi_slopes=torch.ones(2, dtype=torch.float16)), ValueError, "float32"),
    (dict(softcap=1.0, algorithm="fa1"), NotImplementedError, "softcap"),
    (dict(window_size=(4, 0), recompute=False), NotImplementedError, "window_size"),
    (dict(dropout_p=0.1, recompute=False), NotImplementedError, "dropout_p"),
]


@pytest.mark.parametrize("kw,error,message", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_feature_arguments_are_refused(kw, error, message):
    q, k, v = make_inputs(1, 2, 2, 8, 8, 16, torch.float16)
    if isinstance(kw.get("alibi_slopes"), torch.Tensor):
        kw = dict(kw, alibi_slopes=kw["alibi_slopes"].to(DEVICE))
    with pytest.raises(error, match=message):
        flash_attention(q, k, v, **kw)


# --------------------------------------------------------------------------------------------
# flash-attn's functions pass the features through (dense and varlen).
# --------------------------------------------------------------------------------------------

def test_flash_attn_func_features_and_s_dmask(poisoned_allocations):
    """(B, N, H, D) layout, every feature flash-attn combines with dropout (not softcap: it refuses that, and
    so does flash_attn_func; flash_attention runs it, tested above), S_dmask rebuilt into the dropout mask."""
    _seed("flash_attn_func")
    b, n_q, n_k, h, h_kv, d = 2, 37, 51, 4, 2, 40
    q = torch.randn(b, n_q, h, d, device=DEVICE, dtype=torch.float16).requires_grad_()
    k = torch.randn(b, n_k, h_kv, d, device=DEVICE, dtype=torch.float16).requires_grad_()
    v = torch.randn(b, n_k, h_kv, d, device=DEVICE, dtype=torch.float16).requires_grad_()
    slopes = _slopes(b, h)
    kw = dict(window_size=(12, 3), alibi_slopes=slopes)
    out, lse, s_dmask = flash_attn_func(q, k, v, 0.2, None, True, return_attn_probs=True, **kw)
    assert s_dmask.shape == (b, h, n_q, n_k)
    ref_kw = dict(kw, dropout_mask=s_dmask >= 0, dropout_p=0.2)
    bnhd = lambda t: t.transpose(1, 2)
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    ref_out, ref_lse = attention_reference(bnhd(q), bnhd(k), bnhd(v), causal=True, **ref_kw)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), bnhd(d_out).double())
    low_out, low_lse = attention_reference(bnhd(q), bnhd(k), bnhd(v), causal=True, upcast=False, **ref_kw)
    low_grads = torch.autograd.grad(low_out, (q, k, v), bnhd(d_out))
    assert_close_to_reference("out", bnhd(out), low_out, ref_out)
    assert_close_to_reference("lse", lse, low_lse, ref_lse)
    for name, ours, low, ref in zip(("dq", "dk", "dv"), grads, low_grads, ref_grads):
        assert_close_to_reference(name, ours, low, ref)


def test_flash_attn_func_lse_of_rows_without_keys_is_plus_inf():
    """flash-attn's kernel writes +inf for a row that sees no key; its functions here do too."""
    q, k, v = (torch.randn(1, n, 2, 16, device=DEVICE, dtype=torch.float16) for n in (12, 4, 4))
    out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert torch.isposinf(lse[:, :, :8]).all() and torch.isfinite(lse[:, :, 8:]).all()
    assert (out[:, :8] == 0).all()


def test_flash_attn_window_at_least_seqlen_k_means_unbounded():
    """flash-attn turns a window bound >= seqlen_k into -1 (unbounded), also for Nq > Nk."""
    _seed("window clamp")
    q = torch.randn(1, 40, 2, 16, device=DEVICE, dtype=torch.float16)
    k, v = (torch.randn(1, 20, 2, 16, device=DEVICE, dtype=torch.float16) for _ in range(2))
    assert torch.equal(flash_attn_func(q, k, v, window_size=(20, 25)), flash_attn_func(q, k, v))


@pytest.mark.parametrize("dropout_p", [0.0, 0.2], ids=["no-dropout", "dropout"])
def test_varlen_passes_features_per_sequence(dropout_p, poisoned_allocations):
    """Window, softcap (without dropout: flash-attn refuses the two together), per-sequence (B, H) ALiBi and
    dropout through the varlen function, checked sequence by sequence; each sequence gets its own dropout
    mask."""
    _seed("varlen", dropout_p)
    lengths_q, lengths_k, h, h_kv, d = [17, 5, 33], [29, 12, 20], 4, 2, 40
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    q = torch.randn(sum(lengths_q), h, d, device=DEVICE, dtype=torch.float16).requires_grad_()
    k = torch.randn(sum(lengths_k), h_kv, d, device=DEVICE, dtype=torch.float16).requires_grad_()
    v = torch.randn(sum(lengths_k), h_kv, d, device=DEVICE, dtype=torch.float16).requires_grad_()
    slopes = _slopes(3, h)
    kw = dict(window_size=(6, 2), softcap=0.0 if dropout_p else 3.0)
    out, lse, s_dmask = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), dropout_p,
                                               causal=False, alibi_slopes=slopes, return_attn_probs=True, **kw)
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    masks = []
    compared = {name: [] for name in ("out", "lse", "dq", "dk", "dv")}
    for i in range(3):
        q0, q1, k0, k1 = cu_q[i].item(), cu_q[i + 1].item(), cu_k[i].item(), cu_k[i + 1].item()
        seq = lambda t, a, b: t[a:b].detach().transpose(0, 1).unsqueeze(0).requires_grad_()
        sq, sk, sv = seq(q, q0, q1), seq(k, k0, k1), seq(v, k0, k1)
        ref_kw = dict(kw, alibi_slopes=slopes[i])
        if dropout_p:
            mask = s_dmask[i, :, :q1 - q0, :k1 - k0] >= 0
            masks.append(mask)
            ref_kw.update(dropout_mask=mask[None], dropout_p=dropout_p)
        sd = d_out[q0:q1].transpose(0, 1).unsqueeze(0)
        ref_out, ref_lse = attention_reference(sq, sk, sv, **ref_kw)
        ref_g = torch.autograd.grad(ref_out, (sq, sk, sv), sd.double())
        low_out, low_lse = attention_reference(sq, sk, sv, upcast=False, **ref_kw)
        low_g = torch.autograd.grad(low_out, (sq, sk, sv), sd)
        # flash-attn's convention for rows that see no key: lse = +inf
        ref_lse, low_lse = (x.masked_fill(torch.isneginf(x), float("inf")) for x in (ref_lse, low_lse))
        assert torch.isposinf(lse[:, q0:q1]).any() == torch.isposinf(ref_lse).any()
        compared["out"].append((out[q0:q1].transpose(0, 1)[None], low_out, ref_out))
        compared["lse"].append((lse[:, q0:q1][None], low_lse, ref_lse))
        ours_g = (grads[0][q0:q1], grads[1][k0:k1], grads[2][k0:k1])
        for name, ours, low, ref in zip(("dq", "dk", "dv"), ours_g, low_g, ref_g):
            compared[name].append((ours.transpose(0, 1)[None], low, ref))
    # flash-attn's rule over the whole packed tensor of each quantity (tests/test_varlen.py says why)
    for name, parts in compared.items():
        ours, low, ref = (torch.cat([part[j].detach().to(torch.float64) for part in parts], dim=2) for j in range(3))
        assert_close_to_reference(name, ours, low, ref)
    if dropout_p:
        assert s_dmask.shape == (3, h, max(lengths_q), max(lengths_k))
        n = min(lengths_q)
        assert not torch.equal(masks[0][:, :n, :12], masks[1][:, :n, :12]), "sequences share a dropout mask"
    else:
        assert s_dmask.shape == (0,)


def test_torch_compile_fullgraph_with_features():
    """The features travel through the ops' schemas: no graph break, same result as eager."""
    _seed("compile")
    q, k, v = make_inputs(1, 2, 1, 24, 40, 16, torch.float16)
    slopes = _slopes(2)

    def block(q, k, v):
        return flash_attention(q, k, v, window_size=(8, 2), softcap=3.0, alibi_slopes=slopes,
                               dropout_p=0.2).float().square().mean()

    compiled = torch.compile(block, fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    import torch._inductor.config as inductor_config
    with inductor_config.patch(fallback_random=True):  # inductor draws the seed as eager does
        torch.manual_seed(5)
        loss = compiled(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    torch.manual_seed(5)
    eager_loss = block(q, k, v)
    eager_grads = torch.autograd.grad(eager_loss, (q, k, v))
    assert torch.allclose(loss, eager_loss, rtol=1e-3, atol=1e-5)
    for a, b in zip(grads, eager_grads):
        assert torch.allclose(a, b, rtol=1e-2, atol=1e-3)
