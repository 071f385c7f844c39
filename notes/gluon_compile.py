"""Compile a Gluon kernel for sm_90a on a machine without a GPU, for the drafts in notes/
(gluon_bwd_v16_draft.py, hopper_fp8_draft.py): tests/hopper_compile.py's `compile_sm90`, which the
tests compile the engine's Hopper kernels with, importable from here.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from hopper_compile import compile_sm90  # noqa: E402,F401
