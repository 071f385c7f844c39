"""flash-attn 2.8's public API over the engine: signatures, meaning, accuracy, refusals.

The expected signatures are copied from flash-attn's flash_attn/flash_attn_interface.py, 2.8
series: Dao-AILab/flash-attention at 005300258a22e5fc6be621063c3d5704e82b89d9, and the same six
in amdpilot-org/flash-attention at 0c2b39e8332d67b7ebf299d1acc5a6ecc19da912, a fork whose
flash_attn/__init__.py says 2.8.4; a drift on either side fails here. Accuracy follows tests/test_kernels.py: the max error against
the float64 reference is at most twice that of PyTorch's attention in the same precision, plus
a small floor, for the output, the log-sum-exp and the gradients of every input tensor (packed
ones included). Varlen results are compared sequence by sequence with the dense reference.
"""

import inspect
import math
import sys
import zlib
from typing import Optional, Union

import pytest
import torch

import kernels
from kernels import (attention_reference, flash_attention, flash_attn_func, flash_attn_kvpacked_func,
                     flash_attn_qkvpacked_func, flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                     flash_attn_varlen_qkvpacked_func)
from test_kernels import DEVICE, HAS_CUDA, assert_close_to_reference, poisoned_allocations  # noqa: F401 (a fixture)

# bf16 on the CPU relies on kernels/_interpreter.py rounding float32 -> bfloat16 to nearest, as
# the GPU does (triton 3.6's interpreter truncates); test_bf16_goes_through_unchanged also shows
# the functions add nothing to the kernels.
DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]

# str(inspect.signature(...)) of flash-attn's functions, parameter for parameter.
FLASH_ATTN_SIGNATURES = {
    "flash_attn_qkvpacked_func":
        "(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, "
        "alibi_slopes=None, deterministic=False, return_attn_probs=False)",
    "flash_attn_kvpacked_func":
        "(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, "
        "alibi_slopes=None, deterministic=False, return_attn_probs=False)",
    "flash_attn_func":
        "(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, "
        "alibi_slopes=None, deterministic=False, return_attn_probs=False)",
    "flash_attn_varlen_qkvpacked_func":
        "(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), "
        "softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False)",
    "flash_attn_varlen_kvpacked_func":
        "(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None, "
        "causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, "
        "return_attn_probs=False)",
    "flash_attn_varlen_func":
        "(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None, "
        "causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, "
        "return_attn_probs=False, block_table=None)",
}


# flash-attn 2.8's flash_attn_with_kvcache, its def line copied as written there (it annotates four
# parameters); the expected string is that of Python 3.11's inspect, and the stub below keeps the
# test exact on other Python versions, whose typing reprs differ.
def _flash_attn_with_kvcache_2_8(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens: Optional[Union[(int, torch.Tensor)]] = None,
    cache_batch_idx: Optional[torch.Tensor] = None,
    cache_leftpad: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),  # -1 means infinite context window
    softcap=0.0, # 0.0 means deactivated
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    pass


KVCACHE_SIGNATURE_PY311 = (
    "(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, "
    "cache_seqlens: Union[int, torch.Tensor, NoneType] = None, cache_batch_idx: Optional[torch.Tensor] = None, "
    "cache_leftpad: Optional[torch.Tensor] = None, block_table: Optional[torch.Tensor] = None, "
    "softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, "
    "alibi_slopes=None, num_splits=0, return_softmax_lse=False)")


def test_kvcache_signature_is_flash_attn_2_8():
    signature = inspect.signature(kernels.flash_attn_with_kvcache)
    assert signature == inspect.signature(_flash_attn_with_kvcache_2_8)
    if sys.version_info[:2] == (3, 11):
        assert str(signature) == KVCACHE_SIGNATURE_PY311
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in signature.parameters.values())
    assert "flash_attn_with_kvcache" in kernels.__all__


@pytest.mark.parametrize("name", FLASH_ATTN_SIGNATURES)
def test_signature_is_flash_attn_2_8(name):
    signature = inspect.signature(getattr(kernels, name))
    assert str(signature) == FLASH_ATTN_SIGNATURES[name]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in signature.parameters.values())
    assert name in kernels.__all__


def _draw(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_()


def _reference_bnhd(q, k, v, causal, softmax_scale=None, upcast=True):
    """attention_reference on (B, N, H, D) tensors: out (B, Nq, H, D), lse (B, H, Nq)."""
    out, lse = attention_reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal,
                                   softmax_scale=softmax_scale, upcast=upcast)
    return out.transpose(1, 2), lse


# --------------------------------------------------------------------------------------------
# The old bug: dropout_p is the fourth argument.
# --------------------------------------------------------------------------------------------

