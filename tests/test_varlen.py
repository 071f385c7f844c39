"""Packed (variable-length) batches in the kernels: one launch per pass for the whole batch.

flash_attn_varlen_func and its packed variants hand the batch to the kernels once: every
program reads its sequence's first token and length from cu_seqlens_q / cu_seqlens_k. Checked
here, sequence by sequence, against the float64 reference (kernels/reference.py) with the rule
of tests/test_kernels.py (our max error at most twice PyTorch's in the same precision, plus a
small floor): the output, the log-sum-exp and all three gradients, with fresh random lengths
(1, odd, 0, Nq != Nk per sequence), grouped- and multi-query heads, causal, sliding window,
softcap, per-sequence ALiBi and dropout (masks from S_dmask, independent per sequence). A
launch counter pins the one-launch-per-pass property, so a loop over sequences cannot return
unnoticed.

Without a GPU this runs on the CPU through Triton's interpreter (small shapes, small tiles so
several blocks per sequence run); with one it adds larger cases.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from kernels import TileConfig, _backward, _forward, attention_reference, flash_attention, flash_attn_varlen_func
from kernels import flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func
from test_kernels import (DEVICE, HAS_CUDA, assert_close_to_reference,  # noqa: F401 (a fixture)
                          poisoned_allocations)


SMALL_TILES = TileConfig(16, 32, 4, 1)  # several blocks per sequence, every loop segment


def _seed(*key):
    torch.manual_seed(zlib.crc32(repr(key).encode()))


def _offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


def _lengths(batch, low, high, *always):
    """`batch` random lengths in [low, high], with the given ones placed at random positions."""
    lengths = torch.randint(low, high + 1, (batch,)).tolist()
    for i, n in zip(torch.randperm(batch).tolist(), always):
        lengths[i] = n
    return lengths


def _draw(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_()


def _run_with_tiles(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, causal, tiles, **features):
    """flash_attn_varlen_func's launch through flash_attention, with explicit tiles."""
    packed = lambda t: t.unsqueeze(0).transpose(1, 2)
    out, lse, probs = flash_attention(packed(q), packed(k), packed(v), causal=causal, return_lse=True,
                                      return_probs=True, dropout_p=dropout_p, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                      max_seqlen_q=max_q, max_seqlen_k=max_k, fwd_tiles=tiles, bwd_tiles=tiles,
                                      **features)
    return out[0].transpose(0, 1), lse[0].masked_fill(torch.isneginf(lse[0]), float("inf")), probs


