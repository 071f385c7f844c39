"""The Hopper forward's tile walk with its features, emulated in float64 on the CPU; and the backward's
query-tile range under a window, checked in integers.

kernels/_hopper.py's Gluon kernel never runs on Triton's interpreter. This mirrors its index
arithmetic line for line (the program's ring of key tiles from `first_tile`, each consumer's own
range [t0, n_tiles) inside it, the tiles `_masked_window` / `_masked` mask and the ones they leave
unmasked, ALiBi's float distance, softcap, the guarded online softmax) in Python integers and
float64 tensors, and compares the output and log-sum-exp with kernels.reference on random shapes,
windows, softcaps and slopes. A bound one tile short, a tile left unmasked that holds an invisible
entry, or a row whose first tiles it cannot see, shows up as a mismatch or an assertion.

The backward (kernels/_hopper_bwd.py) masks every tile under a feature, so what can go wrong there is
the range of query tiles a program of 128 keys streams (m_start, n_m): `backward_ranges` checks, for
every key block of random shapes and windows, that each query seeing one of its keys is streamed and
that no tile past the last query is.

    PYTHONPATH=. python3 notes/round22/hopper_features_emulate.py [cases]
"""
from __future__ import annotations

import math
import random
import sys

import torch

from kernels.options import AttentionOptions
from kernels.reference import attention_reference

HALF, BLOCK_N_BY_DIM = 64, {64: 128, 128: 128, 256: 64}
LOG2E = 1.4426950408889634