def test_positional_dropout_then_causal(poisoned_allocations):
    """flash_attn_func(q, k, v, 0.0, causal=True) once bound 0.0 to softmax_scale (uniform attention)."""
    torch.manual_seed(21)
    q, k, v = _draw(2, 33, 4, 40), _draw(2, 33, 2, 40), _draw(2, 33, 2, 40)
    out = flash_attn_func(q, k, v, 0.0, causal=True)
    ref, _ = _reference_bnhd(q, k, v, causal=True)
    low, _ = _reference_bnhd(q, k, v, causal=True, upcast=False)
    assert_close_to_reference("out", out, low, ref)
    uniform, _ = _reference_bnhd(q, k, v, causal=True, softmax_scale=0.0)
    assert (out.double() - uniform).abs().max() > 0.1, "the result is uniform attention"


def test_positional_softmax_scale_and_causal(poisoned_allocations):
    torch.manual_seed(22)
    q, k, v = _draw(1, 17, 2, 64), _draw(1, 29, 2, 64), _draw(1, 29, 2, 64)
    out = flash_attn_func(q, k, v, 0.0, 0.37, True)  # flash-attn's order: dropout_p, softmax_scale, causal
    ref, _ = _reference_bnhd(q, k, v, causal=True, softmax_scale=0.37)
    low, _ = _reference_bnhd(q, k, v, causal=True, softmax_scale=0.37, upcast=False)
    assert_close_to_reference("out", out, low, ref)


# --------------------------------------------------------------------------------------------
# Accuracy against the float64 reference, with gradients.
# --------------------------------------------------------------------------------------------

def check_against_reference(ours, reference, leaves, pieces):
    """Compare ours(leaves) -> (out, lse, S_dmask) with reference(leaves, upcast) -> (out, lse).

    pieces: (name, index into (out, lse, *grads), slice) to compare, each with its own bound,
    so varlen is checked sequence by sequence.
    """
    out, lse, s_dmask = ours(leaves)
    assert s_dmask.shape == (0,), "without dropout S_dmask is empty, as in flash-attn"
    assert out.dtype == leaves[0].dtype and lse.dtype == torch.float32 and not lse.requires_grad
    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, d_out)
    ref_out, ref_lse = reference(leaves, True)
    ref_grads = torch.autograd.grad(ref_out, leaves, d_out.double())
    low_out, low_lse = reference(leaves, False)
    low_grads = torch.autograd.grad(low_out, leaves, d_out)
    # flash-attn's kernel writes +inf for the lse of a row that sees no key (the reference: -inf)
    ref_lse, low_lse = (x.masked_fill(torch.isneginf(x), float("inf")) for x in (ref_lse, low_lse))

    ours_all = (out, lse, *grads)
    ref_all = (ref_out, ref_lse, *ref_grads)
    low_all = (low_out, low_lse, *low_grads)
    for x, ref in zip(ours_all, ref_all):
        assert x.shape == ref.shape
    for name, i, where in pieces:
        assert not torch.isnan(ours_all[i][where]).any(), f"{name} has NaN"
        assert_close_to_reference(name, ours_all[i][where], low_all[i][where], ref_all[i][where])


# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim): odd lengths, GQA and MQA, Nq != Nk;
# packed qkv has one head count and one length.
DENSE_SHAPES = [(2, 3, 3, 17, 17, 40), (1, 4, 2, 33, 65, 64), (1, 4, 1, 65, 33, 40)]
QKV_SHAPES = [(2, 3, 3, 17, 17, 40), (1, 2, 2, 65, 65, 64)]
DENSE_CASES = ([("func", shape) for shape in DENSE_SHAPES] + [("kvpacked", shape) for shape in DENSE_SHAPES]
               + [("qkvpacked", shape) for shape in QKV_SHAPES])


