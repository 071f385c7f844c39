"""flash_attn_with_kvcache (split-KV decoding) against a float64 reference.

The reference appends the new keys/values and applies the rotary embedding in PyTorch, then
computes attention sequence by sequence over the visible cache positions
[cache_leftpad, cache_seqlens + Nnew) with the causal / window masks, softcap and ALiBi bias.
Pass rule as in tests/test_kernels.py: the max error of ours against the float64 reference is at
most twice that of the same reference computed in the low precision, plus a small floor.
Shapes are interpreter-sized on the CPU; with a GPU, larger decode shapes are added.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels import flash_attn_with_kvcache
from kernels._decode import choose_num_splits
from test_kernels import DEVICE, HAS_CUDA, assert_close_to_reference, poisoned_allocations  # noqa: F401 (a fixture)

DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]


# --------------------------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------------------------

def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x (B, N, H, D) at integer positions (B, N), in x's dtype's compute."""
    rot = 2 * cos.shape[1]
    c, s = cos.to(x.dtype)[positions][:, :, None], sin.to(x.dtype)[positions][:, :, None]
    head, rest = x[..., :rot], x[..., rot:]
    if interleaved:
        x1, x2 = head[..., 0::2], head[..., 1::2]
        out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = head[..., :rot // 2], head[..., rot // 2:]
        out = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((out, rest), dim=-1)


def reference(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
              cache_batch_idx=None, cache_leftpad=None, softmax_scale=None, causal=False, window_size=(-1, -1),
              softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0, dtype=torch.float64):
    """Dense-cache reference in `dtype`; returns (out, lse, k_cache_after, v_cache_after).

    The caches are not modified; the appended copies are returned (in the cache's dtype).
    """
    batch, n_q, heads, d = q.shape
    kv_heads = k_cache.shape[2]
    n_new = 0 if k is None else k.shape[1]
    lens = (torch.full((batch,), cache_seqlens, dtype=torch.long) if isinstance(cache_seqlens, int)
            else cache_seqlens.long().cpu())
    left = cache_leftpad.long().cpu() if cache_leftpad is not None else torch.zeros(batch, dtype=torch.long)
    rows = cache_batch_idx.long().cpu() if cache_batch_idx is not None else torch.arange(batch)
    scale = softmax_scale if softmax_scale is not None else 1 / math.sqrt(d)
    local = tuple(window_size) != (-1, -1)
    q_c = q.to(dtype)
    if rotary_cos is not None:
        q_pos = lens[:, None] + (torch.arange(n_q)[None] if (causal or local) else torch.zeros(1, n_q, dtype=torch.long))
        q_c = rotate(q_c, rotary_cos, rotary_sin, q_pos.to(q.device), rotary_interleaved)
    k_after, v_after = k_cache.clone(), v_cache.clone()
    k_c, v_c = k_cache.to(dtype)[rows], v_cache.to(dtype)[rows]
    if k is not None:
        k_new = k.to(dtype)
        if rotary_cos is not None:
            k_new = rotate(k_new, rotary_cos, rotary_sin, (lens[:, None] + torch.arange(n_new)[None]).to(q.device),
                           rotary_interleaved)
        for b in range(batch):
            n = int(lens[b])
            k_c[b, n:n + n_new] = k_new[b]
            v_c[b, n:n + n_new] = v[b].to(dtype)
            k_after[rows[b], n:n + n_new] = k_new[b].to(k_cache.dtype)
            v_after[rows[b], n:n + n_new] = v[b]
    out = torch.zeros(batch, n_q, heads, d, dtype=dtype, device=q.device)
    lse = torch.full((batch, heads, n_q), float("-inf"), dtype=torch.float64, device=q.device)
    group = heads // kv_heads
    for b in range(batch):
        lo, hi = int(left[b]), int(lens[b]) + n_new
        n_k = hi - lo
        if n_k == 0:
            continue
        kk = k_c[b, lo:hi].repeat_interleave(group, dim=1)  # (Nk, H, D)
        vv = v_c[b, lo:hi].repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", q_c[b], kk) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(n_q, device=q.device)[:, None]
        p = torch.arange(n_k, device=q.device)[None, :]
        diag = i + n_k - n_q
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - slopes.to(dtype)[:, None, None] * (diag - p).abs().to(dtype)[None]
        visible = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
        right = 0 if causal else window_size[1]
        if causal or right >= 0:
            visible &= p <= diag + right
        if window_size[0] >= 0:
            visible &= p >= diag - window_size[0]
        s = s.masked_fill(~visible[None], float("-inf"))
        row_lse = torch.logsumexp(s.double(), dim=-1)
        probs = torch.softmax(s, dim=-1).nan_to_num(0.0)
        out[b] = torch.einsum("hqk,khd->qhd", probs, vv)
        lse[b] = row_lse
    return out, lse, k_after, v_after


def run_and_check(q, k_cache, v_cache, k=None, v=None, *, check_lse=True, **kwargs):
    """Ours vs the float64 reference (bound from the low-precision reference); the in-place append."""
    ref_out, ref_lse, k_after, v_after = reference(q, k_cache, v_cache, k, v, **kwargs)
    low_out, low_lse, _, _ = reference(q, k_cache, v_cache, k, v, dtype=q.dtype, **kwargs)
    kc, vc = k_cache.clone(), v_cache.clone()
    kw = dict(kwargs)
    out, lse = flash_attn_with_kvcache(q, kc, vc, k, v, return_softmax_lse=True, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    assert_close_to_reference("out", out, low_out, ref_out)
    if check_lse:
        assert_close_to_reference("lse", lse, low_lse, ref_lse)
    if k is not None:
        torch.testing.assert_close(kc.float(), k_after.float(), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(vc, v_after, rtol=0, atol=0)
    return out, lse


def draw(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def lengths(*values):
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


def rotary_tables(n_positions, rotary_dim, dtype=torch.float16):
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    angle = torch.arange(n_positions, dtype=torch.float64)[:, None] * inv[None]
    return angle.cos().to(DEVICE, dtype), angle.sin().to(DEVICE, dtype)


def to_paged(cache, page_size, seed=0):
    """A dense (B, N, Hkv, D) cache as shuffled pages (+ 3 spare pages) and its block table."""
    batch, n = cache.shape[:2]
    per_seq = -(-n // page_size)
    padded = torch.zeros(batch, per_seq * page_size, *cache.shape[2:], dtype=cache.dtype, device=cache.device)
    padded[:, :n] = cache
    num_blocks = batch * per_seq + 3
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed))[:batch * per_seq]
    paged = torch.randn(num_blocks, page_size, *cache.shape[2:], dtype=cache.dtype, device=cache.device)
    paged[perm.to(cache.device)] = padded.reshape(batch * per_seq, page_size, *cache.shape[2:])
    return paged, perm.reshape(batch, per_seq).to(torch.int32).to(cache.device)


def from_paged(paged, block_table, n):
    batch = block_table.shape[0]
    return paged[block_table.long()].reshape(batch, -1, *paged.shape[2:])[:, :n]


# --------------------------------------------------------------------------------------------
# Dense cache
# --------------------------------------------------------------------------------------------

HEADS = [pytest.param(8, 1, id="gqa8"), pytest.param(4, 4, id="mha"), pytest.param(3, 1, id="mqa")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q", [1, 3])
@pytest.mark.parametrize("heads,kv_heads", HEADS)
def test_dense_matches_reference(heads, kv_heads, n_q, causal, dtype, poisoned_allocations):
    torch.manual_seed(1)
    q = draw(2, n_q, heads, 40, dtype=dtype)
    kc, vc = draw(2, 157, kv_heads, 40, dtype=dtype), draw(2, 157, kv_heads, 40, dtype=dtype)
    run_and_check(q, kc, vc, cache_seqlens=lengths(157, 61), causal=causal)


@pytest.mark.parametrize("head_dim", [40, 72, 128])
def test_odd_head_dims_and_lengths(head_dim, poisoned_allocations):
    torch.manual_seed(2)
    q = draw(3, 1, 4, head_dim)
    kc, vc = draw(3, 203, 2, head_dim), draw(3, 203, 2, head_dim)
    run_and_check(q, kc, vc, cache_seqlens=lengths(203, 17, 129), num_splits=3)


def test_int_and_default_cache_seqlens(poisoned_allocations):
    torch.manual_seed(3)
    q, kc, vc = draw(2, 1, 4, 32), draw(2, 77, 2, 32), draw(2, 77, 2, 32)
    run_and_check(q, kc, vc, cache_seqlens=50)
    out = flash_attn_with_kvcache(q, kc, vc)  # None: the whole cache
    ref, _, _, _ = reference(q, kc, vc, cache_seqlens=77)
    low, _, _, _ = reference(q, kc, vc, cache_seqlens=77, dtype=q.dtype)
    assert_close_to_reference("out", out, low, ref)


def test_int_cache_seqlens_reads_nothing_back(monkeypatch, poisoned_allocations):
    """With an int (or no) cache_seqlens on a dense cache, with or without an append, no tensor is read back
    to the host (what keeps the call capturable in a CUDA graph); a tensor of lengths still is, for its checks."""
    torch.manual_seed(4)
    q, kc, vc = draw(3, 2, 4, 32), draw(3, 90, 2, 32), draw(3, 90, 2, 32)
    k, v = draw(3, 2, 2, 32), draw(3, 2, 2, 32)
    ref, _, _, _ = reference(q, kc, vc, k, v, cache_seqlens=61, causal=True)
    low, _, _, _ = reference(q, kc, vc, k, v, cache_seqlens=61, causal=True, dtype=q.dtype)
    reads = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: reads.append(t.shape) or tolist(t))
    out = flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=61, causal=True)
    flash_attn_with_kvcache(q, kc, vc)
    assert reads == []
    flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.full((3,), 61, dtype=torch.int32, device=DEVICE))
    assert reads == [(3,)]
    monkeypatch.undo()
    assert_close_to_reference("out", out, low, ref)


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("kv_heads", [4, 32])
def test_decode_step_replays_in_a_cuda_graph(kv_heads):
    """A decode step with an int cache length (append of one token, then attention) captured in a CUDA graph
    and replayed with new q, k and v: each replay appends at the captured position and matches the reference."""
    torch.manual_seed(23)
    batch, heads, n_cache, d = 2, 32, 4096, 128
    kc, vc = draw(batch, n_cache, kv_heads, d), draw(batch, n_cache, kv_heads, d)
    q, k, v = draw(batch, 1, heads, d), draw(batch, 1, kv_heads, d), draw(batch, 1, kv_heads, d)
    before_k, before_v = kc.clone(), vc.clone()
    step = lambda: flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=3000, causal=True)  # noqa: E731
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # compiles the kernels outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for seed in (1, 2):
        torch.manual_seed(seed)
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        kc.copy_(before_k)
        vc.copy_(before_v)
        graph.replay()
        ref, _, k_after, v_after = reference(q, before_k, before_v, k, v, cache_seqlens=3000, causal=True)
        low, _, _, _ = reference(q, before_k, before_v, k, v, cache_seqlens=3000, causal=True, dtype=q.dtype)
        assert_close_to_reference("out", out, low, ref)
        assert torch.equal(kc, k_after) and torch.equal(vc, v_after)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 5, 16, 0])
