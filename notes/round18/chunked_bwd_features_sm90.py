"""The portable backward at d192 in chunks, per training feature, under the 64 x 64 and 32 x 64 tiles (8 warps,
2 stages): registers, spills and shared memory at sm_90 (no GPU; tests/sm90_compile.py's recorder and ptxas).

    PYTHONPATH=. python3 notes/round18/chunked_bwd_features_sm90.py > notes/round18/chunked_bwd_features_sm90.txt

fp16, 1 x 2 heads x 1024 keys, causal.
"""
import sys

import torch

sys.path.insert(0, "tests")
sys.path.insert(0, "notes")
import head_dim_chunks_sm90 as h  # noqa: E402
import sm90_compile  # noqa: E402

from kernels import TileConfig, flash_attention  # noqa: E402

FEATURES = {"plain": {}, "window": dict(window_size=(256, 0)), "softcap": dict(softcap=10.0),
            "alibi": dict(alibi_slopes=torch.rand(2)), "dropout": dict(dropout_p=0.1),
            "every feature": dict(window_size=(256, 0), softcap=10.0, alibi_slopes=torch.rand(2), dropout_p=0.1)}

print(f"{'case':<44}{'kernel':<16}{'warps':>6}{'stages':>7}{'regs':>6}{'spill B':>8}{'smem KiB':>9}")
for name, feature in FEATURES.items():
    for config in ((64, 64, 8, 2), (32, 64, 8, 2)):
        launches = sm90_compile.launches_of(flash_attention, *h.qkv(192), causal=True, hopper=False,
                                            hopper_backward=False, bwd_tiles=TileConfig(*config), **feature)
        h.report(f"d192 {name} bwd {'x'.join(map(str, config))}",
                 [launch for launch in launches if "bwd" in launch.kernel.__name__])
