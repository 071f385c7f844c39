"""Attention written the plain way: the float64 reference and PyTorch's standard attention.

`attention_reference(..., upcast=True)` computes in float64 and is what every accuracy check
compares against. With `upcast=False` the same code runs in the inputs' precision: that is the
"standard attention" baseline of the paper (matmul, softmax, matmul, materialising the N x N
matrix), the yardstick for acceptable error; `standard_attention` is the same computation
without the log-sum-exp, the speed and memory provider.

Semantics match `kernels.flash_attention`: (B, H, N, D) layout, grouped-query heads, causal
mask and sliding window aligned to the bottom-right corner, softcap, ALiBi and an explicit
dropout mask; rows that see no key give zeros and lse = -inf.
"""

from __future__ import annotations

import math

import torch


def _visible(n_q, n_k, causal, window_size, device):
    """(Nq, Nk) bool: query i sees key j (bottom-right aligned causal mask and sliding window)."""
    rows = torch.arange(n_q, device=device)[:, None]
    cols = torch.arange(n_k, device=device)[None, :]
    diag = rows + (n_k - n_q)
    left, right = window_size
    if causal:
        right = 0
    visible = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if left >= 0:
        visible &= cols >= diag - left
    if right >= 0:
        visible &= cols <= diag + right
    return visible


def _scores(q, k, causal, softmax_scale, window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """Scores (B, H, Nq, Nk): scaled, capped, masked (-inf) and ALiBi-biased, with K repeated
    over its query-head group; the order of flash-attn's attention_ref."""
    n_q, n_k, head_dim = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    if causal or window_size[0] >= 0 or window_size[1] >= 0:
        scores = scores.masked_fill(~_visible(n_q, n_k, causal, window_size, q.device), float("-inf"))
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(scores.dtype)
        slopes = slopes.view(1, -1, 1, 1) if slopes.dim() == 1 else slopes[:, :, None, None]
        rows = torch.arange(n_q, device=q.device)[:, None]
        cols = torch.arange(n_k, device=q.device)[None, :]
        scores = scores - slopes * (rows + (n_k - n_q) - cols).abs().to(scores.dtype)
    return scores


def _weighted_values(probs, v, causal, n_q, n_k, dropout_mask=None, dropout_p=0.0, window_size=(-1, -1)):
    group = probs.shape[1] // v.shape[1]
    if group > 1:
        v = v.repeat_interleave(group, dim=1)
    if (causal and n_q > n_k) or window_size[0] >= 0 or window_size[1] >= 0:
        probs = probs.nan_to_num(0.0)  # rows that see no key: softmax of all -inf is NaN, we define 0
    if dropout_mask is not None:
        probs = probs.masked_fill(~dropout_mask, 0.0) / (1.0 - dropout_p)
    return torch.matmul(probs.to(v.dtype), v)


def standard_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       softmax_scale: float | None = None) -> torch.Tensor:
    """The paper's baseline in the inputs' precision: matmul, softmax, matmul (N x N in memory)."""
    probs = torch.softmax(_scores(q, k, causal, softmax_scale), dim=-1)
    return _weighted_values(probs, v, causal, q.shape[2], k.shape[2])


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        softmax_scale: float | None = None, upcast: bool = True, *,
                        window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                        alibi_slopes: torch.Tensor | None = None, dropout_mask: torch.Tensor | None = None,
                        dropout_p: float = 0.0):
    """Return (out, lse): out like q (float64 when upcast), lse (B, H, Nq) (float64 / float32).

    window_size, softcap, alibi_slopes: as `kernels.flash_attention`. dropout_mask: bool
    (B, H, Nq, Nk), True where kept; the kept probabilities are scaled by 1 / (1 - dropout_p).
    lse is that of the undropped softmax.
    """
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    scores = _scores(q, k, causal, softmax_scale, window_size, softcap, alibi_slopes)
    lse = torch.logsumexp(scores if upcast else scores.float(), dim=-1)
    out = _weighted_values(torch.softmax(scores, dim=-1), v, causal, q.shape[2], k.shape[2], dropout_mask, dropout_p,
                           window_size)
    return out, lse
