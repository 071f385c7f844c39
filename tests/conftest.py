"""Test set-up: without a CUDA GPU, kernels run on CPU tensors through Triton's interpreter.

TRITON_INTERPRET must be set before the kernels are imported (triton reads it when a kernel is
decorated), so it is decided here, once, for the whole session.
"""

import os

import pytest
import torch
from filelock import FileLock

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist on a host with several GPUs, spread the workers over them (gw0 -> cuda:0,
# gw1 -> cuda:1, ...): tests allocate on the current device ("cuda").
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if HAS_CUDA and _WORKER.startswith("gw") and torch.cuda.device_count() > 1:
    torch.cuda.set_device(int(_WORKER[2:]) % torch.cuda.device_count())


@pytest.fixture(scope="session")
def exclusive_gpu_memory_lock(tmp_path_factory):
    """The path of `exclusive_gpu_memory`'s lock: a file in the session's base temporary folder's parent, which
    every pytest-xdist worker of the session shares."""
    return tmp_path_factory.getbasetemp().parent / "exclusive_gpu_memory.lock"


@pytest.fixture
def exclusive_gpu_memory(exclusive_gpu_memory_lock):
    """For a test that needs tens of GB of GPU memory (the tensors past 2^31 elements): one such test at a time
    across pytest-xdist's workers, and what it cached handed back to the driver after it. Two of them at once,
    or one beside the blocks another worker's earlier one left cached, do not fit an 80 GB card. Yields the
    lock's path."""
    path = exclusive_gpu_memory_lock
    with FileLock(str(path)):
        if HAS_CUDA:
            torch.cuda.empty_cache()
        yield path
        if HAS_CUDA:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
