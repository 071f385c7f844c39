"""Fixes for Triton's CPU interpreter (TRITON_INTERPRET=1), applied only when it is on.

2026-11: triton 3.6's interpreter stores bfloat16 as raw uint16 bits and
- its `tl.dot` multiplies those bits as integers, so any bf16 dot is garbage on the CPU (the
  compiled GPU path is fine): we widen bf16 operands to float32 (exact) before the product;
- its float32 -> bfloat16 cast truncates the mantissa where the GPU rounds to nearest even, which
  doubles the rounding error of every bf16 output on the CPU (enough to fail a 2x-of-PyTorch
  error rule on some random inputs): we round to nearest even, as the GPU and PyTorch do.
- its float32 -> float8e4nv (e4m3) cast truncates the mantissa (and mishandles subnormals) where
  the GPU rounds to nearest even, saturating at +-448 (cvt.rn.satfinite): we round with torch's
  float8_e4m3fn cast after clamping to +-448, so the fp8 forward's P is rounded as on the GPU.
Remove each once the interpreter does it itself.
"""

from __future__ import annotations

import numpy as np
import torch
import triton.language as tl


def _bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest bfloat16 (ties to even), as bits; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def _float32_to_e4m3_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest float8_e4m3fn (ties to even, saturating at +-448), as bits."""
    clamped = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).clamp(-448.0, 448.0)
    return clamped.to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def install() -> None:
    from triton.runtime import interpreter

    builder_cls = interpreter.InterpreterBuilder
    if getattr(builder_cls, "_bf16_dot_fixed", False):
        return
    original_dot = builder_cls.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            a_data = _bf16_bits_to_float32(a.data) if a.dtype.scalar == tl.bfloat16 else a.data.astype(np.float32)
            b_data = _bf16_bits_to_float32(b.data) if b.dtype.scalar == tl.bfloat16 else b.data.astype(np.float32)
            product = np.matmul(a_data, b_data, dtype=np.float32).astype(d.data.dtype)
            return interpreter.TensorHandle(product + d.data, d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    builder_cls.create_dot = create_dot
    original_cast = builder_cls.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_float32_to_bf16_bits(src.data), dst_type.scalar)
        return original_cast(self, src, dst_type)

    builder_cls.cast_impl = cast_impl
    builder_cls.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)
    original_fp_to_fp = builder_cls.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if dst_type.scalar == tl.float8e4nv and src.dtype.scalar in (tl.float32, tl.float16):
            return interpreter.TensorHandle(_float32_to_e4m3_bits(src.data.astype(np.float32)), dst_type.scalar)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    builder_cls.create_fp_to_fp = create_fp_to_fp
    builder_cls._bf16_dot_fixed = True
