"""Where a row was measured: GPU, driver, CUDA, torch, triton, git commit and the kind of host.

Every row of results/ carries these columns (and its own timestamp), so a number can always be traced
to the run that produced it; archived rows keep them when they are copied back into results/.
"""
import datetime
import os
import re
import subprocess


COMMIT_ENV = "EXPERIMENTS_COMMIT"  # names the commit where the tree is not a git checkout


def _output(command: list[str], cwd: str | None = None) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=cwd, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str:
    """The checked-out commit, "-dirty" when tracked files differ from it; $EXPERIMENTS_COMMIT wins."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    head = _output(["git", "rev-parse", "HEAD"], cwd=root)
    if not head:
        return "unknown"
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return head + ("-dirty" if dirty else "")


def collect() -> dict:
    """This process's provenance columns (everything but the per-row timestamp)."""
    import torch
    import triton

    on_gpu = torch.cuda.is_available()
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    driver = _output(query).split("\n")[0] if on_gpu else ""
    return dict(
        gpu=torch.cuda.get_device_name() if on_gpu else "none",
        driver=driver,
        cuda=torch.version.cuda or "",
        torch=torch.__version__,
        triton=triton.__version__,
        commit=commit(),
        host_kind="cuda" if on_gpu else "cpu-interpreter",
    )


def timestamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def slug(gpu_name: str) -> str:
    """The archive folder of a GPU: "NVIDIA H200" -> "nvidia-h200"."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