def check_varlen(lengths_q, lengths_k, h, h_kv, d, causal=False, dropout_p=0.0, dtype=torch.float16, tiles=None,
                 **features):
    """Ours vs the float64 reference, sequence by sequence: out, lse, dq, dk, dv. Through
    flash_attn_varlen_func (default tiles), or flash_attention's packed batch with `tiles`.

    The error rule is flash-attn's, over the whole packed tensor of each quantity: ours within 2x
    of PyTorch's own low-precision error (plus a small floor). Per sequence it would be stricter
    than flash-attn's: a row that sees exactly one key has a gradient dq of exactly 0, which
    PyTorch's softmax backward reproduces, while FlashAttention-2's dS = P (dP - rowsum(dO * O))
    leaves the rounding of O in fp16/bf16 (flash-attn's kernels do the same)."""
    cu_q, cu_k = _offsets(lengths_q), _offsets(lengths_k)
    q, k, v = _draw(sum(lengths_q), h, d, dtype=dtype), *(_draw(sum(lengths_k), h_kv, d, dtype=dtype) for _ in "kv")
    args = (q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), dropout_p)
    if tiles is None:
        out, lse, s_dmask = flash_attn_varlen_func(*args, causal=causal, return_attn_probs=True, **features)
    else:
        out, lse, s_dmask = _run_with_tiles(*args, causal, tiles, **features)
    assert out.shape == q.shape and lse.shape == (h, q.shape[0]) and lse.dtype == torch.float32
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    if dropout_p:
        assert s_dmask.shape == (len(lengths_q), h, max(lengths_q), max(lengths_k))
    masks = []
    compared = {name: [] for name in ("out", "lse", "dq", "dk", "dv")}
    slopes = features.get("alibi_slopes")
    for i in range(len(lengths_q)):
        q0, q1, k0, k1 = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
        if k1 == k0:  # keys and queries both empty (queries without keys are refused)
            continue
        seq = lambda t, a, b: t[a:b].detach().transpose(0, 1).unsqueeze(0).requires_grad_()
        sq, sk, sv = seq(q, q0, q1), seq(k, k0, k1), seq(v, k0, k1)
        ref_kw = dict(features)
        if slopes is not None and slopes.dim() == 2:
            ref_kw["alibi_slopes"] = slopes[i]
        if dropout_p:
            mask = s_dmask[i, :, :q1 - q0, :k1 - k0] >= 0
            masks.append(mask)
            ref_kw.update(dropout_mask=mask[None], dropout_p=dropout_p)
            # nothing of the sequence leaks outside its block of S_dmask
            assert (s_dmask[i, :, q1 - q0:] == 0).all() and (s_dmask[i, :, :, k1 - k0:] == 0).all()
        sd = d_out[q0:q1].transpose(0, 1).unsqueeze(0)
        ref_out, ref_lse = attention_reference(sq, sk, sv, causal=causal, upcast=True, **ref_kw)
        ref_g = torch.autograd.grad(ref_out, (sq, sk, sv), sd.double())
        low_out, low_lse = attention_reference(sq, sk, sv, causal=causal, upcast=False, **ref_kw)
        low_g = torch.autograd.grad(low_out, (sq, sk, sv), sd)
        # flash-attn's convention for rows that see no key: lse = +inf
        ref_lse, low_lse = (x.masked_fill(torch.isneginf(x), float("inf")) for x in (ref_lse, low_lse))
        compared["out"].append((out[q0:q1].transpose(0, 1)[None], low_out, ref_out))
        compared["lse"].append((lse[:, q0:q1][None], low_lse, ref_lse))
        ours_g = (grads[0][q0:q1], grads[1][k0:k1], grads[2][k0:k1])
        for name, ours, low, ref in zip(("dq", "dk", "dv"), ours_g, low_g, ref_g):
            assert not torch.isnan(ours).any(), f"{name}[{i}] has NaN"
            compared[name].append((ours.transpose(0, 1)[None], low, ref.nan_to_num(0.0)))
    for name, parts in compared.items():  # the sequences side by side along the token axis
        ours, low, ref = (torch.cat([part[j].detach().to(torch.float64) for part in parts], dim=2) for j in range(3))
        assert_close_to_reference(name, ours, low, ref)
    return out, lse, s_dmask, masks


# name, (batch, max length), heads, kv heads, head dim, causal, features. Lengths are drawn
# fresh per case (seeded by its name), with 1, an odd length and an empty sequence included.
CASES = [
    ("plain-gqa", (5, 40), 4, 2, 40, False, {}),
    ("causal-mqa", (5, 40), 4, 1, 32, True, {}),
    ("window", (4, 45), 2, 2, 24, False, dict(window_size=(6, 3))),
    ("window-causal", (4, 45), 2, 1, 40, True, dict(window_size=(9, -1))),
    ("softcap-causal", (4, 40), 2, 2, 40, True, dict(softcap=3.0)),
    ("alibi-batch", (4, 40), 4, 2, 40, False, dict(alibi="batch")),
    ("alibi-heads-causal", (4, 40), 2, 2, 16, True, dict(alibi="heads")),
    ("all", (4, 45), 4, 2, 40, True, dict(window_size=(12, -1), softcap=2.5, alibi="batch")),
    ("default-tiles", (5, 40), 4, 2, 40, True, dict(tiles=None, window_size=(10, 4), alibi="batch")),
    ("head-dim-chunks", (4, 40), 4, 2, 176, True, dict(window_size=(12, -1), softcap=2.5)),  # 128 + 64, masked
]