def _dense_case(kind, shape, dtype):
    """The leaves for one dense function and how to read q, k, v (B, N, H, D) out of them."""
    b, h, h_kv, n_q, n_k, d = shape
    if kind == "func":
        leaves = (_draw(b, n_q, h, d, dtype=dtype), *(_draw(b, n_k, h_kv, d, dtype=dtype) for _ in range(2)))
        return flash_attn_func, leaves, lambda leaves: leaves
    if kind == "kvpacked":
        leaves = (_draw(b, n_q, h, d, dtype=dtype), _draw(b, n_k, 2, h_kv, d, dtype=dtype))
        return flash_attn_kvpacked_func, leaves, lambda leaves: (leaves[0], *leaves[1].unbind(2))
    leaves = (_draw(b, n_q, 3, h, d, dtype=dtype),)  # qkvpacked: one head count, one length
    return flash_attn_qkvpacked_func, leaves, lambda leaves: leaves[0].unbind(2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind,shape", DENSE_CASES, ids=[f"{k}-{'x'.join(map(str, s))}" for k, s in DENSE_CASES])
def test_dense_matches_reference(kind, shape, causal, dtype, poisoned_allocations):
    torch.manual_seed(zlib.crc32(repr((kind, shape, causal)).encode()))
    fn, leaves, qkv_of = _dense_case(kind, shape, dtype)
    ours = lambda leaves: fn(*leaves, causal=causal, return_attn_probs=True)
    reference = lambda leaves, upcast: _reference_bnhd(*qkv_of(leaves), causal=causal, upcast=upcast)
    grad_names = {"func": ["dq", "dk", "dv"], "kvpacked": ["dq", "dkv"], "qkvpacked": ["dqkv"]}[kind]
    pieces = [(name, i, slice(None)) for i, name in enumerate(["out", "lse", *grad_names])]
    check_against_reference(ours, reference, leaves, pieces)


def _grads(out, inputs, d_out):
    return torch.autograd.grad(out, inputs, d_out)


def test_bf16_goes_through_unchanged():
    """Dense and packed functions give flash_attention's bits on the transposed views, forward and
    backward; so does varlen, sequence by sequence (bf16, which the interpreter cannot judge)."""
    torch.manual_seed(27)
    dt = torch.bfloat16
    q, k, v = _draw(2, 21, 4, 24, dtype=dt), _draw(2, 30, 2, 24, dtype=dt), _draw(2, 30, 2, 24, dtype=dt)
    expected = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True).transpose(1, 2)
    d_out = torch.randn_like(expected)
    expected_grads = _grads(expected, (q, k, v), d_out)
    out = flash_attn_func(q, k, v, causal=True)
    assert torch.equal(out, expected)
    assert all(torch.equal(a, b) for a, b in zip(_grads(out, (q, k, v), d_out), expected_grads))
    kv = torch.stack((k, v), dim=2).detach().requires_grad_()
    out = flash_attn_kvpacked_func(q, kv, causal=True)
    dq, dkv = _grads(out, (q, kv), d_out)
    assert torch.equal(out, expected) and torch.equal(dq, expected_grads[0])
    assert torch.equal(dkv, torch.stack(expected_grads[1:], dim=2))
    qkv = torch.randn(2, 21, 3, 4, 24, device=DEVICE, dtype=dt, requires_grad=True)
    out = flash_attn_qkvpacked_func(qkv, causal=True)
    views = [t.detach().transpose(1, 2).requires_grad_() for t in qkv.unbind(2)]
    expected = flash_attention(*views, causal=True).transpose(1, 2)
    assert torch.equal(out, expected)
    d_out = torch.randn_like(out)
    expected_grads = [g.transpose(1, 2) for g in _grads(expected, views, d_out)]
    assert torch.equal(_grads(out, (qkv,), d_out)[0], torch.stack(expected_grads, dim=2))

    lengths_q, lengths_k = [5, 17], [9, 12]
    q, k, v = _draw(22, 4, 24, dtype=dt), _draw(21, 2, 24, dtype=dt), _draw(21, 2, 24, dtype=dt)
    out = flash_attn_varlen_func(q, k, v, _offsets(lengths_q), _offsets(lengths_k), 17, 12, causal=True)
    d_out = torch.randn_like(out)
    dq, dk, dv = _grads(out, (q, k, v), d_out)
    for sq, sk in zip(_bounds(lengths_q), _bounds(lengths_k)):
        views = [t.detach()[s][None].transpose(1, 2).requires_grad_() for t, s in ((q, sq), (k, sk), (v, sk))]
        expected = flash_attention(*views, causal=True)[0].transpose(0, 1)
        assert torch.equal(out[sq], expected)
        grads = _grads(expected, views, d_out[sq])
        for ours, theirs in zip((dq[sq], dk[sk], dv[sk]), grads):
            assert torch.equal(ours, theirs[0].transpose(0, 1))


def test_last_dim_not_contiguous():
    """flash-attn copies such an input; the kernels read it in place, through its strides."""
    torch.manual_seed(23)
    base = torch.randn(1, 21, 2, 2 * 16, device=DEVICE, dtype=torch.float16)
    q = base[..., ::2]
    k, v = (torch.randn(1, 21, 2, 16, device=DEVICE, dtype=torch.float16) for _ in range(2))
    out = flash_attn_func(q, k, v, causal=True)
    ref, _ = _reference_bnhd(q, k, v, causal=True)
    low, _ = _reference_bnhd(q, k, v, causal=True, upcast=False)
    assert_close_to_reference("out", out, low, ref)


