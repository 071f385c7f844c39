"""A fix for Triton's CPU interpreter (TRITON_INTERPRET=1), applied only when it is on.

2026-11: triton 3.6's interpreter stores bfloat16 as raw uint16 bits and its `tl.dot` multiplies
those bits as integers, so any bf16 dot is garbage on the CPU (the compiled GPU path is fine).
We widen bf16 operands to float32 (exact) before the product. Remove once the interpreter
handles bf16 dots itself; tests/test_interpreter_fix.py shows whether it still needs this.
"""

from __future__ import annotations

import numpy as np
import triton.language as tl


def _bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


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
    builder_cls._bf16_dot_fixed = True
