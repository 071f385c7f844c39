"""The FLOP model by which every TFLOP/s in results/ is counted: the FlashAttention-2 paper's.

Forward: two matmuls, S = Q K^T and O = P V, each 2 * Nq * Nk * D multiply-adds counted as FLOPs,
so 4 * B * H * Nq * Nk * D. Causal attention with Nq == Nk needs half of the score matrix, so it
counts half. Backward: five matmuls (recompute S, then dV, dP, dQ, dK) against the forward's two,
so 2.5x the forward; forward + backward 3.5x. Softmax and masking are not counted, as in the paper.
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