@pytest.mark.parametrize("deterministic", [False, True])
def test_deterministic_both_values_match_the_reference(deterministic):
    """Either value: within the error rule and bitwise reproducible (dQ has its own kernel)."""
    torch.manual_seed(24)
    q, k, v = _draw(2, 33, 4, 40), _draw(2, 47, 2, 40), _draw(2, 47, 2, 40)
    d_out = torch.randn_like(q)
    runs = []
    for _ in range(2):
        out = flash_attn_func(q, k, v, causal=True, deterministic=deterministic)
        runs.append(torch.autograd.grad(out, (q, k, v), d_out))
    ref, _ = _reference_bnhd(q, k, v, causal=True)
    low, _ = _reference_bnhd(q, k, v, causal=True, upcast=False)
    ref_grads = torch.autograd.grad(ref, (q, k, v), d_out.double())
    low_grads = torch.autograd.grad(low, (q, k, v), d_out)
    for name, ours, lo, hi in zip(("dq", "dk", "dv"), runs[0], low_grads, ref_grads):
        assert_close_to_reference(name, ours, lo, hi)
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_torch_compile_fullgraph():
    """The dense functions trace without a graph break, as flash_attention does."""
    torch._dynamo.reset()
    torch.manual_seed(28)

    def loss(qkv):  # (B, N, 3, H, D)
        q, k, v = qkv.unbind(2)
        return (flash_attn_func(q, k, v, 0.0, causal=True).float().square().mean()
                + flash_attn_qkvpacked_func(qkv, causal=True).float().mean())

    qkv = torch.randn(1, 40, 3, 2, 32, device=DEVICE, dtype=torch.float16, requires_grad=True)
    compiled = torch.compile(loss, fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    grad_compiled = torch.autograd.grad(compiled(qkv), qkv)[0]
    grad_eager = torch.autograd.grad(loss(qkv), qkv)[0]
    torch.testing.assert_close(compiled(qkv), loss(qkv), rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(grad_compiled, grad_eager, rtol=1e-2, atol=1e-3)


# --------------------------------------------------------------------------------------------
# Varlen: three sequences of different lengths, each compared with the dense reference.
# --------------------------------------------------------------------------------------------

SELF_LENGTHS = ([5, 17, 33], [5, 17, 33])
CROSS_LENGTHS = ([5, 17, 33], [9, 17, 20])  # Nq < Nk, equal, Nq > Nk (causal rows with no key)


def _offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


def _bounds(lengths):
    ends = torch.tensor(lengths).cumsum(0).tolist()
    return [slice(end - n, end) for n, end in zip(lengths, ends)]


def _varlen_reference(q, k, v, lengths_q, lengths_k, causal, upcast):
    """The dense reference on each sequence's slices, joined: out (total_q, H, D), lse (H, total_q)."""
    outs, lses = [], []
    for sq, sk in zip(_bounds(lengths_q), _bounds(lengths_k)):
        out, lse = _reference_bnhd(q[sq][None], k[sk][None], v[sk][None], causal=causal, upcast=upcast)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def _varlen_case(kind, lengths_q, lengths_k, h, h_kv, d, dtype, causal):
    total_q, total_k = sum(lengths_q), sum(lengths_k)
    cu_q, cu_k = _offsets(lengths_q), _offsets(lengths_k)
    max_q, max_k = max(lengths_q), max(lengths_k)
    if kind == "func":
        leaves = (_draw(total_q, h, d, dtype=dtype), *(_draw(total_k, h_kv, d, dtype=dtype) for _ in range(2)))
        ours = lambda leaves: flash_attn_varlen_func(*leaves, cu_q, cu_k, max_q, max_k, causal=causal,
                                                     return_attn_probs=True)
        qkv_of = lambda leaves: leaves
        grads = [("dq", lengths_q), ("dk", lengths_k), ("dv", lengths_k)]
    elif kind == "kvpacked":
        leaves = (_draw(total_q, h, d, dtype=dtype), _draw(total_k, 2, h_kv, d, dtype=dtype))
        ours = lambda leaves: flash_attn_varlen_kvpacked_func(*leaves, cu_q, cu_k, max_q, max_k, causal=causal,
                                                              return_attn_probs=True)
        qkv_of = lambda leaves: (leaves[0], *leaves[1].unbind(1))
        grads = [("dq", lengths_q), ("dkv", lengths_k)]
    else:
        assert lengths_q == lengths_k and h == h_kv
        leaves = (_draw(total_q, 3, h, d, dtype=dtype),)
        ours = lambda leaves: flash_attn_varlen_qkvpacked_func(leaves[0], cu_q, max_q, causal=causal,
                                                               return_attn_probs=True)
        qkv_of = lambda leaves: leaves[0].unbind(1)
        grads = [("dqkv", lengths_q)]
    reference = lambda leaves, upcast: _varlen_reference(*qkv_of(leaves), lengths_q, lengths_k, causal, upcast)
    pieces = []
    for b in range(len(lengths_q)):
        pieces.append((f"out[seq {b}]", 0, _bounds(lengths_q)[b]))
        pieces.append((f"lse[seq {b}]", 1, (slice(None), _bounds(lengths_q)[b])))
        for i, (name, lengths) in enumerate(grads):
            pieces.append((f"{name}[seq {b}]", 2 + i, _bounds(lengths)[b]))
    return ours, reference, leaves, pieces


VARLEN_CASES = [
    ("func", CROSS_LENGTHS, 4, 2, 40),       # grouped-query, Nq != Nk per sequence
    ("func", SELF_LENGTHS, 2, 1, 64),        # multi-query
    ("kvpacked", CROSS_LENGTHS, 2, 2, 64),
    ("qkvpacked", SELF_LENGTHS, 3, 3, 40),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind,lengths,h,h_kv,d", VARLEN_CASES,
                         ids=[f"{c[0]}-{'cross' if c[1] is CROSS_LENGTHS else 'self'}-h{c[2]}kv{c[3]}d{c[4]}"
                              for c in VARLEN_CASES])
def test_varlen_matches_reference_per_sequence(kind, lengths, h, h_kv, d, causal, dtype, poisoned_allocations):
    torch.manual_seed(zlib.crc32(repr((kind, h, h_kv, d, causal)).encode()))
    check_against_reference(*_varlen_case(kind, *lengths, h, h_kv, d, dtype, causal))


def test_varlen_keeps_sequences_apart():
    """A change to one sequence's keys changes no other sequence's output."""
    torch.manual_seed(25)
    lengths = [7, 12, 9]
    q, k, v = (torch.randn(28, 2, 32, device=DEVICE, dtype=torch.float16) for _ in range(3))
    cu = _offsets(lengths)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 12, 12)
    k2 = k.clone()
    k2[7:19] += 1.0  # sequence 1 only
    out2 = flash_attn_varlen_func(q, k2, v, cu, cu, 12, 12)
    assert torch.equal(out[:7], out2[:7]) and torch.equal(out[19:], out2[19:])
    assert not torch.equal(out[7:19], out2[7:19])


def test_varlen_empty_query_sequence():
    """A sequence with no queries contributes nothing; max_seqlen may exceed the longest sequence."""
    torch.manual_seed(26)
    lengths_q, lengths_k = [4, 0, 6], [4, 3, 6]
    q = torch.randn(10, 2, 16, device=DEVICE, dtype=torch.float16)
    k, v = (torch.randn(13, 2, 16, device=DEVICE, dtype=torch.float16) for _ in range(2))
    out, lse, _ = flash_attn_varlen_func(q, k, v, _offsets(lengths_q), _offsets(lengths_k), 64, 64, causal=True,
                                         return_attn_probs=True)
    ref, ref_lse = _varlen_reference(q, k, v, lengths_q, lengths_k, True, True)
    low, low_lse = _varlen_reference(q, k, v, lengths_q, lengths_k, True, False)
    assert out.shape == q.shape and lse.shape == (2, 10)
    assert_close_to_reference("out", out, low, ref)
    assert_close_to_reference("lse", lse, low_lse, ref_lse)


# --------------------------------------------------------------------------------------------
# Refusals: features not implemented yet, and bad input.
# --------------------------------------------------------------------------------------------

def _dense_args():
    x = torch.randn(1, 8, 2, 16, device=DEVICE, dtype=torch.float16)
    return (x, x, x)


def _varlen_args():
    x = torch.randn(8, 2, 16, device=DEVICE, dtype=torch.float16)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32, device=DEVICE)
    return (x, x, x, cu, cu, 5, 5)


