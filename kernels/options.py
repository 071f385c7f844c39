"""The options of one attention call, carried as one value from `flash_attention` to the kernels.

`AttentionOptions` holds every switch that is not a tensor (scale, masks, features, tiles and
the ablation switches). The custom ops take it as one string (`encode` / `decode`), so a new
option is one field here plus its use in the kernels: the op schemas, their fake
implementations and autograd do not change. The two optional tensors (ALiBi slopes, dropout
seed) travel next to it as `Tensor?` arguments.

`kernel_args` is the one place that turns the options into the kernels' feature arguments.
Every feature is a compile-time switch (WINDOW, SOFTCAP, ALIBI, DROPOUT), so attention without
them compiles to the same code as before the features existed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools

import torch

LOG2E = 1.4426950408889634


@dataclasses.dataclass(frozen=True)
class AttentionOptions:
    softmax_scale: float
    causal: bool = False
    window_left: int = -1  # -1: unbounded; query i sees keys j >= i + Nk - Nq - window_left
    window_right: int = -1  # -1: unbounded; query i sees keys j <= i + Nk - Nq + window_right
    softcap: float = 0.0  # > 0: scores = softcap * tanh(scores / softcap)
    dropout_p: float = 0.0
    fwd_tiles: tuple = ()
    bwd_tiles: tuple = ()
    fit_fwd_tiles: bool = True
    fit_bwd_tiles: bool = True
    recompute: bool = True
    deferred_rescale: bool = True
    seq_parallel: bool = True
    skip_masked_tiles: bool = True
    atomic_dq: bool = False  # True: dQ by atomic adds in the dK/dV kernel (not deterministic); False: its own kernel
    algorithm: str = "fa2"
    hopper: bool = False  # the forward on the Hopper kernel (kernels/_hopper.py) instead of the portable one
    hopper_overlap: bool = True  # hopper: the softmax of one key tile overlapped with P V of the previous one
    hopper_backward: bool = False  # the backward in one pass on kernels/_hopper_bwd.py (Gluon, dQ by TMA reduce-add)
    max_seqlen_q: int = 0  # packed (varlen) batches only: the longest sequences, which size the grid
    max_seqlen_k: int = 0

    def encode(self) -> str:
        """`name=repr(value)` pairs joined by ';' (plain string formatting, which torch.compile traces)."""
        if torch.compiler.is_compiling():
            return _format(self)
        return _format_cached(self)  # eager: a training loop repeats a handful of options

    @classmethod
    def decode(cls, text: str) -> "AttentionOptions":
        return _decode(text)

    # ---- what the kernels see -------------------------------------------------------------
    @property
    def causal_only(self) -> bool:
        """Plain causal mask (the CAUSAL kernels): causal without a left bound, or window (-1, 0)."""
        return self.window_left < 0 and (self.causal or self.window_right == 0)

    @property
    def window(self) -> bool:
        """A sliding window the CAUSAL path does not cover (the WINDOW kernels)."""
        right = 0 if self.causal else self.window_right
        return not self.causal_only and (self.window_left >= 0 or right >= 0)

    @property
    def features(self) -> list[str]:
        """Names of the features in use, for error messages."""
        names = []
        if self.window_left >= 0 or self.window_right >= 0:
            names.append("window_size")
        if self.softcap > 0:
            names.append("softcap")
        if self.dropout_p > 0:
            names.append("dropout_p")
        return names

    def kernel_args(self, n_q: int, n_k: int, alibi_slopes: torch.Tensor | None, dropout_seed: torch.Tensor | None,
                    dummy: torch.Tensor) -> dict:
        """Feature arguments of every kernel (forward, dK/dV, dQ, probabilities), by keyword."""
        unbounded = n_q + n_k  # farther than any key from any query
        right = 0 if self.causal else self.window_right
        if alibi_slopes is not None:  # (B, H) view, possibly with stride 0 over the batch
            stride_az, stride_ah = alibi_slopes.stride()
        else:
            stride_az = stride_ah = 0
        return dict(
            Alibi=alibi_slopes if alibi_slopes is not None else dummy, stride_az=stride_az, stride_ah=stride_ah,
            Seed=dropout_seed if dropout_seed is not None else dummy,
            win_left=self.window_left if self.window_left >= 0 else unbounded,
            win_right=right if right >= 0 else unbounded,
            softcap_scale=self.softmax_scale / self.softcap if self.softcap > 0 else 0.0,
            softcap_log2=self.softcap * LOG2E,
            dropout_p=float(self.dropout_p), dropout_scale=1.0 / (1.0 - self.dropout_p),
            CAUSAL=self.causal_only, WINDOW=self.window, SOFTCAP=self.softcap > 0,
            ALIBI=alibi_slopes is not None, DROPOUT=self.dropout_p > 0)


_FIELDS = tuple(field.name for field in dataclasses.fields(AttentionOptions))


def _format(opts: AttentionOptions) -> str:
    return ";".join(f"{name}={getattr(opts, name)!r}" for name in _FIELDS)


_format_cached = functools.lru_cache(maxsize=1024)(_format)


@functools.lru_cache(maxsize=1024)
def _decode(text: str) -> AttentionOptions:
    """Parsing takes ~0.1 ms; a training loop repeats a handful of option strings, so cache them."""
    pairs = (item.split("=", 1) for item in text.split(";"))
    return AttentionOptions(**{name: ast.literal_eval(value) for name, value in pairs})


def feature_switches(args: dict) -> tuple:
    """The compile-time switches of `kernel_args`, for the tile-fitting cache key."""
    return tuple((name, args[name]) for name in ("CAUSAL", "WINDOW", "SOFTCAP", "ALIBI", "DROPOUT"))

