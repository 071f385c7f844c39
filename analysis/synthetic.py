"""A small synthetic results set in the schema of experiments/schema.py, for tests and for previewing the report.

The numbers are shaped like an H200 run (TFLOP/s rise with sequence length towards a plateau, standard
attention's own memory grows with n^2 and runs out at the longest lengths, every timed cell is measured
in REPETITIONS repetitions with a little jitter, and each repetition of a timed ablation carries its own
interleaved matmul ceiling) but they are made up: `source` says "synthetic" on every row so that nothing
drawn from them can pass for a measurement. A few cells are made host-bound (short causal forwards) and
one is made noisy, so that every exclusion path of the analysis has rows to act on.
"""
from __future__ import annotations

import itertools
import random
from pathlib import Path

import pandas as pd

from analysis.load import COLUMNS, JIT_COLUMNS, LOSS_COLUMNS, results_path
from experiments.flops import attention_flops

GIB = 2**30
REPETITIONS = 3
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)  # tests of the config's 96 and 192 set their own (tests/test_analysis.py)
FLEX_SEQLENS = (2048, 8192)
HIDDEN = 2048
TOKENS = 16384
MODES = ("fwd", "bwd", "fwd_bwd")
# plateau TFLOP/s per provider and mode (non-causal, d=128); causal and other head dims scale these
PLATEAU = {
    "ours": {"fwd": 470.0, "bwd": 330.0, "fwd_bwd": 360.0},
    "sdpa_flash": {"fwd": 340.0, "bwd": 305.0, "fwd_bwd": 320.0},
    "sdpa_cudnn": {"fwd": 580.0, "bwd": 505.0, "fwd_bwd": 530.0},
    "sdpa_efficient": {"fwd": 176.0, "bwd": 140.0, "fwd_bwd": 150.0},
    "flex": {"fwd": 420.0, "bwd": 300.0, "fwd_bwd": 330.0},
    "standard": {"fwd": 55.0, "bwd": 100.0, "fwd_bwd": 82.0},
}
CEILING_TFLOPS = 705.0
PROVENANCE = {"gpu": "NVIDIA H200", "driver": "580.00", "cuda": "13.0", "torch": "2.11.0", "triton": "3.6.0",
              "commit": "0000000", "timestamp": "2026-01-01T00:00:00Z", "host_kind": "cuda", "source": "synthetic"}
# the cell whose repetitions are made to disagree (speed.csv): provider, mode, head dim, causal, seqlen
NOISY_CELL = ("sdpa_efficient", "fwd_bwd", 128, 0, 4096)


def _jitter(*key) -> float:
    """A deterministic factor within +-1.5%, different for each cell and repetition."""
    return 1.0 + random.Random(repr(key)).uniform(-0.015, 0.015)