FEATURES = [
    (dict(dropout_p=0.5), "dropout"),
    (dict(window_size=(2, 0)), "window"),
    (dict(window_size=(-1, 0)), "window (-1, 0): causal"),
    (dict(softcap=0.05), "softcap"),
    (dict(alibi_slopes=torch.full((2,), 0.7, device=DEVICE)), "alibi"),
]


@pytest.mark.parametrize("option,label", FEATURES, ids=[label for _, label in FEATURES])
@pytest.mark.parametrize("fn,args", [
    (flash_attn_func, _dense_args),
    (flash_attn_kvpacked_func, lambda: (_dense_args()[0], torch.stack(_dense_args()[1:], dim=2))),
    (flash_attn_qkvpacked_func, lambda: (torch.stack(_dense_args(), dim=2),)),
    (flash_attn_varlen_func, _varlen_args),
    (flash_attn_varlen_kvpacked_func, lambda: (_varlen_args()[0], torch.stack(_varlen_args()[1:3], dim=1),
                                               *_varlen_args()[3:])),
    (flash_attn_varlen_qkvpacked_func, lambda: (torch.stack(_varlen_args()[:3], dim=1), _varlen_args()[3], 5)),
], ids=lambda x: getattr(x, "__name__", ""))
def test_feature_reaches_the_kernels(fn, args, option, label):
    """Every function passes each feature through: the output changes (accuracy: test_features.py)."""
    torch.manual_seed(3)
    inputs = args()
    plain = fn(*inputs)
    assert not torch.equal(fn(*inputs, **option), plain), f"{label} had no effect"


