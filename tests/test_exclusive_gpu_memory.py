"""conftest's `exclusive_gpu_memory`: while a test holds it, another process cannot take the same lock; and
every test whose tensors pass 2^31 elements takes it."""
import ast
import subprocess
import sys
from pathlib import Path

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


def _takes_the_lock(test: ast.FunctionDef) -> bool:
    """The fixture as an argument or in a `pytest.mark.usefixtures(...)` decorator."""
    if "exclusive_gpu_memory" in [a.arg for a in test.args.args]:
        return True
    return any(isinstance(d, ast.Call) and ast.unparse(d.func).endswith("usefixtures")
               and any(isinstance(a, ast.Constant) and a.value == "exclusive_gpu_memory" for a in d.args)
               for d in test.decorator_list)


def test_every_test_past_2_31_elements_takes_the_lock():
    """Tens of GB each: two at once do not fit an 80 GB card. On an H100, test_kernels' 2^31-element tests ran out
    of memory beside another worker holding 41 GB, about what the Hopper backward's 2^31-element test allocates;
    that test lacked the lock then. Such a test asserts `.numel() >= 2**31`; each must hold the lock."""
    found = []
    for path in sorted(set(Path(__file__).parent.glob("test_*.py")) - {Path(__file__)}):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") \
                    and "numel() >= 2**31" in ast.unparse(node).replace(" ** ", "**"):
                found.append(f"{path.name}::{node.name}")
                assert _takes_the_lock(node), f"{path.name}::{node.name} passes 2^31 elements without the lock"
    assert len(found) >= 2, found  # test_kernels' and test_hopper's