def test_split_counts_agree(num_splits, poisoned_allocations):
    torch.manual_seed(4)
    q = draw(2, 1, 8, 64)
    kc, vc = draw(2, 700, 1, 64), draw(2, 700, 1, 64)
    lens = lengths(700, 333)
    out, lse = run_and_check(q, kc, vc, cache_seqlens=lens, num_splits=num_splits)
    one, lse_one = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, num_splits=1, return_softmax_lse=True)
    torch.testing.assert_close(out, one, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(lse, lse_one, rtol=1e-5, atol=1e-5)


def test_split_choice():
    cpu = torch.device("cpu")
    assert choose_num_splits(1, 4, 1, 32768, cpu, 64) > 1            # few programs, long cache: split
    assert choose_num_splits(1, 4, 1, 200, cpu, 64) == 1              # short cache: never below 256 keys
    assert choose_num_splits(64, 32, 1, 32768, cpu, 64) == 1          # the grid is already full
    assert choose_num_splits(1, 1, 1, 10 ** 7, cpu, 64) <= 128


@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
@pytest.mark.parametrize("batch,kv_heads,max_keys", [(1, 4, 32768), (8, 4, 131072), (1, 32, 8192), (3, 5, 70001),
                                                     (1, 1, 1000), (64, 4, 1024), (2, 3, 513), (1, 3, 32768)])
def test_split_choice_is_a_power_of_two_within_the_caps(batch, kv_heads, max_keys, paged):
    """The rule, unless a cap (no split under MIN_KEYS_PER_SPLIT keys or one key tile, at most MAX_SPLITS)
    stops it first: dense, the largest power of two whose programs fit in one wave over the SMs (at least
    one split); paged, the smallest power of two reaching two waves."""
    from kernels._decode import CPU_SM_COUNT, MAX_SPLITS, MIN_KEYS_PER_SPLIT
    cpu, block_n, programs = torch.device("cpu"), 64, batch * kv_heads
    splits = choose_num_splits(batch, kv_heads, 1, max_keys, cpu, block_n, paged=paged)
    assert splits >= 1 and splits & (splits - 1) == 0
    cap = min(max_keys // MIN_KEYS_PER_SPLIT, -(-max_keys // block_n), MAX_SPLITS)
    assert splits <= max(cap, 1)
    capped = 2 * splits > cap
    if paged:
        assert splits * programs >= 2 * CPU_SM_COUNT or capped      # stopped only by two waves or by a cap
        assert splits == 1 or (splits // 2) * programs < 2 * CPU_SM_COUNT   # the smallest such power
    else:
        assert splits == 1 or splits * programs <= CPU_SM_COUNT      # one wave at most
        assert 2 * splits * programs > CPU_SM_COUNT or capped        # the largest such power


def test_split_choice_takes_the_layout():
    """The same shape splits less from a dense cache than from a paged one where the grid is short."""
    from kernels._decode import CPU_SM_COUNT
    cpu = torch.device("cpu")
    dense = choose_num_splits(1, 2, 1, 32768, cpu, 64)
    paged = choose_num_splits(1, 2, 1, 32768, cpu, 64, paged=True)
    assert (dense, paged) == (CPU_SM_COUNT // 2, CPU_SM_COUNT)
    assert choose_num_splits(1, 3, 1, 32768, cpu, 64) == 2           # 3 programs: 2 splits fit in 8 SMs, 4 do not
    assert choose_num_splits(16, 1, 1, 32768, cpu, 64) == 1          # more programs than SMs: no split
    assert choose_num_splits(16, 1, 1, 32768, cpu, 64, paged=True) == 1


def test_zero_length_cache(poisoned_allocations):
    """A sequence with no key gives zeros and lse -inf (flash-attn: zeros and +inf); with new
    tokens appended to an empty cache they are all it sees."""
    torch.manual_seed(5)
    q, kc, vc = draw(2, 1, 4, 32), draw(2, 64, 2, 32), draw(2, 64, 2, 32)
    out, lse = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lengths(0, 40), num_splits=2,
                                       return_softmax_lse=True)
    assert (out[0] == 0).all() and torch.isinf(lse[0]).all() and (lse[0] < 0).all()
    assert torch.isfinite(out[1]).all()
    k, v = draw(2, 2, 2, 32), draw(2, 2, 2, 32)
    q2 = draw(2, 2, 4, 32)
    run_and_check(q2, kc, vc, k, v, cache_seqlens=lengths(0, 5), causal=True)


# --------------------------------------------------------------------------------------------
# Paged cache
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("page_size", [16, 64, 256])
def test_paged_equals_dense(page_size, poisoned_allocations):
    torch.manual_seed(6)
    n = 300
    q = draw(3, 1, 8, 64)
    kc, vc = draw(3, n, 2, 64), draw(3, n, 2, 64)
    lens = lengths(300, 1, 170)
    kp, table = to_paged(kc, page_size, seed=page_size)
    vp, _ = to_paged(vc, page_size, seed=page_size)
    for splits in (1, 3):
        dense = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, num_splits=splits, return_softmax_lse=True)
        paged = flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, num_splits=splits,
                                        return_softmax_lse=True)
        torch.testing.assert_close(paged[0], dense[0], rtol=0, atol=1e-3)
        torch.testing.assert_close(paged[1], dense[1], rtol=0, atol=1e-5)
    run_and_check(q, from_paged(kp, table, n), from_paged(vp, table, n), cache_seqlens=lens)


@pytest.mark.parametrize("page_size", [16, 64])
def test_paged_append_with_rotary(page_size, poisoned_allocations):
    torch.manual_seed(7)
    n, n_new = 150, 3
    q, k, v = draw(2, n_new, 4, 32), draw(2, n_new, 2, 32), draw(2, n_new, 2, 32)
    kc, vc = draw(2, n, 2, 32), draw(2, n, 2, 32)
    lens = lengths(100, 131)
    cos, sin = rotary_tables(-(-n // page_size) * page_size, 16)  # the paged cache's capacity, as flash-attn asks
    kw = dict(cache_seqlens=lens, causal=True, rotary_cos=cos, rotary_sin=sin, rotary_interleaved=False)
    kp, table = to_paged(kc, page_size, seed=1)
    vp, _ = to_paged(vc, page_size, seed=1)
    out_dense, _ = run_and_check(q, kc, vc, k, v, **kw)
    out_paged = flash_attn_with_kvcache(q, kp, vp, k, v, block_table=table, **kw)
    torch.testing.assert_close(out_paged, out_dense, rtol=0, atol=1e-3)
    kd, vd = kc.clone(), vc.clone()
    flash_attn_with_kvcache(q, kd, vd, k, v, **kw)
    torch.testing.assert_close(from_paged(kp, table, n), kd, rtol=0, atol=0)
    torch.testing.assert_close(from_paged(vp, table, n), vd, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# Append, rotary, batch index, left padding
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_append_without_rotary(causal, poisoned_allocations):
    torch.manual_seed(8)
    q, k, v = draw(2, 3, 8, 48), draw(2, 3, 1, 48), draw(2, 3, 1, 48)
    kc, vc = draw(2, 90, 1, 48), draw(2, 90, 1, 48)
    run_and_check(q, kc, vc, k, v, cache_seqlens=lengths(87, 20), causal=causal)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_append_with_rotary(interleaved, causal, poisoned_allocations):
    torch.manual_seed(9)
    q, k, v = draw(2, 2, 4, 64), draw(2, 2, 2, 64), draw(2, 2, 2, 64)
    kc, vc = draw(2, 120, 2, 64), draw(2, 120, 2, 64)
    cos, sin = rotary_tables(120, 32)
    run_and_check(q, kc, vc, k, v, cache_seqlens=lengths(100, 7), causal=causal, rotary_cos=cos, rotary_sin=sin,
                  rotary_interleaved=interleaved)


def test_repeated_cache_batch_idx_reads_one_row(poisoned_allocations):
    """Two sequences may read the same cache row (flash-attn allows it)."""
    torch.manual_seed(10)
    q, kc, vc = draw(2, 1, 4, 32), draw(3, 50, 2, 32), draw(3, 50, 2, 32)
    run_and_check(q, kc, vc, cache_seqlens=lengths(50, 31), cache_batch_idx=lengths(1, 1))


def test_cache_batch_idx(poisoned_allocations):
    torch.manual_seed(11)
    q, k, v = draw(3, 1, 4, 32), draw(3, 1, 2, 32), draw(3, 1, 2, 32)
    kc, vc = draw(5, 80, 2, 32), draw(5, 80, 2, 32)
    idx = lengths(4, 0, 2)
    run_and_check(q, kc, vc, k, v, cache_seqlens=lengths(70, 3, 79), cache_batch_idx=idx, causal=True)


def test_cache_leftpad(poisoned_allocations):
    torch.manual_seed(12)
    q, k, v = draw(3, 2, 4, 32), draw(3, 2, 2, 32), draw(3, 2, 2, 32)
    kc, vc = draw(3, 100, 2, 32), draw(3, 100, 2, 32)
    cos, sin = rotary_tables(100, 32)
    run_and_check(q, kc, vc, k, v, cache_seqlens=lengths(90, 40, 12), cache_leftpad=lengths(10, 0, 12),
                  causal=True, rotary_cos=cos, rotary_sin=sin, num_splits=2)


# --------------------------------------------------------------------------------------------
# Window, softcap, ALiBi
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal,window", [(False, (20, 5)), (True, (33, -1)), (False, (-1, 0)), (False, (0, 0))])
def test_window(causal, window, poisoned_allocations):
    torch.manual_seed(13)
    q, kc, vc = draw(2, 3, 4, 32), draw(2, 260, 2, 32), draw(2, 260, 2, 32)
    run_and_check(q, kc, vc, cache_seqlens=lengths(260, 90), causal=causal, window_size=window, num_splits=3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softcap(dtype, poisoned_allocations):
    torch.manual_seed(14)
    q = draw(2, 1, 8, 64, dtype=dtype) * 3
    kc, vc = draw(2, 130, 2, 64, dtype=dtype), draw(2, 130, 2, 64, dtype=dtype)
    run_and_check(q, kc, vc, cache_seqlens=lengths(130, 66), softcap=5.0, num_splits=2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi(causal, per_batch, poisoned_allocations):
    torch.manual_seed(15)
    q, kc, vc = draw(2, 2, 4, 32), draw(2, 140, 2, 32), draw(2, 140, 2, 32)
    slopes = torch.rand(2, 4, device=DEVICE) * 0.3 if per_batch else torch.rand(4, device=DEVICE) * 0.3
    run_and_check(q, kc, vc, cache_seqlens=lengths(140, 45), causal=causal, alibi_slopes=slopes, num_splits=2)


def test_softmax_scale(poisoned_allocations):
    torch.manual_seed(16)
    q, kc, vc = draw(1, 1, 2, 32), draw(1, 70, 1, 32), draw(1, 70, 1, 32)
    run_and_check(q, kc, vc, cache_seqlens=70, softmax_scale=0.3)
    run_and_check(q, kc, vc, cache_seqlens=70, softmax_scale=-0.2)


# --------------------------------------------------------------------------------------------
# GPU-sized shapes
# --------------------------------------------------------------------------------------------

@pytest.mark.skipif(not HAS_CUDA, reason="large decode shapes need a GPU")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads", [(32, 4), (32, 32)])
@pytest.mark.parametrize("page_size", [None, 256, 16])
def test_gpu_decode_shapes(heads, kv_heads, page_size, dtype, poisoned_allocations):
    torch.manual_seed(17)
    n = 8192
    q, k, v = draw(4, 1, heads, 128, dtype=dtype), draw(4, 1, kv_heads, 128, dtype=dtype), draw(4, 1, kv_heads, 128, dtype=dtype)
    kc, vc = draw(4, n, kv_heads, 128, dtype=dtype), draw(4, n, kv_heads, 128, dtype=dtype)
    lens = lengths(8191, 4000, 1, 6000)
    out, _ = run_and_check(q, kc, vc, k, v, cache_seqlens=lens, causal=True)
    if page_size is not None:
        kp, table = to_paged(kc, page_size)
        vp, _ = to_paged(vc, page_size)
        paged = flash_attn_with_kvcache(q, kp, vp, k, v, cache_seqlens=lens, block_table=table, causal=True)
        torch.testing.assert_close(paged, out, rtol=0, atol=2e-3)


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------

def _case(**overrides):
    args = dict(q=draw(2, 1, 4, 32), k_cache=draw(2, 64, 2, 32), v_cache=draw(2, 64, 2, 32), cache_seqlens=lengths(10, 20))
    args.update(overrides)
    return args


def _paged_case(**overrides):
    args = dict(q=draw(2, 1, 4, 32), k_cache=draw(6, 16, 2, 32), v_cache=draw(6, 16, 2, 32),
                cache_seqlens=lengths(10, 20), block_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=DEVICE))
    args.update(overrides)
    return args


BAD = [
    pytest.param(lambda: _case(cache_seqlens=lengths(10, 65)), "exceed the cache capacity", id="seqlen-over-capacity"),
    pytest.param(lambda: _case(cache_seqlens=lengths(63, 1), k=draw(2, 2, 2, 32), v=draw(2, 2, 2, 32)),
                 "exceed the cache capacity", id="append-over-capacity"),
    pytest.param(lambda: _case(cache_seqlens=lengths(-1, 3)), ">= 0", id="negative-seqlen"),
    pytest.param(lambda: _case(cache_seqlens=torch.tensor([1, 2], device=DEVICE)), "torch.int32", id="seqlens-int64"),
    pytest.param(lambda: _case(cache_seqlens=lengths(1, 2, 3)), "shape", id="seqlens-shape"),
    pytest.param(lambda: _paged_case(block_table=torch.tensor([[0, 1], [2, 9]], dtype=torch.int32, device=DEVICE)),
                 "outside", id="block-table-out-of-range"),
    pytest.param(lambda: _paged_case(block_table=torch.tensor([[0, 1], [2, -1]], dtype=torch.int32, device=DEVICE)),
                 "outside", id="block-table-negative"),
    pytest.param(lambda: _paged_case(block_table=torch.tensor([[0, 1], [2, 3]], device=DEVICE)), "torch.int32",
                 id="block-table-int64"),
    pytest.param(lambda: _paged_case(block_table=torch.tensor([[0, 1]], dtype=torch.int32, device=DEVICE)), "shape",
                 id="block-table-shape"),
    pytest.param(lambda: _paged_case(cache_seqlens=lengths(10, 33)), "exceed the cache capacity", id="paged-over-capacity"),
    pytest.param(lambda: _paged_case(k_cache=draw(6, 8, 2, 32), v_cache=draw(6, 8, 2, 32)), "multiple of 16",
                 id="page-size"),
    pytest.param(lambda: _case(cache_batch_idx=lengths(0, 2)), "cache_batch_idx", id="batch-idx-out-of-range"),
    pytest.param(lambda: _case(k_cache=draw(3, 64, 2, 32), v_cache=draw(3, 64, 2, 32)), "cache_batch_idx",
                 id="cache-batch-mismatch"),
    pytest.param(lambda: _case(cache_leftpad=lengths(11, 0)), "cache_leftpad", id="leftpad-past-seqlen"),
    pytest.param(lambda: _case(q=draw(2, 1, 3, 32)), "multiple", id="heads"),
    pytest.param(lambda: _case(q=draw(2, 1, 4, 32, dtype=torch.bfloat16)), "dtype", id="dtype-mismatch"),
    pytest.param(lambda: _case(q=draw(2, 1, 4, 32).float(), k_cache=draw(2, 64, 2, 32).float(),
                               v_cache=draw(2, 64, 2, 32).float()), "float16", id="float32"),
    pytest.param(lambda: _case(k=draw(2, 1, 2, 32)), "together", id="k-without-v"),
    pytest.param(lambda: _case(k=draw(2, 1, 1, 32), v=draw(2, 1, 1, 32)), "shape", id="k-heads"),
    pytest.param(lambda: _case(rotary_cos=rotary_tables(64, 32)[0], rotary_sin=rotary_tables(64, 32)[1]),
                 "need the new k and v", id="rotary-without-append"),
    pytest.param(lambda: _case(rotary_cos=rotary_tables(20, 32)[0], rotary_sin=rotary_tables(20, 32)[1],
                               k=draw(2, 1, 2, 32), v=draw(2, 1, 2, 32)), "positions", id="rotary-too-short"),
    pytest.param(lambda: _case(rotary_cos=rotary_tables(63, 32)[0], rotary_sin=rotary_tables(63, 32)[1],
                               k=draw(2, 1, 2, 32), v=draw(2, 1, 2, 32)), "positions", id="rotary-shorter-than-cache"),
    pytest.param(lambda: _case(rotary_cos=rotary_tables(64, 8)[0], rotary_sin=rotary_tables(64, 8)[1],
                               k=draw(2, 1, 2, 32), v=draw(2, 1, 2, 32)), "divisible by 16", id="rotary-dim-8"),
    pytest.param(lambda: _case(rotary_cos=rotary_tables(64, 32, torch.float32)[0],
                               rotary_sin=rotary_tables(64, 32, torch.float32)[1],
                               k=draw(2, 1, 2, 32), v=draw(2, 1, 2, 32)), "same dtype as query", id="rotary-dtype"),
    pytest.param(lambda: _case(k=draw(2, 1, 2, 32), v=draw(2, 1, 2, 32), cache_seqlens=None), "seqlens_k must also",
                 id="append-without-seqlens"),
    pytest.param(lambda: _case(q=draw(2, 65, 4, 32), k=draw(2, 1, 2, 32), v=draw(2, 1, 2, 32), cache_seqlens=3),
                 "seqlen <= the seqlen of the KV cache", id="append-queries-past-cache"),
    pytest.param(lambda: _case(q=draw(0, 1, 4, 32), cache_seqlens=3), "batch size must be positive", id="batch-0"),
    pytest.param(lambda: _case(rotary_cos=rotary_tables(64, 80)[0], rotary_sin=rotary_tables(64, 80)[1],
                               k=draw(2, 1, 2, 32), v=draw(2, 1, 2, 32)), "rotary_dim", id="rotary-dim"),
    pytest.param(lambda: _case(window_size=(1,)), "window_size", id="window"),
    pytest.param(lambda: _case(softcap=float("nan")), "softcap", id="softcap"),
    pytest.param(lambda: _case(num_splits=129), "num_splits", id="num-splits"),
    pytest.param(lambda: _case(alibi_slopes=torch.ones(3, device=DEVICE)), "alibi_slopes", id="alibi-shape"),
]


@pytest.mark.parametrize("make,message", BAD)
def test_bad_input_is_refused(make, message):
    with pytest.raises(ValueError, match=message) as raised:
        flash_attn_with_kvcache(**make())
    assert isinstance(raised.value, RuntimeError)  # what flash-attn raises, for callers that catch it


def test_index_tensors_that_are_not_contiguous_mean_their_values(poisoned_allocations):
    """A strided cache_batch_idx, an expanded cache_leftpad and a strided block_table (junk between the used
    entries) give the result of their contiguous copies: the kernels index them as contiguous tensors."""
    torch.manual_seed(21)
    q, kc, vc = draw(3, 1, 4, 32), draw(4, 64, 2, 32), draw(4, 64, 2, 32)
    lens = lengths(40, 50, 30)
    idx = torch.tensor([2, 9, 0, 9, 3, 9], dtype=torch.int32, device=DEVICE)[::2]
    leftpad = torch.tensor([4], dtype=torch.int32, device=DEVICE).expand(3)
    for kw in (dict(cache_batch_idx=idx), dict(cache_leftpad=leftpad), dict(cache_batch_idx=idx, cache_leftpad=leftpad)):
        rows = slice(None) if "cache_batch_idx" in kw else slice(0, 3)
        strided = flash_attn_with_kvcache(q, kc[rows], vc[rows], cache_seqlens=lens, num_splits=2, **kw)
        plain = flash_attn_with_kvcache(q, kc[rows], vc[rows], cache_seqlens=lens, num_splits=2,
                                        **{name: t.contiguous() for name, t in kw.items()})
        torch.testing.assert_close(strided, plain, rtol=0, atol=0)
    kp, table = to_paged(kc[:3], 16)
    vp, _ = to_paged(vc[:3], 16)
    junk = torch.full((3, 2 * table.shape[1]), 10**6, dtype=torch.int32, device=DEVICE)
    junk[:, ::2] = table
    strided = flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=junk[:, ::2], num_splits=2)
    plain = flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table, num_splits=2)
    torch.testing.assert_close(strided, plain, rtol=0, atol=0)


def test_options_flash_attn_reads_leniently(poisoned_allocations):
    """What flash-attn's C++ accepts: a window of 0-dim tensors, a negative softcap (off), a negative
    num_splits (choose), a NumPy bool; and a window bound of at least the cache's capacity counts as
    unbounded, so such a window is not local and q is rotated at cache_seqlens alone, as there."""
    np = pytest.importorskip("numpy")
    torch.manual_seed(22)
    q, kc, vc = draw(2, 3, 4, 32), draw(2, 64, 2, 32), draw(2, 64, 2, 32)
    lens = lengths(40, 61)
    base = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, window_size=(5, 0))
    same = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, window_size=torch.tensor([5, 0]), softcap=-1.0,
                                   num_splits=-3, causal=np.bool_(False))
    torch.testing.assert_close(same, base, rtol=0, atol=0)
    k, v = draw(2, 1, 2, 32), draw(2, 1, 2, 32)
    cos, sin = rotary_tables(64, 32)
    rotated = [flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, v, cos, sin, cache_seqlens=lens, window_size=w)
               for w in ((64, 64), (-1, -1))]
    torch.testing.assert_close(rotated[0], rotated[1], rtol=0, atol=0)


def test_paged_with_batch_idx_is_refused():
    with pytest.raises(NotImplementedError, match="cache_batch_idx"):
        flash_attn_with_kvcache(**_paged_case(cache_batch_idx=lengths(0, 1)))


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="no fp8 dtype in this torch")
def test_fp8_is_refused():
    kc = torch.zeros(2, 64, 2, 32, device=DEVICE).to(torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="fp8"):
        flash_attn_with_kvcache(draw(2, 1, 4, 32), kc, kc.clone(), cache_seqlens=3)


def test_failed_check_leaves_the_cache_alone():
    args = _case(cache_seqlens=lengths(63, 1), k=draw(2, 2, 2, 32), v=draw(2, 2, 2, 32))
    before = args["k_cache"].clone()
    with pytest.raises(ValueError):
        flash_attn_with_kvcache(**args)
    assert torch.equal(args["k_cache"], before)