def test_old_positional_order_is_refused():
    """Code written for the old (q, k, v, softmax_scale, causal) order fails loudly."""
    with pytest.raises(ValueError, match="softmax_scale"):
        flash_attn_func(*_dense_args(), 0.125, True)


def _paginate(k, v, lengths, page_size, spare_pages=3):
    """A paged cache holding packed k, v (total_k, Hkv, D): pages shuffled, spare pages of noise."""
    pages_per_seq = [-(-n // page_size) for n in lengths]
    num_blocks = sum(pages_per_seq) + spare_pages
    order = torch.randperm(num_blocks).tolist()
    k_cache = torch.randn(num_blocks, page_size, *k.shape[1:], device=k.device, dtype=k.dtype)
    v_cache = torch.randn_like(k_cache)
    table = torch.full((len(lengths), max(pages_per_seq) + 1), -7, dtype=torch.int32)  # unused slots: junk
    start, next_page = 0, 0
    for b, (n, pages) in enumerate(zip(lengths, pages_per_seq)):
        for p in range(pages):
            page = order[next_page]
            next_page += 1
            table[b, p] = page
            rows = slice(start + p * page_size, start + min(n, (p + 1) * page_size))
            k_cache[page, :rows.stop - rows.start] = k[rows]
            v_cache[page, :rows.stop - rows.start] = v[rows]
        start += n
    return k_cache, v_cache, table.to(k.device)


@pytest.mark.parametrize("page_size", [16, 5])
def test_varlen_paged_kv_matches_the_packed_call(page_size):
    """block_table: the same output and gradients (into the cache's pages) as the packed call."""
    torch.manual_seed(page_size)
    lengths_q, lengths_k = [3, 17, 1], [40, 17, 33]
    q = torch.randn(sum(lengths_q), 4, 24, device=DEVICE, dtype=torch.float16)
    k, v = (torch.randn(sum(lengths_k), 2, 24, device=DEVICE, dtype=torch.float16) for _ in range(2))
    cu_q, cu_k = _offsets(lengths_q), _offsets(lengths_k)
    k_cache, v_cache, table = _paginate(k, v, lengths_k, page_size)
    k_cache.requires_grad_()
    q.requires_grad_()
    args = dict(causal=True, window_size=(20, 0), softcap=5.0)
    paged = flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 17, 40, block_table=table, **args)
    k.requires_grad_()
    packed = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 17, 40, **args)
    assert torch.equal(paged, packed)
    d_out = torch.randn_like(packed)
    dq_paged, dk_cache = torch.autograd.grad(paged, (q, k_cache), d_out)
    dq_packed, dk = torch.autograd.grad(packed, (q, k), d_out)
    torch.testing.assert_close(dq_paged, dq_packed, rtol=2e-3, atol=2e-3)  # atomic dQ: the add order varies
    slots = [(int(table[b, p // page_size]), p % page_size) for b, n in enumerate(lengths_k) for p in range(n)]
    gathered = torch.stack([dk_cache[page, row] for page, row in slots])
    assert torch.equal(gathered, dk)  # dK from the same kernel: the same bits, scattered to the pages
    unused = torch.ones(k_cache.shape[:2], dtype=torch.bool)
    for page, row in slots:
        unused[page, row] = False
    assert not dk_cache[unused.to(dk_cache.device)].any()  # nothing lands outside the sequences' slots


@pytest.mark.parametrize("make_table,message", [
    (lambda t: t.long(), "int32"),
    (lambda t: t[:1], "rows for 3 sequences"),
    (lambda t: t[:, :1], "pages"),
    (lambda t: t.masked_fill(t >= 0, 10_000), "outside"),
], ids=["dtype", "rows", "too-few-pages", "out-of-range"])
def test_varlen_paged_kv_bad_block_table_is_refused(make_table, message):
    lengths = [40, 17, 33]
    k = torch.randn(sum(lengths), 2, 16, device=DEVICE, dtype=torch.float16)
    k_cache, v_cache, table = _paginate(k, k, lengths, 16)
    q = torch.randn(3, 2, 16, device=DEVICE, dtype=torch.float16)
    cu_q, cu_k = _offsets([1, 1, 1]), _offsets(lengths)
    with pytest.raises(ValueError, match=message):
        flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 1, 40, block_table=make_table(table))


def _t(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def _cu(*offsets, dtype=torch.int32):
    return torch.tensor(offsets, dtype=dtype, device=DEVICE)


BAD_CALLS = [
    ("float32", lambda: flash_attn_func(*(_t(1, 8, 2, 16, dtype=torch.float32),) * 3), "supported dtypes"),
    ("head dim over 256", lambda: flash_attn_func(*(_t(1, 8, 1, 320),) * 3), "between 1 and 256"),
    ("batch mismatch", lambda: flash_attn_func(_t(1, 8, 2, 16), _t(2, 8, 2, 16), _t(2, 8, 2, 16)), "batch size"),
    ("heads not divisible", lambda: flash_attn_func(_t(1, 8, 3, 16), _t(1, 8, 2, 16), _t(1, 8, 2, 16)), "multiple"),
    ("rank 3 to dense", lambda: flash_attn_func(*(_t(8, 2, 16),) * 3), "rank 4"),
    ("qkv not packed by 3", lambda: flash_attn_qkvpacked_func(_t(1, 8, 2, 2, 16)), "size 3 in dim 2"),
    ("kv not packed by 2", lambda: flash_attn_kvpacked_func(_t(1, 8, 2, 16), _t(1, 8, 3, 2, 16)), "size 2 in dim 2"),
    ("infinite scale", lambda: flash_attn_func(*_dense_args(), softmax_scale=math.inf), "softmax_scale"),
    ("old order (q, k, v, None, True)", lambda: flash_attn_func(*_dense_args(), None, True), "dropout_p"),
    ("bool scale", lambda: flash_attn_func(*_dense_args(), softmax_scale=True), "softmax_scale"),
    ("negative dropout", lambda: flash_attn_func(*_dense_args(), dropout_p=-0.1), "dropout_p"),
    ("window not a pair", lambda: flash_attn_func(*_dense_args(), window_size=-1), "window_size"),
    ("dropout 1", lambda: flash_attn_func(*_dense_args(), dropout_p=1.0), "dropout_p"),
    ("infinite softcap", lambda: flash_attn_func(*_dense_args(), softcap=math.inf), "softcap"),
    ("softcap with dropout", lambda: flash_attn_func(*_dense_args(), 0.1, softcap=2.0),
     "Softcapping does not support dropout"),
    ("softcap with dropout, varlen", lambda: flash_attn_varlen_func(*_varlen_args(), dropout_p=0.1, softcap=2.0),
     "Softcapping does not support dropout"),
    ("batch 0", lambda: flash_attn_func(*(_t(0, 8, 2, 16),) * 3), "batch size must be positive"),
    ("alibi wrong shape", lambda: flash_attn_func(*_dense_args(), alibi_slopes=torch.ones(3, device=DEVICE)),
     "alibi_slopes must have shape"),
    ("alibi float16", lambda: flash_attn_func(*_dense_args(),
                                              alibi_slopes=torch.ones(2, device=DEVICE, dtype=torch.float16)),
     "float32"),
    ("alibi not a tensor", lambda: flash_attn_func(*_dense_args(), alibi_slopes=[1.0, 1.0]), "alibi_slopes"),
    ("varlen alibi batch", lambda: flash_attn_varlen_func(*_varlen_args(), alibi_slopes=torch.ones(3, 2, device=DEVICE)),
     "alibi_slopes must have shape"),
    ("causal not a bool", lambda: flash_attn_func(*_dense_args(), causal="yes"), "causal"),
    ("cu_seqlens int64", lambda: flash_attn_varlen_func(*_varlen_args()[:3], _cu(0, 3, 8, dtype=torch.int64),
                                                        _cu(0, 3, 8), 5, 5), "int32"),
    ("cu_seqlens short of the tokens", lambda: flash_attn_varlen_func(*_varlen_args()[:3], _cu(0, 3, 7), _cu(0, 3, 8),
                                                                      5, 5), "holds 8 tokens"),
    ("cu_seqlens decreasing", lambda: flash_attn_varlen_func(*_varlen_args()[:3], _cu(0, 5, 3, 8), _cu(0, 5, 3, 8),
                                                             5, 5), "not decrease"),
    ("cu_seqlens not from 0", lambda: flash_attn_varlen_func(*_varlen_args()[:3], _cu(1, 8), _cu(1, 8), 7, 7),
     "start at 0"),
    ("batch counts differ", lambda: flash_attn_varlen_func(*_varlen_args()[:3], _cu(0, 3, 8), _cu(0, 8), 5, 8),
     "sequences"),
    ("max_seqlen too small", lambda: flash_attn_varlen_func(*_varlen_args()[:3], _cu(0, 3, 8), _cu(0, 3, 8), 4, 5),
     "max_seqlen_q=4"),
    ("max_seqlen not an int", lambda: flash_attn_varlen_func(*_varlen_args()[:3], _cu(0, 3, 8), _cu(0, 3, 8), 5.0, 5),
     "max_seqlen_q must be an int"),
    ("queries without keys", lambda: flash_attn_varlen_func(_t(8, 2, 16), _t(5, 2, 16), _t(5, 2, 16), _cu(0, 3, 8),
                                                            _cu(0, 5, 5), 5, 5), "no keys"),
    ("rank 4 to varlen", lambda: flash_attn_varlen_func(*(_t(1, 8, 2, 16),) * 3, _cu(0, 8), _cu(0, 8), 8, 8),
     "rank 3"),
]


@pytest.mark.parametrize("call,message", [(c, m) for _, c, m in BAD_CALLS], ids=[n for n, _, _ in BAD_CALLS])
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message) as raised:
        call()
    assert isinstance(raised.value, RuntimeError)  # flash-attn's checks raise RuntimeError


def test_options_read_as_flash_attn_reads_them(poisoned_allocations):
    """A negative window bound is unbounded, a softcap of 0 or less is off, a window may be 0-dim tensors and
    causal a NumPy bool: each gives the result of the plain spelling, bit for bit."""
    np = pytest.importorskip("numpy")
    torch.manual_seed(5)
    q, k, v = _dense_args()
    for plain, lenient in ((dict(window_size=(-1, 3)), dict(window_size=(-7, 3))),
                           (dict(window_size=(2, 1)), dict(window_size=(torch.tensor(2), torch.tensor(1)))),
                           (dict(), dict(softcap=-1.0)),
                           (dict(causal=True), dict(causal=np.bool_(True)))):
        torch.testing.assert_close(flash_attn_func(q, k, v, **lenient), flash_attn_func(q, k, v, **plain),
                                   rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# Inference at short seqlen_q: the split-KV decoding kernels serve flash_attn_func.
# --------------------------------------------------------------------------------------------

SPLIT_CASES = [  # (b, h, h_kv, n_q, n_k, d), options
    ((1, 4, 2, 1, 700, 40), dict()),
    ((2, 4, 1, 3, 613, 64), dict(causal=True)),
    ((1, 2, 2, 5, 1100, 72), dict(causal=True, window_size=(200, 0), softcap=8.0)),
    ((1, 6, 2, 2, 900, 32), dict(window_size=(300, 40), alibi=True)),
    ((1, 6, 2, 2, 900, 32), dict(causal=True, alibi="strided")),  # slopes with a head stride of 2
]


@pytest.mark.parametrize("shape,options", SPLIT_CASES, ids=[str(i) for i in range(len(SPLIT_CASES))])
def test_short_queries_without_grad_take_the_split_kv_kernels(shape, options, monkeypatch):
    """Without a gradient to compute, a short query over long keys runs on the split-KV kernels
    (counted here), within the error rule of the float64 reference, lse included; with a gradient
    it stays on the FlashAttention-2 kernels and gives the same output within the rule."""
    import kernels.flash_attn_interface as api

    calls = []
    decode = api.decode_forward
    monkeypatch.setattr(api, "decode_forward", lambda *a, **kw: calls.append(a[-2]) or decode(*a, **kw))
    torch.manual_seed(zlib.crc32(repr(shape).encode()))
    b, h, h_kv, n_q, n_k, d = shape
    q, k, v = (torch.randn(b, n, heads, d, device=DEVICE, dtype=torch.float16)
               for n, heads in ((n_q, h), (n_k, h_kv), (n_k, h_kv)))
    options = dict(options)
    alibi = options.pop("alibi", False)
    alibi = (torch.rand(2 * h, device=DEVICE, dtype=torch.float32)[::2] if alibi == "strided"
             else torch.rand(h, device=DEVICE, dtype=torch.float32) if alibi else None)
    out, lse, _ = flash_attn_func(q, k, v, alibi_slopes=alibi, return_attn_probs=True, **options)
    assert len(calls) == 1 and calls[0] > 1, calls  # one launch, keys split
    features = dict(window_size=options.get("window_size", (-1, -1)), softcap=options.get("softcap", 0.0),
                    alibi_slopes=alibi)
    causal = options.get("causal", False)
    ref, ref_lse = attention_reference(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal, **features)
    low, low_lse = attention_reference(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal, upcast=False,
                                       **features)
    assert_close_to_reference("out", out, low.transpose(1, 2), ref.transpose(1, 2))
    assert_close_to_reference("lse", lse, low_lse, ref_lse)
    with_grad = flash_attn_func(*(t.requires_grad_() for t in (q, k, v)), alibi_slopes=alibi, **options)
    assert len(calls) == 1  # the backward needs the FlashAttention-2 forward's saved state
    assert_close_to_reference("out with grad", with_grad.detach(), low.transpose(1, 2), ref.transpose(1, 2))


def test_short_queries_over_short_keys_stay_on_the_flash_kernels(monkeypatch):
    import kernels.flash_attn_interface as api

    monkeypatch.setattr(api, "decode_forward", lambda *a, **kw: pytest.fail("split-KV used for a short key range"))
    q, k, v = (torch.randn(1, n, 2, 32, device=DEVICE, dtype=torch.float16) for n in (1, 64, 64))
    flash_attn_func(q, k, v)  # 64 keys: nothing to split
    q = torch.randn(1, 80, 2, 32, device=DEVICE, dtype=torch.float16)  # 80 query rows per K/V head
    k, v = (torch.randn(1, 2000, 2, 32, device=DEVICE, dtype=torch.float16) for _ in range(2))
    flash_attn_func(q, k, v)
