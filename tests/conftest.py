"""Test set-up: without a CUDA GPU, kernels run on CPU tensors through Triton's interpreter.

TRITON_INTERPRET must be set before the kernels are imported (triton reads it when a kernel is
decorated), so it is decided here, once, for the whole session.
"""

import os

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist on a host with several GPUs, spread the workers over them (gw0 -> cuda:0,
# gw1 -> cuda:1, ...): tests allocate on the current device ("cuda").
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if HAS_CUDA and _WORKER.startswith("gw") and torch.cuda.device_count() > 1:
    torch.cuda.set_device(int(_WORKER[2:]) % torch.cuda.device_count())
