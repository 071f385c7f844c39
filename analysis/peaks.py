"""The datasheet side of the roofs that throughput is measured against: hardware.yaml's peaks, matched on
the results' `gpu` column. The measured matmul ceiling (interleaved with each timed ablation) is read by
analysis/cells.py.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.cells import read_yaml
from analysis.load import measured

HARDWARE_FILE = Path(__file__).with_name("hardware.yaml")


def read_hardware(path: str | Path = HARDWARE_FILE) -> dict:
    return read_yaml(path)


def datasheet_entry(gpu: str, hardware: dict) -> dict | None:
    """The hardware.yaml entry whose `match` occurs in the GPU name, or None for an unknown GPU."""
    for entry in hardware["gpus"]:
        if entry["match"].lower() in str(gpu).lower():
            return entry
    return None


def paper_gpu_entry(hardware: dict) -> dict:
    return next(entry for entry in hardware["gpus"] if entry["name"] == hardware["paper_gpu"])


def main_gpu(frames: dict[str, pd.DataFrame]) -> str:
    """The GPU named most often across the measured rows ("" when no row names one)."""
    names = pd.concat([measured(frame)["gpu"] for frame in frames.values()])
    names = names[names != ""]
    return str(names.mode().iloc[0]) if not names.empty else ""
