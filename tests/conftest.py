"""Test set-up: without a CUDA GPU, kernels run on CPU tensors through Triton's interpreter.

TRITON_INTERPRET must be set before the kernels are imported (triton reads it when a kernel is
decorated), so it is decided here, once, for the whole session.
"""

import os

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
