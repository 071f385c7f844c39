"""A small synthetic results set that follows the tidy schema, for tests and for previewing the report.

The numbers are shaped like an H200 run (the providers' TFLOP/s rise with sequence length towards a
plateau, standard attention's memory grows with n^2 and runs out at the longest length) but they are
made up: `source` says "synthetic" on every row so that nothing drawn from them can pass for a measurement.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.load import COLUMNS, results_path

GIB = 2**30
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
HIDDEN = 2048
TOKENS = 16384
MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
# plateau TFLOP/s per provider and mode (non-causal, d=128); causal and d=64 scale these down
PLATEAU = {
    "ours": {"fwd": 470.0, "bwd": 330.0, "fwd_bwd": 360.0},
    "sdpa_flash": {"fwd": 330.0, "bwd": 305.0, "fwd_bwd": 312.0},
    "sdpa_cudnn": {"fwd": 580.0, "bwd": 505.0, "fwd_bwd": 530.0},
    "sdpa_efficient": {"fwd": 176.0, "bwd": 140.0, "fwd_bwd": 150.0},
    "flex": {"fwd": 450.0, "bwd": 360.0, "fwd_bwd": 400.0},
    "standard": {"fwd": 55.0, "bwd": 100.0, "fwd_bwd": 82.0},
}
PROVENANCE = {"gpu": "NVIDIA H200", "driver": "580.00", "cuda": "13.0", "torch": "2.11.0", "triton": "3.6.0",
              "commit": "0000000", "timestamp": "2026-01-01T00:00:00Z", "host_kind": "cuda", "source": "synthetic"}


def attention_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal, mode) -> float:
    """The paper's count: forward 4*B*H*Nq*Nk*D, halved when causal, backward 2.5x, both 3.5x."""
    flops = 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim * MODE_FLOP_FACTOR[mode]
    return flops / 2 if causal and seqlen_q == seqlen_k else flops


