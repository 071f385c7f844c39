"""Attention written the plain way: the float64 reference and PyTorch's standard attention.

`attention_reference(..., upcast=True)` computes in float64 and is what every accuracy check
compares against. With `upcast=False` the same code runs in the inputs' precision: that is the
"standard attention" baseline of the paper (matmul, softmax, matmul, materialising the N x N
matrix), used both as a speed/memory provider and as the yardstick for acceptable error.

Semantics match `kernels.flash_attention`: (B, H, N, D) layout, grouped-query heads, causal
mask aligned to the bottom-right corner, rows that see no key give zeros and lse = -inf.
"""

from __future__ import annotations

import math

import torch


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        softmax_scale: float | None = None, upcast: bool = True):
    """Return (out, lse): out like q (float64 when upcast), lse (B, H, Nq) float32/float64."""
    n_q, n_k, head_dim = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    group = q.shape[1] // k.shape[1]
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, Nq, Nk)
    if causal:
        rows = torch.arange(n_q, device=q.device)[:, None]
        cols = torch.arange(n_k, device=q.device)[None, :]
        scores = scores.masked_fill(cols > rows + (n_k - n_q), float("-inf"))
    lse = torch.logsumexp(scores.float() if not upcast else scores, dim=-1)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no visible key -> 0
    out = torch.matmul(probs.to(v.dtype), v)
    return out, lse
