"""Attention written the plain way: the float64 reference and PyTorch's standard attention.

`attention_reference(..., upcast=True)` computes in float64 and is what every accuracy check
compares against. With `upcast=False` the same code runs in the inputs' precision: that is the
"standard attention" baseline of the paper (matmul, softmax, matmul, materialising the N x N
matrix), the yardstick for acceptable error; `standard_attention` is the same computation
without the log-sum-exp, the speed and memory provider.

Semantics match `kernels.flash_attention`: (B, H, N, D) layout, grouped-query heads, causal
mask aligned to the bottom-right corner, rows that see no key give zeros and lse = -inf.
"""

from __future__ import annotations

import math

import torch


def _scores(q, k, causal, softmax_scale):
    """Scaled scores (B, H, Nq, Nk) with K repeated over its query-head group and the causal mask."""
    n_q, n_k, head_dim = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        rows = torch.arange(n_q, device=q.device)[:, None]
        cols = torch.arange(n_k, device=q.device)[None, :]
        scores = scores.masked_fill(cols > rows + (n_k - n_q), float("-inf"))
    return scores


def _weighted_values(probs, v, causal, n_q, n_k):
    group = probs.shape[1] // v.shape[1]
    if group > 1:
        v = v.repeat_interleave(group, dim=1)
    if causal and n_q > n_k:
        probs = probs.nan_to_num(0.0)  # rows that see no key: softmax of all -inf is NaN, we define 0
    return torch.matmul(probs.to(v.dtype), v)


def standard_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       softmax_scale: float | None = None) -> torch.Tensor:
    """The paper's baseline in the inputs' precision: matmul, softmax, matmul (N x N in memory)."""
    probs = torch.softmax(_scores(q, k, causal, softmax_scale), dim=-1)
    return _weighted_values(probs, v, causal, q.shape[2], k.shape[2])


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        softmax_scale: float | None = None, upcast: bool = True):
    """Return (out, lse): out like q (float64 when upcast), lse (B, H, Nq) (float64 / float32)."""
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    scores = _scores(q, k, causal, softmax_scale)
    lse = torch.logsumexp(scores if upcast else scores.float(), dim=-1)
    out = _weighted_values(torch.softmax(scores, dim=-1), v, causal, q.shape[2], k.shape[2])
    return out, lse
