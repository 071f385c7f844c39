"""conftest's `exclusive_gpu_memory`: while a test holds it, another process cannot take the same lock."""
import subprocess
import sys

TRY_LOCK = """
import sys
from filelock import FileLock, Timeout
try:
    FileLock(sys.argv[1], timeout=0).acquire()
except Timeout:
    print("held")
else:
    print("free")
"""


def _other_process_sees(path) -> str:
    return subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_lock_is_held_for_the_test_and_free_after(exclusive_gpu_memory):
    assert _other_process_sees(exclusive_gpu_memory) == "held"


def test_the_lock_is_free_without_the_fixture(exclusive_gpu_memory_lock):
    exclusive_gpu_memory_lock.touch()
    assert _other_process_sees(exclusive_gpu_memory_lock) == "free"