def _row(experiment, provider, mode, *, seqlen=None, head_dim=None, causal=0, batch=None, heads=None,
         dtype="fp16", variant="default", status="ok", note="", **extra) -> dict:
    row = dict.fromkeys(COLUMNS, "")
    row.update(PROVENANCE, experiment=experiment, provider=provider, variant=variant, mode=mode, dtype=dtype,
               status=status, note=note)
    if seqlen is not None:
        heads = heads or HIDDEN // head_dim
        batch = batch or max(1, TOKENS // seqlen)
        row.update(batch=batch, heads=heads, kv_heads=heads, seqlen_q=seqlen, seqlen_k=seqlen, head_dim=head_dim,
                   causal=causal)
    row.update(extra)
    return row


def _timing(row: dict, tflops: float, repetition: int, host_bound: bool = False) -> dict:
    """Timing and telemetry columns of one repetition at `tflops` (jittered); host-bound rows wait on the host."""
    flops = attention_flops(row["batch"], row["heads"], row["seqlen_q"], row["seqlen_k"], row["head_dim"],
                            bool(row["causal"]), row["mode"])
    key = (row["experiment"], row["provider"], row["variant"], row["mode"], row["head_dim"], row["causal"],
           row["seqlen_k"], repetition)
    gpu_ms = flops / (tflops * 1e9) * _jitter(*key)
    ms = gpu_ms * (1.6 if host_bound else 1.01)
    return dict(repetition=repetition, ms=ms, ms_p20=ms * 0.99, ms_p80=ms * 1.01, gpu_ms=gpu_ms,
                host_ms=ms * (0.95 if host_bound else 0.05), host_bound=int(host_bound), tflops=flops / (ms * 1e9),
                sm_clock_mhz=1980 - 15 * repetition, power_w=450 + 30 * _jitter(*key), temp_c=50 + 2 * repetition,
                telemetry_samples=20)


def _ceilings(experiment: str, dtypes=("fp16",)) -> list[dict]:
    """The matmul ceiling measured interleaved with each repetition of a timed ablation."""
    rows = []
    for repetition in range(REPETITIONS):
        for dtype in dtypes:
            ms = 2 * 8192**3 / (CEILING_TFLOPS * 1e9) * _jitter(experiment, dtype, repetition)
            rows.append(_row(experiment, "torch_matmul", "matmul", dtype=dtype, note="m=n=k=8192",
                             repetition=repetition, ms=ms, ms_p20=ms * 0.99, ms_p80=ms * 1.01, gpu_ms=ms * 0.995,
                             host_ms=0.01, host_bound=0, tflops=2 * 8192**3 / (ms * 1e9), sm_clock_mhz=1980,
                             power_w=650, temp_c=55, telemetry_samples=20))
    return rows


def _repeated(experiment, provider, mode, tflops, *, host_bound=False, noisy=False, **shape) -> list[dict]:
    rows = []
    for repetition in range(REPETITIONS):
        row = _row(experiment, provider, mode, **shape)
        slow = 1.3 if noisy and repetition == REPETITIONS - 1 else 1.0
        row.update(_timing(row, tflops / slow, repetition, host_bound))
        rows.append(row)
    return rows


def _failed(experiment, provider, mode, status, note, **shape) -> list[dict]:
    return [_row(experiment, provider, mode, status=status, note=note, repetition=repetition, **shape)
            for repetition in range(REPETITIONS)]


def _tflops(provider, mode, seqlen, head_dim, causal) -> float:
    ramp = seqlen / (seqlen + 600.0)
    scale = {64: 0.85, 96: 0.9, 128: 1.0, 192: 0.92, 256: 0.9}[head_dim] * (0.8 if causal else 1.0)
    if provider == "standard" and causal:
        scale *= 0.45  # computes the full matrix, credited with half the FLOPs
    return PLATEAU[provider][mode] * ramp * scale


def _short_causal_forward(mode, seqlen, causal) -> bool:
    """The cells the synthetic GPU waits on the host for: causal forwards at the shortest length."""
    return mode == "fwd" and causal == 1 and seqlen == SEQLENS[0]


def speed_rows() -> list[dict]:
    rows = _ceilings("speed")
    for provider in PLATEAU:
        for mode in MODES:
            for head_dim in HEAD_DIMS:
                for causal in (0, 1):
                    for seqlen in SEQLENS:
                        shape = dict(seqlen=seqlen, head_dim=head_dim, causal=causal)
                        if provider == "flex" and seqlen not in FLEX_SEQLENS:
                            continue
                        if provider == "standard" and seqlen == SEQLENS[-1]:
                            rows += _failed("speed", provider, mode, "oom", "OutOfMemoryError: CUDA out of memory",
                                            **shape)
                            continue
                        if provider == "sdpa_flash" and head_dim == 256 and mode != "fwd":
                            rows += _failed("speed", provider, mode, "unsupported",
                                            "No available kernel for head dim 256 backward", **shape)
                            continue
                        rows += _repeated("speed", provider, mode, _tflops(provider, mode, seqlen, head_dim, causal),
                                          host_bound=_short_causal_forward(mode, seqlen, causal),
                                          noisy=(provider, mode, head_dim, causal, seqlen) == NOISY_CELL, **shape)
    return rows


def tiles_rows() -> list[dict]:
    rows = _ceilings("tiles")
    for mode in ("fwd", "bwd"):
        for head_dim in (64, 128):
            for num_warps in (4, 8):
                for num_stages in (2, 3, 4):
                    for block_m in (64, 128):
                        for block_n in (32, 64, 128):
                            tiles = dict(block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
                                         recompute=1)
                            shape = dict(seqlen=8192, head_dim=head_dim, variant="sweep", **tiles)
                            if head_dim == 128 and block_m == 128 and block_n == 128 and num_stages == 4:
                                rows += _failed("tiles", "ours", mode, "unsupported", "out of shared memory", **shape)
                                continue
                            balance = 1.0 - 0.12 * abs(block_m / 128 - 1) - 0.15 * abs(block_n / 64 - 1)
                            balance *= 1.0 - 0.04 * abs(num_stages - 3) - (0.05 if num_warps == 4 else 0.0)
                            tflops = PLATEAU["ours"][mode] * balance * (0.85 if head_dim == 64 else 1.0)
                            rows += _repeated("tiles", "ours", mode, tflops, **shape)
    return rows


def causal_rows() -> list[dict]:
    rows = _ceilings("causal")
    for mode in MODES:
        for head_dim in (64, 128):
            for seqlen in SEQLENS[1:]:
                full = _tflops("ours", mode, seqlen, head_dim, 0)
                speedup = 1.0 + 0.8 * seqlen / (seqlen + 1500.0)  # skipping against the same shape unmasked
                # TFLOP/s are credited with half the FLOPs when causal: a causal run at `speedup` times the
                # unmasked speed shows speedup/2 times its TFLOP/s
                for variant, causal, tflops in (("full", 0, full), ("mask_all_tiles", 1, full / 2 * 0.9),
                                                ("skip_tiles", 1, full / 2 * speedup)):
                    rows += _repeated("causal", "ours", mode, tflops, seqlen=seqlen, head_dim=head_dim, causal=causal,
                                      variant=variant, recompute=1)
    return rows


# The memory ablation's two shapes (variants): our long-context shape and FlashAttention-1's benchmark shape.
MEMORY_SHAPES = {
    "long_context": dict(batch=1, heads=16, head_dim=128, seqlens=(1024, 2048, 4096, 8192, 16384, 32768, 65536)),
    "fa1_readme": dict(batch=8, heads=12, head_dim=64, seqlens=(128, 256, 512, 1024, 2048, 4096, 8192)),
}


def _memory(provider, mode, batch, heads, seqlen, head_dim) -> tuple[int, int]:
    """(attention's own bytes, input bytes) in fp16: ours holds O, the log-sum-exp and, with a backward, the
    gradients; standard attention also holds its score and probability matrices."""
    tensor = batch * heads * seqlen * head_dim * 2
    backward = mode != "fwd"
    inputs = tensor * (4 if backward else 3)
    own = tensor * (4 if backward else 1) + batch * heads * seqlen * 4 * (2 if backward else 1)
    if provider == "standard":
        own += batch * heads * seqlen * seqlen * 2 * (3 if backward else 2)
    return int(own), int(inputs)


def seqlen_rows() -> list[dict]:
    rows = _ceilings("seqlen")
    for variant, shape in MEMORY_SHAPES.items():
        batch, heads, head_dim = shape["batch"], shape["heads"], shape["head_dim"]
        for provider in ("ours", "standard"):
            for mode in ("fwd", "fwd_bwd"):
                for causal in (0, 1):
                    for seqlen in shape["seqlens"]:
                        common = dict(seqlen=seqlen, head_dim=head_dim, batch=batch, heads=heads, causal=causal,
                                      variant=variant)
                        own, inputs = _memory(provider, mode, batch, heads, seqlen, head_dim)
                        if own + inputs > 120 * GIB:
                            rows += _failed("seqlen", provider, mode, "oom", "OutOfMemoryError: CUDA out of memory",
                                            **common)
                            continue
                        for row in _repeated("seqlen", provider, mode, _tflops(provider, mode, seqlen, 128, causal),
                                             **common):
                            row.update(attn_mem_bytes=own, input_bytes=inputs, peak_mem_bytes=own + inputs)
                            rows.append(row)
    return rows


def recompute_rows() -> list[dict]:
    rows = _ceilings("recompute")
    for mode in MODES:
        for seqlen in SEQLENS[1:]:
            batch = TOKENS // seqlen
            for recompute, variant in ((1, "recompute"), (0, "store_scores")):
                slower = 1.0 if recompute or mode == "fwd" else 0.6
                own, inputs = _memory("ours" if recompute else "standard", mode, batch, 16, seqlen, 128)
                for row in _repeated("recompute", "ours", mode, _tflops("ours", mode, seqlen, 128, 0) * slower,
                                     seqlen=seqlen, head_dim=128, variant=variant, recompute=recompute):
                    row.update(attn_mem_bytes=own, input_bytes=inputs, peak_mem_bytes=own + inputs)
                    rows.append(row)
    return rows


# speed of each fa1_vs_fa2 arm relative to fa2, and the passes it runs (experiments/grid.py)
FA1_ARMS = {
    "fa2": (1.0, MODES),
    "fa1": (0.48, MODES),
    "fa1_rescale": (0.85, ("fwd", "fwd_bwd")),
    "fa1_no_seqpar": (0.75, ("fwd", "fwd_bwd")),
    "fa1_both": (0.65, ("fwd", "fwd_bwd")),
    "atomic_dq": (0.9, ("bwd", "fwd_bwd")),
}


def fa1_vs_fa2_rows() -> list[dict]:
    rows = _ceilings("fa1_vs_fa2")
    for variant, (factor, modes) in FA1_ARMS.items():
        for mode in modes:
            for head_dim in (64, 128):
                for causal in (0, 1):
                    for seqlen in SEQLENS:
                        rows += _repeated("fa1_vs_fa2", "ours", mode,
                                          _tflops("ours", mode, seqlen, head_dim, causal) * factor,
                                          host_bound=_short_causal_forward(mode, seqlen, causal), seqlen=seqlen,
                                          head_dim=head_dim, causal=causal, variant=variant, recompute=1)
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
    rows = _ceilings("ceiling", ("fp16", "bf16"))
    for repetition in range(REPETITIONS):
        ms = 2 * 2**30 / 4.3e12 * 1e3 * _jitter("copy", repetition)
        rows.append(_row("ceiling", "torch_copy", "copy", note=f"bytes={2 * 2**30}", repetition=repetition, ms=ms,
                         ms_p20=ms * 0.99, ms_p80=ms * 1.01, gpu_ms=ms, host_ms=0.01, host_bound=0))
    return rows


# training (experiments/grid.py's `training`): model TFLOP/s per GPU by context and attention, eager; the
# baseline's 2.7B at 8k runs out of memory and its largest batch that fits (1) is a second row
TRAINING_MODELS = {"gpt3_1_3b": (24, 2048, 16), "gpt3_2_7b": (32, 2560, 20)}  # layers, hidden, heads
TRAINING_TFLOPS = {
    2048: {"standard": 250.0, "ours_fa1": 300.0, "sdpa_flash": 330.0, "sdpa_cudnn": 360.0, "ours": 345.0},
    8192: {"standard": 120.0, "ours_fa1": 260.0, "sdpa_flash": 330.0, "sdpa_cudnn": 380.0, "ours": 360.0},
}
TRAINING_TOKENS, TRAINING_COMPILED = 16384, 1.1  # tokens per step; compiled ours against eager


def _training_flops_per_token(layers, hidden, seqlen, vocab=50257) -> float:
    """experiments/training.py's model_flops_per_token (6 P + 12 L h s), restated: the analysis runs without torch."""
    return 6.0 * (12 * layers * hidden**2 + vocab * hidden) + 12.0 * layers * hidden * seqlen


def training_rows() -> list[dict]:
    rows = _ceilings("training", ("bf16",))
    for model, (layers, hidden, heads) in TRAINING_MODELS.items():
        for context, by_provider in TRAINING_TFLOPS.items():
            for provider, tflops in by_provider.items():
                arms = [(model, TRAINING_TOKENS // context, tflops)]
                if provider == "ours" and model == "gpt3_1_3b" and context == 2048:
                    arms.append((model + "+compile", TRAINING_TOKENS // context, tflops * TRAINING_COMPILED))
                for variant, batch, speed in arms:
                    shape = dict(batch=batch, heads=heads, seqlen=context, head_dim=hidden // heads, causal=1)
                    if provider == "standard" and model == "gpt3_2_7b" and context == 8192:
                        rows += [_row("training", provider, "train", dtype="bf16", variant=variant, status="oom",
                                      note="OutOfMemoryError: CUDA out of memory", repetition=r, **shape)
                                 for r in range(REPETITIONS)]
                        variant, speed, shape["batch"] = variant + "+largest_batch", 0.8 * speed, 1
                    for repetition in range(REPETITIONS):
                        tokens = shape["batch"] * context
                        ms = (_training_flops_per_token(layers, hidden, context) * tokens / (speed * 1e9)
                              * _jitter("training", provider, variant, context, repetition))
                        note = "largest batch that fits: 1 (batch 2 runs out of memory)" if "largest" in variant else ""
                        rows.append(_row("training", provider, "train", dtype="bf16", variant=variant, note=note,
                                         repetition=repetition, ms=ms, ms_p20=ms * 0.98, ms_p80=ms * 1.03, gpu_ms=ms,
                                         host_bound=0, tflops=_training_flops_per_token(layers, hidden, context)
                                         * tokens / (ms * 1e9), attn_mem_bytes=60 * GIB, input_bytes=0,
                                         peak_mem_bytes=60 * GIB, sm_clock_mhz=1980, power_w=650, temp_c=60,
                                         telemetry_samples=20, **shape))
    return rows


def training_loss_rows(steps: int = 300) -> list[dict]:
    """Loss curves of the loss-agreement run: ours and sdpa_flash from seed 0, sdpa_flash from seed 1."""
    rows = []
    for provider, seed, wobble in (("ours", 0, 0.002), ("sdpa_flash", 0, 0.0), ("sdpa_flash", 1, 0.03)):
        for step in range(steps):
            loss = 1.2 + (8.3 - 1.2) * (0.985 ** step) + wobble * random.Random(repr((seed, step))).uniform(-1, 1)
            if provider == "ours":
                loss += 0.002 * random.Random(repr(("ours", step))).uniform(-1, 1)
            rows.append({**{key: PROVENANCE[key] for key in LOSS_COLUMNS if key in PROVENANCE},
                         "provider": provider, "seed": seed, "step": step, "loss": loss})
    return rows


# features (experiments/features.py): time of each arm against ours plain at the same shape (>1: slower), and
# the window's speedup over ours full causal by sequence length; the variable-length batch against padded
FEATURE_SLOWDOWN = {("ours", "softcap30"): 1.08, ("flex", "softcap30"): 1.3, ("ours", "alibi"): 1.1,
                    ("flex", "alibi"): 1.35, ("ours", "dropout0.1"): 1.12, ("sdpa_flash", "dropout0.1"): 1.25}
WINDOW_SPEEDUP, WINDOW_FLEX = {4096: 3.0, 16384: 8.5}, 1.4
VARLEN = {"batch": 64, "heads": 16, "seqlen": 7626, "padded": 3.0, "flex": 1.3}
FEATURE_TILES = dict(block_m=128, block_n=128, num_warps=12, num_stages=2)  # ours' rows: the Hopper forward's


def features_rows() -> list[dict]:
    rows = _ceilings("features")
    for seqlen in WINDOW_SPEEDUP:
        for mode in ("fwd_bwd", "fwd"):
            for causal in (0, 1):
                plain = _tflops("ours", mode, seqlen, 128, causal)
                shape = dict(seqlen=seqlen, head_dim=128, causal=causal)
                rows += _repeated("features", "ours", mode, plain, variant="plain", **FEATURE_TILES, **shape)
                for (provider, variant), slowdown in FEATURE_SLOWDOWN.items():
                    rows += _repeated("features", provider, mode, plain / slowdown, variant=variant, **shape)
                if causal:
                    window = plain * WINDOW_SPEEDUP[seqlen]
                    rows += _repeated("features", "ours", mode, window, variant="window1024", **FEATURE_TILES,
                                      **shape)
                    rows += _repeated("features", "flex", mode, window / WINDOW_FLEX, variant="window1024", **shape)
    for mode in ("fwd_bwd", "fwd"):
        for causal in (0, 1):
            padded = _tflops("ours", mode, VARLEN["seqlen"], 128, causal)
            shape = dict(seqlen=VARLEN["seqlen"], head_dim=128, causal=causal, batch=VARLEN["batch"],
                         heads=VARLEN["heads"], note="64 sequences, 149838 tokens, lengths 129-7626")
            varlen = padded * VARLEN["padded"]
            rows += _repeated("features", "ours", mode, padded, variant="padded", **shape)
            rows += _repeated("features", "ours", mode, varlen, variant="varlen", **shape)
            rows += _repeated("features", "flex", mode, varlen / VARLEN["flex"], variant="varlen", **shape)
    return rows


# decode: achieved bandwidth (GB/s) of each provider and layout; the copy roof; paged slowdowns over dense
DECODE_COPY_GBS = 4000.0
DECODE_GBS = {("ours", "dense"): 3400.0, ("ours", "paged256"): 3400.0 / 1.03, ("ours", "paged16"): 3400.0 / 1.08,
              ("sdpa", "dense"): 2800.0, ("flex", "dense"): 2500.0}


def decode_rows() -> list[dict]:
    """The decode ablation: a copy row per pass, then one token over caches of 1k-32k keys, batch 8, GQA 8:1 and MHA."""
    from experiments.decode import moved_bytes, page_size_of

    rows = []
    for repetition in range(REPETITIONS):
        size = 2**30
        ms = 2 * size / (DECODE_COPY_GBS * 1e6) * _jitter("decode-copy", repetition)
        rows.append(_row("decode", "torch_copy", "copy", note=f"bytes={2 * size}", repetition=repetition, ms=ms,
                         ms_p20=ms * 0.99, ms_p80=ms * 1.01, gpu_ms=ms * 0.995, host_ms=0.01, host_bound=0))
        for (heads, kv_heads), cache, ((provider, variant), gbs) in itertools.product(
                ((32, 4), (32, 32)), (1024, 8192, 32768), DECODE_GBS.items()):
            moved = moved_bytes(8, heads, kv_heads, cache, 128, "fp16")
            ms = moved / (gbs * 1e6) * _jitter("decode", provider, variant, heads, kv_heads, cache, repetition)
            row = _row("decode", provider, "fwd", variant=variant)
            row.update(batch=8, heads=heads, kv_heads=kv_heads, seqlen_q=1, seqlen_k=cache, head_dim=128, causal=1)
            rows.append(dict(row, repetition=repetition, ms=ms, ms_p20=ms * 0.99, ms_p80=ms * 1.01, gpu_ms=ms / 1.01, host_ms=ms * 0.05,
                             host_bound=0, page_size=page_size_of(variant) or "", bandwidth_gbs=moved / (ms * 1e6),
                             note=f"bytes={moved}"))
    return rows


# fp8 (experiments/fp8.py): the fp8 forward's speed-up over the fp16 forward by head dim and sequence length (causal a
# little less); errors of each precision's output against float64 on the accuracy shapes (fp8: relative RMS about
# 2%, as the H200's notes measured; fp16 and bf16 a rounding of their own)
FP8_SEQLENS = (1024, 2048, 4096, 8192, 16384)
FP8_SPEEDUP = {64: (1.05, 1.12, 1.2, 1.25, 1.28), 128: (1.2, 1.38, 1.6, 1.65, 1.7)}
FP8_CAUSAL = 0.98
FP8_ERRORS = {"fp8_e4m3": (2.1e-2, 2.3e-2), "fp16": (2.6e-4, 4.3e-4), "bf16": (2.1e-3, 4.2e-3)}  # err_o, max abs


def fp8_rows() -> list[dict]:
    """The fp8 ablation: per pass the fp16 matmul, then ours (fp16) and ours_fp8 (fp8_e4m3) forwards on the paper's
    shapes; then the accuracy cells once (variant "accuracy", no repetition)."""
    rows = _ceilings("fp8")
    for head_dim, causal, (index, seqlen) in itertools.product((64, 128), (0, 1), enumerate(FP8_SEQLENS)):
        fp16 = _tflops("ours", "fwd", seqlen, head_dim, causal)
        speedup = FP8_SPEEDUP[head_dim][index] * (FP8_CAUSAL if causal else 1.0)
        shape = dict(seqlen=seqlen, head_dim=head_dim, causal=causal)
        rows += _repeated("fp8", "ours", "fwd", fp16, block_m=128, block_n=64, num_warps=8, num_stages=3,
                          recompute=1, **shape)
        rows += _repeated("fp8", "ours_fp8", "fwd", fp16 * speedup, dtype="fp8_e4m3", block_m=128,
                          block_n=128 if head_dim == 128 else 64, num_warps=8 if head_dim == 128 else 4, num_stages=3,
                          **shape)
    for head_dim, causal, (dtype, (err_o, max_abs)) in itertools.product((64, 128), (0, 1), FP8_ERRORS.items()):
        rows.append(_row("fp8", "ours_fp8" if dtype == "fp8_e4m3" else "ours", "fwd", seqlen=1024, head_dim=head_dim,
                         causal=causal, batch=1, heads=16, dtype=dtype, variant="accuracy",
                         err_o=err_o * (0.8 if causal else 1.0), max_abs_err_o=max_abs * (1.5 if causal else 1.0)))
    return rows


# jit: seconds of a fresh process's first forward and first backward with an empty Triton cache (compiling) and with
# a filled one (loading), by head dim; causal adds a little; the second forward+backward in milliseconds
JIT_FIRST = {("empty", 64): (1.7, 3.9), ("empty", 128): (2.3, 4.6), ("filled", 64): (0.48, 1.9),
             ("filled", 128): (0.5, 2.4)}
JIT_SECOND_MS = 2.1
JIT_REPETITIONS = 2


def jit_rows() -> list[dict]:
    """The jit ablation (experiments/jit.py): an empty-cache and a filled-cache process per head dim, mask and
    repetition, in its own columns (JIT_COLUMNS)."""
    rows = []
    for repetition, head_dim, causal, cache in itertools.product(range(JIT_REPETITIONS), (64, 128), (0, 1),
                                                                 ("empty", "filled")):
        fwd, bwd = JIT_FIRST[(cache, head_dim)]
        scale = (1.05 if causal else 1.0) * _jitter("jit", head_dim, causal, cache, repetition)
        rows.append({**{key: PROVENANCE[key] for key in JIT_COLUMNS if key in PROVENANCE},
                     "dtype": "fp16", "batch": 1, "heads": 4, "seqlen": 1024, "head_dim": head_dim, "causal": causal,
                     "cache": cache, "repetition": repetition, "concurrent": 4, "first_fwd_s": fwd * scale,
                     "first_bwd_s": bwd * scale, "second_fwd_bwd_s": JIT_SECOND_MS * 1e-3 * scale, "status": "ok",
                     "note": ""})
    return rows


# hopper (experiments/grid.py, HOPPER_ARMS): the Hopper forward's steps over the portable forward, shaped like
# notes/round10_summary.txt (the serial consumers about 1.05x the portable forward, the overlap 1.07x more; the
# backward the portable one in every arm, so forward+backward gains less); cuDNN from PLATEAU.
HOPPER_STEPS = {"portable": 1.0, "hopper_serial": 1.05, "hopper": 1.12}
# the one-pass Hopper backward (variant hopper_bwd) about 0.9x the portable backward, as measured
# (notes/hopper_v12_probe_h200.csv); its forward+backward after the Hopper forward.
HOPPER_BWD_STEP = 0.9


def hopper_rows() -> list[dict]:
    rows = _ceilings("hopper")
    for mode, head_dim, causal, seqlen in itertools.product(("fwd", "fwd_bwd"), (64, 128), (0, 1), SEQLENS):
        portable = _tflops("ours", mode, seqlen, head_dim, causal)
        for variant, step in HOPPER_STEPS.items():
            gain = step if mode == "fwd" else 1.0 + (step - 1.0) / 3
            tiles = (dict(block_m=128, block_n=128, num_warps=12, num_stages=2) if variant != "portable"
                     else dict(block_m=128, block_n=64, num_warps=8, num_stages=3))
            rows += _repeated("hopper", "ours", mode, portable * gain, seqlen=seqlen, head_dim=head_dim, causal=causal,
                              variant=variant, recompute=1, **tiles)
        rows += _repeated("hopper", "sdpa_cudnn", mode, _tflops("sdpa_cudnn", mode, seqlen, head_dim, causal),
                          seqlen=seqlen, head_dim=head_dim, causal=causal)
    bwd_tiles = dict(block_m=64, block_n=128, num_warps=8, num_stages=3)
    for head_dim, causal, seqlen in itertools.product((64, 128), (0, 1), SEQLENS):
        portable_bwd = _tflops("ours", "bwd", seqlen, head_dim, causal)
        rows += _repeated("hopper", "ours", "bwd", portable_bwd, seqlen=seqlen, head_dim=head_dim, causal=causal,
                          variant="portable", recompute=1, block_m=64, block_n=64, num_warps=4, num_stages=3)
        rows += _repeated("hopper", "ours", "bwd", portable_bwd * HOPPER_BWD_STEP, seqlen=seqlen, head_dim=head_dim,
                          causal=causal, variant="hopper_bwd", recompute=1, **bwd_tiles)
        rows += _repeated("hopper", "sdpa_cudnn", "bwd", _tflops("sdpa_cudnn", "bwd", seqlen, head_dim, causal),
                          seqlen=seqlen, head_dim=head_dim, causal=causal)
        fwd_bwd = _tflops("ours", "fwd_bwd", seqlen, head_dim, causal) * (1.0 + (HOPPER_STEPS["hopper"] - 1.0) / 3)
        rows += _repeated("hopper", "ours", "fwd_bwd", fwd_bwd * 0.95, seqlen=seqlen, head_dim=head_dim, causal=causal,
                          variant="hopper_bwd", recompute=1, **bwd_tiles)
    return rows


ROWS = {"speed": speed_rows, "tiles": tiles_rows, "causal": causal_rows, "seqlen": seqlen_rows,
        "recompute": recompute_rows, "fa1_vs_fa2": fa1_vs_fa2_rows, "accuracy": accuracy_rows,
        "ceiling": ceiling_rows, "training": training_rows, "features": features_rows,
        "decode": decode_rows, "fp8": fp8_rows, "hopper": hopper_rows}


def write_results(results_dir: str | Path) -> Path:
    """Write every experiment's synthetic CSV under `results_dir` and return the directory."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    for experiment, make_rows in ROWS.items():
        pd.DataFrame(make_rows(), columns=COLUMNS).to_csv(results_path(results_dir, experiment), index=False)
    pd.DataFrame(training_loss_rows(), columns=LOSS_COLUMNS).to_csv(results_path(results_dir, "training_loss"),
                                                                   index=False)
    pd.DataFrame(jit_rows(), columns=JIT_COLUMNS).to_csv(results_path(results_dir, "jit"), index=False)
    return results_dir


if __name__ == "__main__":
    import sys

    print(write_results(sys.argv[1] if len(sys.argv) > 1 else "results"))