@pytest.mark.parametrize("name,size,h,h_kv,d,causal,features", CASES, ids=[c[0] for c in CASES])
def test_varlen_matches_reference(name, size, h, h_kv, d, causal, features, poisoned_allocations):
    _seed("varlen", name)
    batch, longest = size
    lengths_q = _lengths(batch, 2, longest, 1, 0, 2 * (longest // 2) - 1)
    lengths_k = [0 if n == 0 else m for n, m in zip(lengths_q, _lengths(batch, 1, longest, 1))]
    features = dict(dict(tiles=SMALL_TILES), **features)
    alibi = features.pop("alibi", None)
    if alibi:
        features["alibi_slopes"] = (torch.rand((batch, h) if alibi == "batch" else (h,), device=DEVICE) * 0.5
                                    + 0.05)
    check_varlen(lengths_q, lengths_k, h, h_kv, d, causal, **features)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_dropout_matches_reference_with_independent_masks(causal, poisoned_allocations):
    """Dropout: the reference given the masks of S_dmask; two sequences of equal length and
    equal content still get different masks."""
    _seed("varlen dropout", causal)
    lengths_q, lengths_k = [23, 1, 23, 0, 17], [30, 9, 30, 0, 41]
    *_, masks = check_varlen(lengths_q, lengths_k, 2, 1, 32, causal, dropout_p=0.25, window_size=(-1, -1),
                             softcap=0.0)
    _seed("varlen dropout, small tiles", causal)
    check_varlen(lengths_q, lengths_k, 4, 2, 32, causal, dropout_p=0.25, tiles=SMALL_TILES, window_size=(7, 2))
    assert not torch.equal(masks[0], masks[2]), "sequences share a dropout mask"
    kept = torch.cat([m.flatten() for m in masks]).float().mean().item()
    assert 0.6 < kept < 0.9


def test_varlen_keys_without_queries_get_zero_gradients():
    """A sequence with keys but no queries: its dk, dv are 0 (written, not left uninitialised)."""
    _seed("keys without queries")
    lengths_q, lengths_k = [9, 0, 14], [12, 20, 7]
    cu_q, cu_k = _offsets(lengths_q), _offsets(lengths_k)
    q, k, v = _draw(23, 2, 16), _draw(39, 2, 16), _draw(39, 2, 16)
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 14, 20, causal=True)
    dq, dk, dv = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    assert (dk[12:32] == 0).all() and (dv[12:32] == 0).all()
    assert dk[:12].abs().sum() > 0 and dv[32:].abs().sum() > 0


def test_varlen_packed_variants():
    """qkvpacked and kvpacked reach the same launch as flash_attn_varlen_func."""
    _seed("packed variants")
    lengths = [7, 1, 19, 0, 12]
    cu = _offsets(lengths)
    qkv = torch.randn(sum(lengths), 3, 2, 24, device=DEVICE, dtype=torch.float16)
    ref = flash_attn_varlen_func(*qkv.unbind(1), cu, cu, 19, 19, causal=True)
    assert torch.equal(flash_attn_varlen_qkvpacked_func(qkv, cu, 19, causal=True), ref)
    assert torch.equal(flash_attn_varlen_kvpacked_func(qkv[:, 0], qkv[:, 1:], cu, cu, 19, 19, causal=True), ref)


def test_varlen_launches_once_per_pass(monkeypatch):
    """Eight sequences: one forward launch, and one launch of each backward kernel."""
    launches = {}

    def counting(name, kernel):
        run = kernel.run

        def wrapped(*args, **kwargs):
            launches[name] = launches.get(name, 0) + 1
            assert kwargs.get("VARLEN") is True, f"{name} ran without VARLEN"
            return run(*args, **kwargs)
        monkeypatch.setattr(kernel, "run", wrapped)

    for name, kernel in (("fwd", _forward._attn_fwd), ("delta", _backward._attn_bwd_delta),
                         ("dkdv", _backward._attn_bwd_dkdv), ("dq", _backward._attn_bwd_dq),
                         ("probs", _forward._attn_probs)):
        counting(name, kernel)
    _seed("launch count")
    lengths = [5, 1, 16, 0, 9, 3, 17, 2]
    cu = _offsets(lengths)
    q, k, v = (_draw(sum(lengths), 2, 16) for _ in "qkv")
    out, _, s_dmask = flash_attn_varlen_func(q, k, v, cu, cu, 17, 17, 0.1, causal=True, return_attn_probs=True)
    assert launches == {"fwd": 1, "probs": 1}
    out.float().sum().backward()
    assert launches == {"fwd": 1, "probs": 1, "delta": 1, "dkdv": 1, "dq": 1}
    packed = lambda t: t.unsqueeze(0).transpose(1, 2)
    out = flash_attention(packed(q), packed(k), packed(v), causal=True, atomic_dq=True, cu_seqlens_q=cu,
                          cu_seqlens_k=cu, max_seqlen_q=17, max_seqlen_k=17)
    out.float().sum().backward()  # dQ accumulated in the dK/dV kernel: no dQ launch
    assert launches == {"fwd": 2, "probs": 1, "delta": 2, "dkdv": 2, "dq": 1}


@pytest.mark.parametrize("switch", [dict(algorithm="fa1"), dict(recompute=False), dict(seq_parallel=False)],
                         ids=lambda s: next(iter(s)))
def test_varlen_refuses_the_switches_it_lacks(switch):
    lengths = [5, 9]
    cu = _offsets(lengths)
    q, k, v = (torch.randn(1, 2, 14, 16, device=DEVICE, dtype=torch.float16) for _ in "qkv")
    with pytest.raises(NotImplementedError, match="variable-length.*" + next(iter(switch))):
        flash_attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=9, max_seqlen_k=9, **switch)


