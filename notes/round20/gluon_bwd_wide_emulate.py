"""The tiling of notes/round20/gluon_bwd_wide_draft.py run in float64 torch on the CPU, against autograd.

It follows the draft's index arithmetic step by step: the program grid (64 keys of a batch and kv head), the
query tiles of every head of the group from m_start (causal, bottom-right), the two consumers' 32-query halves
of S^T, dP^T, P^T and dS^T, dV and dK by column halves over the whole tile, dQ^T in 64-row chunks added into
the (B, H, D, N_pad) accumulator with TMA's clipping, the 256-wide boxes that read zeros past column D (192)
and the next head's rows past a head's end. It checks the index logic, not the Gluon lowering (layouts,
barriers, MMA operands), which only the GPU can.

    python3 notes/round20/gluon_bwd_wide_emulate.py   # prints the largest error of dq, dk, dv per case
"""
import math, torch
torch.manual_seed(0)
BLOCK_N, BLOCK_M, HALF_M, TILE_D, DQ_ROWS = 64, 64, 32, 256, 64

def tile(mat, row, rows, d):  # TMA box [rows, TILE_D] from (R, d) matrix, zero-filled out of bounds
    out = torch.zeros(rows, TILE_D, dtype=mat.dtype)
    r = mat[row:row + rows, :d]
    out[:r.shape[0], :r.shape[1]] = r
    return out

def emulate(q, k, v, do, o, lse, scale, causal):
    B, H, NQ, D = q.shape; KV, NK = k.shape[1], k.shape[2]; G = H // KV
    Q, K, V, DO = (x.reshape(-1, D) for x in (q, k, v, do))
    delta = (o * do).sum(-1).reshape(-1)
    lse = lse.reshape(-1)
    dk = torch.zeros_like(k).reshape(-1, D); dv = torch.zeros_like(v).reshape(-1, D)
    n_pad = math.ceil(NQ / 4) * 4
    dqt = torch.zeros(B * H * D, n_pad, dtype=q.dtype)
    n_chunks = math.ceil(D / 64)
    for pid0 in range(math.ceil(NK / BLOCK_N)):
        for off_hkv in range(B * KV):
            key0 = pid0 * BLOCK_N
            q_head0 = (off_hkv // KV) * (KV * G) + (off_hkv % KV) * G
            kv_row = off_hkv * NK + key0
            n_m_total = math.ceil(NQ / BLOCK_M)
            m_start = max(key0 - (NK - NQ), 0) // BLOCK_M if causal else 0
            n_m = max(n_m_total - m_start, 0)
            Kt, Vt = tile(K, kv_row, BLOCK_N, D), tile(V, kv_row, BLOCK_N, D)
            dkacc = [torch.zeros(BLOCK_N, TILE_D // 2, dtype=q.dtype) for _ in range(2)]
            dvacc = [torch.zeros(BLOCK_N, TILE_D // 2, dtype=q.dtype) for _ in range(2)]
            keys = key0 + torch.arange(BLOCK_N)
            for t in range(G * n_m):
                head = q_head0 + t // n_m
                q0 = (m_start + t % n_m) * BLOCK_M
                row = head * NQ + q0
                Qt, DOt = tile(Q, row, BLOCK_M, D), tile(DO, row, BLOCK_M, D)
                PT = torch.zeros(BLOCK_N, BLOCK_M, dtype=q.dtype); DST = torch.zeros_like(PT)
                for w in range(2):
                    queries = q0 + w * HALF_M + torch.arange(HALF_M)
                    inq = queries < NQ
                    idx = (head * NQ + queries).clamp(max=len(lse) - 1)
                    l = torch.where(inq, lse[idx], torch.zeros(()))
                    dl = torch.where(inq, delta[idx], torch.zeros(()))
                    qh = Qt[w * HALF_M:(w + 1) * HALF_M, :n_chunks * 64]
                    dh = DOt[w * HALF_M:(w + 1) * HALF_M, :n_chunks * 64]
                    st = Kt[:, :n_chunks * 64] @ qh.T
                    dpt = Vt[:, :n_chunks * 64] @ dh.T
                    vis = (keys[:, None] < NK) & (queries[None, :] < NQ)
                    if causal:
                        vis &= keys[:, None] <= queries[None, :] + (NK - NQ)
                    pt = torch.where(vis, torch.exp(st * scale - l[None, :]), torch.zeros(()))
                    dst = pt * (dpt - dl[None, :])
                    PT[:, w * HALF_M:(w + 1) * HALF_M] = pt; DST[:, w * HALF_M:(w + 1) * HALF_M] = dst
                    for c in range(n_chunks):  # dQ^T chunk, TMA reduce with clipping
                        chunk = Kt[:, c * 64:(c + 1) * 64].T @ dst * scale  # (64 d, 32 q)
                        r0, c0 = head * D + c * DQ_ROWS, q0 + w * HALF_M
                        rr = min(DQ_ROWS, B * H * D - r0); cc = min(HALF_M, NQ - c0)
                        if rr > 0 and cc > 0:
                            dqt[r0:r0 + rr, c0:c0 + cc] += chunk[:rr, :cc]
                for w in range(2):
                    cols = slice(w * 128, (w + 1) * 128)
                    dvacc[w] += PT @ DOt[:, cols]
                    dkacc[w] += DST @ Qt[:, cols]
            for w in range(2):
                for i in range(BLOCK_N):
                    if key0 + i < NK:
                        for j in range(128):
                            col = w * 128 + j
                            if col < D:
                                dk[kv_row + i, col] = dkacc[w][i, j] * scale
                                dv[kv_row + i, col] = dvacc[w][i, j]
    dq = dqt.reshape(B, H, D, n_pad)[..., :NQ].transpose(2, 3)
    return dq, dk.reshape(k.shape), dv.reshape(v.shape)

def reference(q, k, v, do, scale, causal):
    G = q.shape[1] // k.shape[1]
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    kk, vv = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = q @ kk.transpose(-1, -2) * scale
    if causal:
        nq, nk = s.shape[-2:]
        mask = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq)
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ vv
    o.backward(do)
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad

for shape in [(1, 2, 2, 130, 130, 256), (1, 4, 2, 70, 90, 256), (2, 3, 1, 29, 85, 192), (1, 2, 1, 1, 70, 192), (1,2,2,64,64,256)]:
    for causal in (False, True):
        if causal and shape[3] > shape[4]: continue
        B, H, KV, NQ, NK, D = shape
        q = torch.randn(B, H, NQ, D, dtype=torch.float64); k = torch.randn(B, KV, NK, D, dtype=torch.float64)
        v = torch.randn_like(k); do = torch.randn_like(q)
        o, lse, gq, gk, gv = reference(q, k, v, do, D ** -0.5, causal)
        dq, dk, dv = emulate(q, k, v, do, o, lse, D ** -0.5, causal)
        errs = [(a - b).abs().max().item() for a, b in ((dq, gq), (dk, gk), (dv, gv))]
        print(shape, causal, ["%.1e" % e for e in errs], "OK" if max(errs) < 1e-9 else "BAD")