def cdiv(a, b):
    return -(-a // b)


def program_tiles(block_row, n_q, n_k, win_left, win_right, block_n, CAUSAL, WINDOW) -> tuple[int, int]:
    """_hopper_fwd's ring for the program of query rows [block_row, + 2 x HALF): (first_tile, n_total)."""
    off = n_k - n_q
    if WINDOW:
        first_tile = max(min(block_row, n_q - 1) + off - win_left, 0) // block_n
        last_row = min(block_row + 2 * HALF - 1, n_q - 1)
        n_total = cdiv(min(last_row + off + win_right + 1, n_k), block_n) - first_tile
    else:
        first_tile = 0
        n_total = cdiv(min(n_k, block_row + 2 * HALF + off), block_n) if CAUSAL else cdiv(n_k, block_n)
    return first_tile, n_total


def consumer_tiles(row0, n_q, n_k, win_left, win_right, block_n, first_tile, n_total, CAUSAL,
                   WINDOW) -> tuple[int, int, int, int, int]:
    """_consumer's own ring tiles [t0, n_tiles) for query rows [row0, + HALF) and its mask bounds:
    (base, t0, n_tiles, full_from, mask_from), key tile = base + ring tile."""
    off = n_k - n_q
    if WINDOW:
        first = min(row0, n_q - 1) + off
        last = min(row0 + HALF - 1, n_q - 1) + off
        base = first_tile
        t0 = max(first - win_left, 0) // block_n - base
        n_tiles = cdiv(min(last + win_right + 1, n_k), block_n) - base
        full_from = last - win_left
        mask_from = min(first + win_right + 1, n_k)
    else:
        base, t0, full_from = 0, 0, 0
        if CAUSAL:
            n_tiles = cdiv(min(n_k, row0 + HALF + off), block_n)
            mask_from = min(n_k, row0 + off + 1)
        else:
            n_tiles, mask_from = n_total, n_k
    return base, t0, n_tiles, full_from, mask_from


def emulate(q, k, v, scale, causal, window, softcap, slopes):
    """out (B, H, Nq, D) and lse (B, H, Nq) as the kernel computes them, in float64."""
    b, h, n_q, d = q.shape
    hk, n_k = k.shape[1], k.shape[2]
    block_n = BLOCK_N_BY_DIM[64 if d <= 64 else 128 if d <= 128 else 256]
    opts = AttentionOptions(softmax_scale=scale, causal=causal, window_left=window[0], window_right=window[1],
                            softcap=softcap)
    f = opts.kernel_args(n_q, n_k, slopes, None, torch.empty(1))
    CAUSAL, WINDOW, SOFTCAP, ALIBI = f["CAUSAL"], f["WINDOW"], f["SOFTCAP"], f["ALIBI"]
    win_left, win_right = f["win_left"], f["win_right"]
    qk_scale = scale * LOG2E
    out = torch.full((b, h, n_q, d), float("nan"), dtype=torch.float64)
    lse = torch.full((b, h, n_q), float("nan"), dtype=torch.float64)
    off = n_k - n_q
    for z in range(b):
        for hh in range(h):
            kv = hh // (h // hk)
            kk, vv = k[z, kv].double(), v[z, kv].double()
            slope_log2 = float(slopes[z, hh]) * LOG2E if ALIBI else 0.0
            for pid in range(cdiv(n_q, 2 * HALF)):
                block_row = pid * 2 * HALF
                first_tile, n_total = program_tiles(block_row, n_q, n_k, win_left, win_right, block_n, CAUSAL, WINDOW)
                assert n_total >= 1 and first_tile >= 0 and (first_tile + n_total - 1) * block_n < n_k
                for which in (0, 1):
                    row0 = block_row + which * HALF
                    rows = torch.arange(row0, row0 + HALF)
                    base, t0, n_tiles, full_from, mask_from = consumer_tiles(row0, n_q, n_k, win_left, win_right,
                                                                             block_n, first_tile, n_total, CAUSAL,
                                                                             WINDOW)
                    assert 0 <= t0 < n_tiles <= n_total, (t0, n_tiles, n_total)
                    sm_scale = 1.0 if (SOFTCAP or ALIBI) else qk_scale
                    m_i = torch.full((HALF,), -math.inf, dtype=torch.float64)
                    l_i = torch.zeros(HALF, dtype=torch.float64)
                    acc = torch.zeros(HALF, d, dtype=torch.float64)
                    qq = torch.zeros(HALF, d, dtype=torch.float64)
                    valid = rows < n_q
                    qq[valid] = q[z, hh, rows[valid]].double()
                    for t in range(t0, n_tiles):
                        tile = base + t
                        start = tile * block_n
                        keys = torch.arange(start, start + block_n)
                        kt = torch.zeros(block_n, d, dtype=torch.float64)
                        vt = torch.zeros(block_n, d, dtype=torch.float64)
                        inside = keys < n_k  # TMA fills rows past the tensor's end with zeros
                        kt[inside], vt[inside] = kk[keys[inside]], vv[keys[inside]]
                        s = qq @ kt.T
                        if SOFTCAP:
                            s = torch.tanh(s * f["softcap_scale"]) * f["softcap_log2"]
                        elif ALIBI:
                            s = s * qk_scale
                        if ALIBI:
                            s = s - slope_log2 * ((rows + off).double()[:, None] - keys.double()[None, :]).abs()
                        diag = (rows + off)[:, None]
                        if WINDOW:
                            if start < full_from or start + block_n > mask_from:
                                vis = (keys[None, :] < n_k) & (keys[None, :] >= diag - win_left) & (
                                    keys[None, :] <= diag + win_right)
                                s = torch.where(vis, s, -math.inf)
                        elif start + block_n > mask_from:
                            vis = keys[None, :] < n_k
                            if CAUSAL:
                                vis = vis & (keys[None, :] <= diag)
                            s = torch.where(vis, s, -math.inf)
                        m_new = torch.maximum(m_i, s.max(dim=1).values * sm_scale)
                        m_use = torch.where(m_new == -math.inf, 0.0, m_new) if WINDOW else m_new
                        p = torch.exp2(s * sm_scale - m_use[:, None])
                        alpha = torch.exp2(m_i - m_use)
                        l_i = l_i * alpha + p.sum(dim=1)
                        acc = acc * alpha[:, None] + p @ vt
                        m_i = m_new
                    o = acc / l_i[:, None]
                    out[z, hh, rows[valid]] = o[valid]
                    lse[z, hh, rows[valid]] = ((m_i + torch.log2(l_i)) * math.log(2))[valid]
    return out, lse


EDGES = [0, 1, 2, 62, 63, 64, 65, 66, 126, 127, 128, 129, 130, 191, 192, 193, 255, 256, 257]


def backward_ranges(cases: int, rng: random.Random) -> int:
    """The backward kernel's query-tile range per key block (its WINDOW branch, line for line), against
    the queries that see a key of the block; returns the number of key blocks checked."""
    blocks = 0
    block_m, block_n = 64, 128
    for _ in range(cases):
        edge = rng.random() < 0.6
        n_q = rng.choice(EDGES[1:]) if edge else rng.randint(1, 700)
        n_k = max(1, n_q + rng.choice([0, 1, -1, 63, 64, 65, 127, 128, 129, -130])) if edge else rng.randint(1, 700)
        causal = rng.random() < 0.5
        pick = (lambda: rng.choice(EDGES)) if edge else (lambda: rng.randint(0, 500))
        left = pick() if rng.random() < 0.7 else -1
        right = pick() if rng.random() < 0.7 else -1
        if not sees_a_key(n_q, n_k, causal, (left, right)):
            continue
        f = AttentionOptions(softmax_scale=1.0, causal=causal, window_left=left,
                             window_right=right).kernel_args(n_q, n_k, None, None, torch.empty(1))
        if not f["WINDOW"]:
            continue
        win_left, win_right, off = f["win_left"], f["win_right"], n_k - n_q
        for key0 in range(0, n_k, block_n):
            m_start = max(key0 - off - win_right, 0) // block_m
            last_query = min(key0 + block_n, n_k) - 1 - off + win_left
            n_m = max(cdiv(min(last_query + 1, n_q), block_m) - m_start, 0)
            streamed = set(range(m_start * block_m, (m_start + n_m) * block_m))
            assert m_start + n_m <= cdiv(n_q, block_m), (n_q, n_k, left, right, key0)
            for query in range(n_q):
                lo, hi = query + off - win_left, query + off + win_right
                if max(lo, key0) <= min(hi, key0 + block_n - 1, n_k - 1):
                    assert query in streamed, (n_q, n_k, causal, left, right, key0, query)
            blocks += 1
    return blocks


def sees_a_key(n_q, n_k, causal, window):
    right = 0 if causal else window[1]
    return right < 0 or n_q <= n_k + right


def main(cases: int) -> int:
    rng = random.Random(2026)
    done = 0
    worst = 0.0
    while done < cases:
        d = rng.choice([32, 64, 128, 256])
        edge = rng.random() < 0.6  # lengths and windows at tile edges, where a bound one off shows
        n_q = rng.choice(EDGES[1:]) if edge else rng.randint(1, 400)
        n_k = max(1, n_q + rng.choice([0, 1, -1, 63, 64, 65, 127, 128, 129])) if edge else rng.randint(1, 400)
        causal = rng.random() < 0.5
        kind = rng.choice(["none", "left", "right", "both"])
        pick = (lambda: rng.choice(EDGES)) if edge else (lambda: rng.randint(0, 300))
        left = pick() if kind in ("left", "both") else -1
        right = pick() if kind in ("right", "both") else -1
        softcap = rng.choice([0.0, 0.0, 5.0, 30.0])
        alibi = rng.random() < 0.4
        if not sees_a_key(n_q, n_k, causal, (left, right)):
            continue  # hopper_unsupported sends these to the portable kernels
        b, h, hk = rng.randint(1, 2), rng.choice([2, 4]), rng.choice([1, 2])
        gen = torch.Generator().manual_seed(done)
        q = torch.randn(b, h, n_q, d, generator=gen, dtype=torch.float64)
        k = torch.randn(b, hk, n_k, d, generator=gen, dtype=torch.float64)
        v = torch.randn(b, hk, n_k, d, generator=gen, dtype=torch.float64)
        slopes = torch.rand(b, h, generator=gen, dtype=torch.float64).float() if alibi else None
        scale = d ** -0.5
        out, lse = emulate(q, k, v, scale, causal, (left, right), softcap, slopes)
        ref_out, ref_lse = attention_reference(q, k, v, causal=causal, softmax_scale=scale, window_size=(left, right),
                                               softcap=softcap, alibi_slopes=slopes, upcast=True)
        err = max((out - ref_out).abs().max().item(), (lse - ref_lse.double()).abs().max().item())
        worst = max(worst, err)
        label = f"b{b} h{h}/{hk} nq{n_q} nk{n_k} d{d} causal={causal} window=({left}, {right}) softcap={softcap} alibi={alibi}"
        if not err < 1e-9:
            print(f"MISMATCH {err:.2e}: {label}")
            return 1
        done += 1
    print(f"{cases} cases match the float64 reference (largest difference {worst:.1e})")
    blocks = backward_ranges(cases, rng)
    print(f"backward: every query that sees a key of its block is streamed, over {blocks} key blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
