"""The FLOP model by which every TFLOP/s in results/ is counted: the FlashAttention-2 paper's.

Forward: two matmuls, S = Q K^T and O = P V, each 2 * Nq * Nk * D multiply-adds counted as FLOPs,
so 4 * B * H * Nq * Nk * D. Causal attention with Nq == Nk needs half of the score matrix, so it
counts half. Backward: five matmuls (recompute S, then dV, dP, dQ, dK) against the forward's two,
so 2.5x the forward; forward + backward 3.5x. Softmax and masking are not counted, as in the paper.

Masks other than the causal square (the `features` ablation: sliding windows, variable-length batches)
count the score entries that are actually visible, `visible_pairs`: forward 4 * H * pairs * D, the
same 2.5x and 3.5x for the passes. With no mask that is the paper's count; causal with Nq == Nk counts
N (N + 1) / 2 entries against the paper's N^2 / 2 (1/N more). A sliding window of w keys counts about
N * w; a variable-length batch the sum of its sequences' entries, not the padded batch's.
"""

# multiple of the forward's count, per mode of measurement
MODE_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


def attention_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                    causal: bool, mode: str) -> float:
    forward = 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim
    if causal and seqlen_q == seqlen_k:
        forward *= 0.5
    return forward * MODE_FACTOR[mode]


def matmul_flops(m: int, n: int, k: int) -> float:
    """An (m, k) @ (k, n) product: one multiply and one add per term."""
    return 2.0 * m * n * k


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool, window: tuple[int, int] = (-1, -1)) -> int:
    """Score entries (query i, key j) that a mask leaves visible, flash-attn's semantics: query i sees keys
    i + Nk - Nq - left .. i + Nk - Nq + right (a bound of -1 is unbounded; causal caps right at 0)."""
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    offset = seqlen_k - seqlen_q
    total = 0
    for i in range(seqlen_q):
        low = 0 if left < 0 else max(0, i + offset - left)
        high = seqlen_k - 1 if right < 0 else min(seqlen_k - 1, i + offset + right)
        total += max(0, high - low + 1)
    return total


def pairs_flops(heads: int, pairs: int, head_dim: int, mode: str) -> float:
    """Attention FLOPs of `pairs` visible score entries per head (summed over the batch), in `mode`."""
    return 4.0 * heads * pairs * head_dim * MODE_FACTOR[mode]