def _row(experiment, provider, mode, *, seqlen, head_dim, causal=0, batch=None, heads=None, dtype="fp16",
         variant="default", tflops=None, peak_mem_bytes=None, status="ok", note="", **extra) -> dict:
    heads = heads or HIDDEN // head_dim
    batch = batch or max(1, TOKENS // seqlen)
    row = dict.fromkeys(COLUMNS, "")
    row.update(PROVENANCE, experiment=experiment, provider=provider, variant=variant, mode=mode, dtype=dtype,
               batch=batch, heads=heads, kv_heads=heads, seqlen_q=seqlen, seqlen_k=seqlen, head_dim=head_dim,
               causal=causal, status=status, note=note)
    if status == "ok":
        if tflops is not None:
            ms = attention_flops(batch, heads, seqlen, seqlen, head_dim, causal, mode) / (tflops * 1e9)
            row.update(ms=ms, ms_p20=ms * 0.99, ms_p80=ms * 1.01, tflops=tflops)
        if peak_mem_bytes is not None:
            row["peak_mem_bytes"] = int(peak_mem_bytes)
    row.update(extra)
    return row


def _tflops(provider, mode, seqlen, head_dim, causal) -> float:
    ramp = seqlen / (seqlen + 600.0)
    scale = (0.85 if head_dim == 64 else 1.0) * (0.8 if causal else 1.0)
    if provider == "standard" and causal:
        scale *= 0.45  # computes the full matrix, credited with half the FLOPs
    return PLATEAU[provider][mode] * ramp * scale


def _memory(provider, batch, heads, seqlen, head_dim) -> float:
    linear = 4 * batch * heads * seqlen * head_dim * 2 * 2.5  # q, k, v, o and their gradients in fp16
    if provider == "standard":
        return linear + 3 * batch * heads * seqlen * seqlen * 2
    return linear + batch * heads * seqlen * 4 * 2


def speed_rows() -> list[dict]:
    rows = []
    for provider in PLATEAU:
        for mode in MODE_FLOP_FACTOR:
            for head_dim in HEAD_DIMS:
                for causal in (0, 1):
                    for seqlen in SEQLENS:
                        if provider == "standard" and seqlen == SEQLENS[-1]:
                            rows.append(_row("speed", provider, mode, seqlen=seqlen, head_dim=head_dim,
                                             causal=causal, status="oom", note="CUDA out of memory"))
                            continue
                        rows.append(_row("speed", provider, mode, seqlen=seqlen, head_dim=head_dim, causal=causal,
                                         tflops=_tflops(provider, mode, seqlen, head_dim, causal)))
    return rows


def tiles_rows() -> list[dict]:
    rows = []
    for mode in ("fwd", "bwd"):
        for head_dim in HEAD_DIMS:
            for num_warps in (4, 8):
                for num_stages in (2, 3, 4):
                    for block_m in (64, 128):
                        for block_n in (32, 64, 128):
                            tiles = dict(block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
                                         recompute=1)
                            if head_dim == 128 and block_m == 128 and block_n == 128 and num_stages == 4:
                                rows.append(_row("tiles", "ours", mode, seqlen=8192, head_dim=head_dim,
                                                 status="unsupported", note="out of shared memory", **tiles))
                                continue
                            balance = 1.0 - 0.12 * abs(block_m / 128 - 1) - 0.15 * abs(block_n / 64 - 1)
                            balance *= 1.0 - 0.04 * abs(num_stages - 3) - (0.05 if num_warps == 4 else 0.0)
                            tflops = PLATEAU["ours"][mode] * balance * (0.85 if head_dim == 64 else 1.0)
                            rows.append(_row("tiles", "ours", mode, seqlen=8192, head_dim=head_dim, tflops=tflops,
                                             **tiles))
    return rows


def causal_rows() -> list[dict]:
    rows = []
    for mode in MODE_FLOP_FACTOR:
        for head_dim in HEAD_DIMS:
            for seqlen in SEQLENS:
                full = _tflops("ours", mode, seqlen, head_dim, 0)
                speedup = 1.0 + 0.8 * seqlen / (seqlen + 1500.0)
                for variant, causal, tflops in (("full", 0, full), ("mask_all_tiles", 1, full / 2),
                                                ("skip_tiles", 1, full / 2 * speedup)):
                    rows.append(_row("causal", "ours", mode, seqlen=seqlen, head_dim=head_dim, causal=causal,
                                     variant=variant, tflops=tflops, recompute=1))
    return rows


def seqlen_rows() -> list[dict]:
    rows = []
    for provider in ("ours", "standard"):
        for mode in ("fwd", "fwd_bwd"):
            for seqlen in (*SEQLENS, 32768):
                common = dict(seqlen=seqlen, head_dim=128, batch=4, heads=16)
                memory = _memory(provider, 4, 16, seqlen, 128)
                if memory > 120 * GIB:
                    rows.append(_row("seqlen", provider, mode, status="oom", note="CUDA out of memory", **common))
                    continue
                rows.append(_row("seqlen", provider, mode, tflops=_tflops(provider, mode, seqlen, 128, 0),
                                 peak_mem_bytes=memory, **common))
    return rows


def recompute_rows() -> list[dict]:
    rows = []
    for mode in ("bwd", "fwd_bwd"):
        for seqlen in SEQLENS:
            batch = TOKENS // seqlen
            for recompute, variant in ((1, "fa2"), (0, "store_scores")):
                tflops = _tflops("ours", mode, seqlen, 128, 0) * (1.0 if recompute else 0.6)
                memory = _memory("ours" if recompute else "standard", batch, 16, seqlen, 128)
                rows.append(_row("recompute", "ours", mode, seqlen=seqlen, head_dim=128, variant=variant,
                                 tflops=tflops, peak_mem_bytes=memory, recompute=recompute))
    return rows


FA1_VARIANT_SPEED = {"fa2": 1.0, "fa1_rescale": 0.8, "fa1_no_seqpar": 0.7, "fa1_both": 0.5, "atomic_dq": 0.95}


def fa1_vs_fa2_rows() -> list[dict]:
    rows = []
    for mode in MODE_FLOP_FACTOR:
        for head_dim in HEAD_DIMS:
            for seqlen in SEQLENS:
                for variant, factor in FA1_VARIANT_SPEED.items():
                    if variant == "atomic_dq" and mode == "fwd":
                        continue
                    rows.append(_row("fa1_vs_fa2", "ours", mode, seqlen=seqlen, head_dim=head_dim, variant=variant,
                                     tflops=_tflops("ours", mode, seqlen, head_dim, 0) * factor, recompute=1))
    return rows


ERROR_SCALE = {"ours": 1.0, "standard": 1.2, "sdpa_flash": 1.0, "sdpa_cudnn": 1.1, "sdpa_efficient": 1.0}


def accuracy_rows() -> list[dict]:
    rows = []
    for provider, scale in ERROR_SCALE.items():
        for dtype, eps in (("fp16", 4e-4), ("bf16", 3e-3)):
            for seqlen, head_dim, causal in ((113, 40, 0), (203, 64, 1), (1025, 128, 0), (1025, 96, 1)):
                errors = {f"err_{name}": eps * scale * factor
                          for name, factor in (("o", 1.0), ("lse", 0.1), ("dq", 2.0), ("dk", 2.2), ("dv", 1.5))}
                rows.append(_row("accuracy", provider, "fwd_bwd", seqlen=seqlen, head_dim=head_dim, causal=causal,
                                 batch=2, heads=3, dtype=dtype, **errors))
    return rows


def ceiling_rows() -> list[dict]:
    rows = []
    for dtype in ("fp16", "bf16"):
        row = _row("ceiling", "torch_matmul", "matmul", seqlen=8192, head_dim=8192, batch=1, heads=1, dtype=dtype,
                   note="8192x8192x8192", tflops=None)
        row.update(ms=2 * 8192**3 / 677e12 * 1e3, tflops=677.0)
        rows.append(row)
    copy = _row("ceiling", "torch_copy", "copy", seqlen=1, head_dim=1, batch=1, heads=1, note="bytes=4294967296")
    copy["ms"] = 2 * 2**32 / 4.3e12 * 1e3
    rows.append(copy)
    return rows


ROWS = {"speed": speed_rows, "tiles": tiles_rows, "causal": causal_rows, "seqlen": seqlen_rows,
        "recompute": recompute_rows, "fa1_vs_fa2": fa1_vs_fa2_rows, "accuracy": accuracy_rows,
        "ceiling": ceiling_rows}


def write_results(results_dir: str | Path) -> Path:
    """Write every experiment's synthetic CSV under `results_dir` and return the directory."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    for experiment, make_rows in ROWS.items():
        pd.DataFrame(make_rows(), columns=COLUMNS).to_csv(results_path(results_dir, experiment), index=False)
    return results_dir


if __name__ == "__main__":
    import sys

    print(write_results(sys.argv[1] if len(sys.argv) > 1 else "results"))
