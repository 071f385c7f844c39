"""FlashAttention-2 in Triton: the engine that the experiments measure.

    from kernels import flash_attention
    o = flash_attention(q, k, v, causal=True)          # (B, H, N, D), like torch SDPA
    o, lse = flash_attention(q, k, v, return_lse=True)

    from kernels import flash_attn_func                # flash-attn 2.8's API: (B, N, H, D)
    o = flash_attn_func(q, k, v, 0.0, causal=True)      # dropout_p is the 4th argument, as there

Layout: `_forward.py` and `_backward.py` hold the Triton kernels and their launchers,
`_fa1.py` the FlashAttention-1 kernels behind `algorithm="fa1"`, `_features.py` the score
transform and masks (window, softcap, ALiBi, dropout) both passes share, `options.py` the one
options value the ops carry, `attention.py` the checks (bad input raises `errors.InputError`, a ValueError and a RuntimeError),
the torch.library ops and autograd, `flash_attn_interface.py` flash-attn's six public functions
(dense, packed, varlen) over them,
`_decode.py` the split-KV decoding kernels and `kvcache.py` flash-attn's `flash_attn_with_kvcache` over them, `tiles.py` the tile configs, `reference.py` the float64
reference and standard attention. `_hopper.py` is the Hopper (sm_90) forward in Triton's Gluon
dialect, the default on sm_90 at head dims 96, 128, 192 and 256 and at 64 from 4096 keys, where it covers the call (`flash_attention(...,
hopper=None)`; True forces it, False the portable forward), `_hopper_bwd.py` the one-pass Hopper
backward in Gluon (`_hopper_bwd_wide.py` at head dims 192 and 256), the default on sm_90 at head dims 64, 128,
192 and 256
(`hopper_backward=None`; True forces it, False and deterministic=True the portable backward).
`_launch.py` launches kept compiled kernels directly. Nothing here knows about the experiments.
"""

from kernels.attention import SUPPORTED_DTYPES, flash_attention
from kernels.errors import InputError
from kernels.flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                                          flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                                          flash_attn_varlen_qkvpacked_func)
from kernels.kvcache import flash_attn_with_kvcache
from kernels.reference import attention_reference, standard_attention
from kernels.tiles import MAX_HEAD_DIM, TileConfig, TileFallbackWarning, default_tiles

__all__ = ["flash_attention", "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func",
           "flash_attn_with_kvcache",
           "attention_reference", "standard_attention", "TileConfig", "TileFallbackWarning", "default_tiles",
           "SUPPORTED_DTYPES", "MAX_HEAD_DIM", "InputError"]
