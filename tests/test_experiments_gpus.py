"""The GPU pool: each concurrent job gets a device of its own, and a device is free again when its
job ends, however it ends. Runs on the CPU with a fake device count."""
import os
import signal
import subprocess
import sys
import time

import pytest

from experiments import gpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLD_A_GPU = "from experiments import gpus; print(gpus.pin(), flush=True); import sys; sys.stdin.read()"


@pytest.mark.parametrize("count, listed, expected", [
    ("0", None, []),
    ("0", "0,1", []),
    ("4", None, ["0", "1", "2", "3"]),
    ("4", "2,5", ["2", "5"]),
    ("4", "GPU-1234,GPU-abcd", ["GPU-1234", "GPU-abcd"]),
    ("4", "", []),
    ("4", "1,-1,2", ["1"]),
])
def test_visible_devices_honour_cuda_visible_devices(count, listed, expected):
    environ = {gpus.COUNT_ENV: count}
    if listed is not None:
        environ["CUDA_VISIBLE_DEVICES"] = listed
    assert gpus.visible_devices(environ) == expected


def test_no_gpu_no_pin():
    environ = {gpus.COUNT_ENV: "0"}
    assert gpus.pin(environ) is None
    assert "CUDA_VISIBLE_DEVICES" not in environ


@pytest.fixture
def holders(tmp_path):
    """Start processes that pin a GPU (of `count` fake ones) and hold it until their stdin closes."""
    started = []

    def start(count: int, visible: str | None = None):
        env = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
        env.update({gpus.COUNT_ENV: str(count), gpus.LOCK_DIR_ENV: str(tmp_path / "locks"), "PYTHONPATH": ROOT})
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        process = subprocess.Popen([sys.executable, "-c", HOLD_A_GPU], env=env, cwd=tmp_path, text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def pinned(process) -> str:
    return process.stdout.readline().strip()


def test_concurrent_jobs_get_distinct_devices(holders):
    processes = [holders(3) for _ in range(3)]
    assert sorted(pinned(process) for process in processes) == ["0", "1", "2"]


def test_devices_come_from_cuda_visible_devices(holders):
    processes = [holders(8, visible="4,6") for _ in range(2)]
    assert sorted(pinned(process) for process in processes) == ["4", "6"]


def test_a_job_waits_for_a_free_device_and_gets_a_crashed_jobs_device(holders):
    first, second = holders(2), holders(2)
    devices = {first: pinned(first), second: pinned(second)}
    waiting = holders(2)
    time.sleep(1.0)
    assert waiting.poll() is None  # still waiting: both devices are held
    os.kill(first.pid, signal.SIGKILL)  # a crash releases the lock with the process
    assert pinned(waiting) == devices[first]
    second.stdin.close()  # a normal exit releases it too
    second.wait()
    assert pinned(holders(2)) == devices[second]