def test_varlen_op_refuses_half_the_offsets():
    q, k, v = (torch.randn(1, 2, 14, 16, device=DEVICE, dtype=torch.float16) for _ in "qkv")
    with pytest.raises(ValueError, match="cu_seqlens"):
        flash_attention(q, k, v, cu_seqlens_q=_offsets([5, 9]), max_seqlen_q=9, max_seqlen_k=9)


@pytest.mark.skipif(not HAS_CUDA, reason="larger shapes need a GPU")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_varlen_large_on_gpu(causal, dtype):
    _seed("varlen large", causal, dtype)
    lengths_q = _lengths(24, 1, 700, 1, 0, 511, 512, 513)
    lengths_k = [0 if n == 0 else m for n, m in zip(lengths_q, _lengths(24, 1, 700, 1, 128))]
    check_varlen(lengths_q, lengths_k, 8, 2, 128, causal, dtype=dtype, window_size=(200, -1) if causal else (-1, -1))
    slopes = torch.rand(24, 4, device=DEVICE) * 0.1
    # flash-attn refuses softcap with dropout (as flash_attn_varlen_func does), so each goes with ALiBi apart
    check_varlen(lengths_q, lengths_k, 4, 4, 64, causal, dropout_p=0.1, dtype=dtype, alibi_slopes=slopes)
    check_varlen(lengths_q, lengths_k, 4, 4, 64, causal, dtype=dtype, softcap=20.0, alibi_slopes=slopes)


def test_varlen_through_torch_compile_fullgraph():
    """The packed batch travels through the ops' schemas (cu_seqlens as optional tensors): no
    graph break, same result as eager."""
    _seed("varlen compile")
    lengths = [7, 0, 19, 1]
    cu = _offsets(lengths)
    q, k, v = (_draw(1, 2, sum(lengths), 16) for _ in "qkv")

    def block(q, k, v):
        return flash_attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=19,
                               max_seqlen_k=19).float().square().mean()

    compiled = torch.compile(block, fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    loss = compiled(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    eager_loss = block(q, k, v)
    eager_grads = torch.autograd.grad(eager_loss, (q, k, v))
    assert torch.allclose(loss, eager_loss, rtol=1e-3, atol=1e-5)
    for a, b in zip(grads, eager_grads):
        assert torch.allclose(a, b, rtol=1e-2, atol=1e-3)
