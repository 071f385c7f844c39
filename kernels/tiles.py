"""Tile configurations for the attention kernels: the default choice and its validation.

A `TileConfig` names the four knobs Triton exposes for one kernel launch: the tile shape
(BLOCK_M query rows by BLOCK_N key rows), the warps per program and the software-pipelining
depth. `default_tiles` is the engine's choice per head dimension; the `tiles` ablation sweeps
around it, and any call can override it. The defaults were tuned for the plain FlashAttention-2
path; a switch that needs more shared memory (stored scores, atomic dQ) can push one past what
the GPU has, so `launch_fitting` steps down to smaller configs when the default does not fit,
while an explicit config that does not fit is an error.

For the backward pass one config describes both kernels: the dK/dV kernel holds BLOCK_N keys
on chip and walks the queries BLOCK_M rows at a time; the dQ kernel holds BLOCK_N queries and
walks the keys BLOCK_M rows at a time (the mirrored shape, as in Triton's fused-attention
tutorial), so both keep the large tile resident and stream the small one.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

from triton.runtime.errors import OutOfResources

MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 16 and value & (value - 1) == 0):
                raise ValueError(f"TileConfig.{name} must be a power of two >= 16, got {value!r}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"TileConfig.num_warps must be one of 1, 2, 4, 8, 16, got {self.num_warps!r}")
        if not (isinstance(self.num_stages, int) and 1 <= self.num_stages <= 8):
            raise ValueError(f"TileConfig.num_stages must be an int in [1, 8], got {self.num_stages!r}")


def padded_head_dim(head_dim: int) -> int:
    """The head dim the kernels compute with: the next power of two, at least 16 (tl.dot's minimum)."""
    return max(16, 1 << (head_dim - 1).bit_length())


# False: the portable kernels pad every head dim to the next power of two (to time the difference).
CHUNKED_HEAD_DIMS = True


def head_dim_chunks(head_dim: int) -> tuple[int, int]:
    """The column chunks (first, second) the portable kernels compute a head dim in, each a power
    of two: (padded_head_dim, 0), one chunk, unless two chunks cover the head dim with fewer columns
    than its pad, a first of at least 64 and a second of at least 32 (so no dot is narrower than
    32): 96 = 64 + 32, 160 = 128 + 32, 176 and 192 = 128 + 64 (176 masks the last 16 columns).
    Two chunks cost two dots of Q K^T and two accumulators of P V per key tile; the pad costs
    tensor-core work on zero columns (a quarter of it at 192 padded to 256)."""
    pad = padded_head_dim(head_dim)
    first = pad // 2
    if not CHUNKED_HEAD_DIMS or head_dim == pad or first < 64:
        return pad, 0
    second = padded_head_dim(head_dim - first)
    if second < 32 or first + second >= pad:
        return pad, 0
    return first, second


# Chosen from a sweep on the H200 at seqlen 8k, fp16 (notes/perf.md, v1): the best config per
# padded head dim over full and causal. Head dims 16 and 32 take the 64 entries. 256 is sized to
# fit shared memory (a 128-wide tile at D=256 does not). Its forward keeps 4 warps: with 8 it
# spills nothing but ran 2.2x slower on the H200 (notes/perf.md, v5). Its backward takes 8 warps
# and 64 x 64 tiles: the dK/dV kernel spills 296 bytes per thread full and 996 causal at sm_90
# (`python3 tests/sm90_compile.py` prints each kernel's registers and spills, no GPU needed), yet
# the forward+backward ran 1.15-1.27x faster than with 32 x 64, which spills nothing full, and
# faster than every other candidate that fits, 16 warps and one stage included; 1.14-1.18x at a
# ragged length and even (0.98x) with every training feature at once
# (notes/round19/hopper_head_dims_probe_h200.csv, d256_bwd_tiles_probe_h200.csv,
# d256_bwd_ragged_probe_h200.csv; perf.md v19). Atomic dQ keeps 32 x 64 (_ATOMIC_DQ_BWD below).
_DEFAULTS = {
    "fwd": {16: TileConfig(128, 64, 8, 3), 32: TileConfig(128, 64, 8, 3), 64: TileConfig(128, 64, 8, 3),
            128: TileConfig(128, 128, 8, 3), 256: TileConfig(64, 32, 4, 2)},
    "bwd": {16: TileConfig(64, 64, 4, 3), 32: TileConfig(64, 64, 4, 3), 64: TileConfig(64, 64, 4, 3),
            128: TileConfig(64, 128, 8, 3), 256: TileConfig(64, 64, 8, 2)},
}
# With dropout the forward keeps the Philox state beside the tile: at head dim 128 the 128 x 128
# tile spills (288 bytes per thread), 128 x 64 does not (and runs as fast without dropout).
_DROPOUT_FWD = {128: TileConfig(128, 64, 8, 3)}
# The fp8 (e4m3) forward, from the probe on the H200 (notes/fp8_probe_trial_h200.csv, variant b,
# seqlen 4k and 16k, full and causal) and the sm_90 compile of the engine's kernel
# (tests/sm90_compile.py): d128 (128, 128, 8, 3) was the fastest there (1.50-1.55x our fp16
# forward) and compiles without spills when Nq and Nk are multiples of 16 (ragged lengths spill
# 88-572 bytes). At d64 the probe's fastest, (128, 128, 4, 3), spills 200-1500 bytes in the
# engine's kernel; (128, 64, 4, 3) does not and measured within 3-7 % of it (faster causal at
# 4k). 16 and 32 take the 64 entry; 256 is sized like the fp16 one (not measured).
_FP8_FWD = {16: TileConfig(128, 64, 4, 3), 32: TileConfig(128, 64, 4, 3), 64: TileConfig(128, 64, 4, 3),
            128: TileConfig(128, 128, 8, 3), 256: TileConfig(64, 64, 8, 2)}


# The backward in the column chunks 128 + 64 (head dims 176 and 192): 64 x 64 tiles with 8 warps
# ran the forward+backward 1.29-1.35x faster than the d256 entry's 32 x 64 in chunks and 1.57-1.65x the
# padded one (notes/round18/head_dim_chunks_probe_h200.csv), though its dK/dV kernel spills 68-272
# bytes per thread at sm_90 (notes/round18/head_dim_chunks_bwd_sm90.txt). Atomic dQ runs the
# backward padded (one chunk), so it keeps the d256 entry.
_CHUNKED_BWD = {(128, 64): TileConfig(64, 64, 8, 2)}
# Atomic dQ keeps dQ's accumulator in the dK/dV kernel too: at 256 the 64 x 64 tile would need 257 KiB of
# shared memory (more than a block gets) and spill 3.4 KB per thread at sm_90
# (notes/round19/d256_bwd_spills_ragged_sm90.txt), so it keeps the 32 x 64 tile the d256 entry had.
_ATOMIC_DQ_BWD = {256: TileConfig(32, 64, 8, 2)}


def default_tiles(head_dim: int, pass_: str, dropout: bool = False, fp8: bool = False,
                  atomic_dq: bool = False) -> TileConfig:
    """The engine's tile config for `pass_` ("fwd" or "bwd") at this (unpadded) head dim, with or
    without dropout; `fp8`: the fp8 forward's (forward only); `atomic_dq`: the backward with atomic
    dQ, which computes the head dim padded, not in column chunks."""
    if pass_ not in _DEFAULTS:
        raise ValueError(f"pass_ must be 'fwd' or 'bwd', got {pass_!r}")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head dim must be in [1, {MAX_HEAD_DIM}], got {head_dim}")
    padded = padded_head_dim(head_dim)
    if fp8:
        if pass_ != "fwd" or dropout:
            raise ValueError("the fp8 tiles are for the forward without dropout")
        return _FP8_FWD[padded]
    if dropout and pass_ == "fwd" and padded in _DROPOUT_FWD:
        return _DROPOUT_FWD[padded]
    if pass_ == "bwd" and not atomic_dq and head_dim_chunks(head_dim) in _CHUNKED_BWD:
        return _CHUNKED_BWD[head_dim_chunks(head_dim)]
    if pass_ == "bwd" and atomic_dq and padded in _ATOMIC_DQ_BWD:
        return _ATOMIC_DQ_BWD[padded]
    return _DEFAULTS[pass_][padded]


def smaller_configs(tiles: TileConfig) -> list[TileConfig]:
    """Configs to try, in order, when `tiles` does not fit: fewer stages, then halved blocks."""
    shapes = [(tiles.block_m, tiles.block_n)]
    block_m, block_n = shapes[0]
    while max(block_m, block_n) > 16:
        if block_n >= block_m:
            block_n //= 2
        else:
            block_m //= 2
        shapes.append((block_m, block_n))
    configs = []
    for i, (block_m, block_n) in enumerate(shapes):
        top = tiles.num_stages - 1 if i == 0 else min(tiles.num_stages, 2)
        configs += [TileConfig(block_m, block_n, tiles.num_warps, stages) for stages in range(top, 0, -1)]
    return configs


class TileFallbackWarning(UserWarning):
    """A default tile config did not fit the GPU and a smaller one ran; raised on every such launch."""

    def __init__(self, kernel: str, requested: TileConfig, used: TileConfig):
        super().__init__(f"{kernel}: default tiles {requested} do not fit this GPU with these switches; ran {used}")
        self.kernel, self.requested, self.used = kernel, requested, used


_FITTING: dict[tuple, TileConfig] = {}


def launch_fitting(launch: Callable[[TileConfig], None], tiles: TileConfig, fit: bool, key: tuple) -> TileConfig:
    """Call `launch(tiles)`; if `fit` and the kernel is out of shared memory or registers, retry
    with `smaller_configs`, remember the one that fits under `key` (whose first item names the
    kernel) and warn with a TileFallbackWarning each time it runs. Returns the config used."""
    if not fit:
        launch(tiles)
        return tiles
    used = _FITTING.get((key, tiles))
    if used is not None:
        launch(used)
    else:
        for candidate in [tiles] + smaller_configs(tiles):
            try:
                launch(candidate)
            except OutOfResources:
                continue
            used = _FITTING[(key, tiles)] = candidate
            break
        else:
            raise ValueError(f"no tile config down from {tiles} fits this GPU for {key}")
    if used != tiles:
        warnings.warn(TileFallbackWarning(str(key[0]), tiles, used), stacklevel=2)
    return used
