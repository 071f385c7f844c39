"""Which CUDA GPUs this host shows, and a lock-file pool that pins each GPU job to a device of its own.

Snakemake's `resources: gpu=1` with `--resources gpu=N` bounds how many GPU jobs run at once but does
not say which device each one gets. Each job's runner calls `pin()` before anything initialises
CUDA: it takes the first free lock among <lock dir>/<host>-gpu-<device>.lock (fcntl.flock, so the
lock goes away with the process, however it ends) and sets CUDA_VISIBLE_DEVICES to that device.
Devices are those listed in an already-set CUDA_VISIBLE_DEVICES (a cluster scheduler's allocation),
else 0..count-1 with the count from nvidia-smi, or from $EXPERIMENTS_GPU_COUNT where set (tests,
hosts without nvidia-smi). No CUDA is initialised here, so the choice can still take effect.
"""
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time

COUNT_ENV = "EXPERIMENTS_GPU_COUNT"
LOCK_DIR_ENV = "EXPERIMENTS_GPU_LOCK_DIR"
DEFAULT_LOCK_DIR = os.path.join(".snakemake", "gpu-locks")

_held = []  # leases of this process: kept open until it exits


def device_count(environ=os.environ) -> int:
    """Physical CUDA devices on this host: $EXPERIMENTS_GPU_COUNT, else nvidia-smi's list, else 0."""
    if environ.get(COUNT_ENV, "") != "":
        return int(environ[COUNT_ENV])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listing.splitlines())


def visible_devices(environ=os.environ) -> list[str]:
    """The devices this process may use, as CUDA_VISIBLE_DEVICES entries."""
    count = device_count(environ)
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if count == 0 or listed is None:
        return [str(i) for i in range(count)]
    devices = []
    for entry in (part.strip() for part in listed.split(",")):
        if entry in ("", "-1"):  # CUDA stops at the first invalid entry
            break
        devices.append(entry)
    return devices


class Lease:
    """One device's lock, held while the file descriptor stays open."""

    def __init__(self, device: str, fd: int):
        self.device, self.fd = device, fd

    def release(self) -> None:
        os.close(self.fd)


def acquire(devices: list[str], lock_dir: str, poll_s: float = 0.5) -> Lease:
    """Lock the first free device of `devices`, waiting while every one is taken."""
    os.makedirs(lock_dir, exist_ok=True)
    host = socket.gethostname()
    announced = False
    while True:
        for device in devices:
            fd = os.open(os.path.join(lock_dir, f"{host}-gpu-{device}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # for whoever looks at the lock
            return Lease(device, fd)
        if not announced:
            print(f"all GPUs {devices} are in use by other jobs; waiting for one", file=sys.stderr, flush=True)
            announced = True
        time.sleep(poll_s)


def pin(environ=os.environ) -> str | None:
    """Give this process a GPU of its own through CUDA_VISIBLE_DEVICES; None on a host without one."""
    devices = visible_devices(environ)
    if not devices:
        return None
    lease = acquire(devices, environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)
    _held.append(lease)
    environ["CUDA_VISIBLE_DEVICES"] = lease.device
    return lease.device
