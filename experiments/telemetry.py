"""GPU telemetry beside the measurements: SM clock, power and temperature sampled through NVML.

A sampler runs in its own process (so it takes no time from the measuring one), reading the GPU
every few milliseconds and appending `time clock_mhz power_w temp_c` lines to a file. The measuring
process asks for the samples that fall inside a row's timing window and keeps their median SM clock,
mean power, highest temperature and count in the row. Without NVML (`nvidia-ml-py`) or a GPU the
sampler is absent and those columns stay empty.

    python -m experiments.telemetry --pci-bus-id 0000:19:00.0 --output samples.txt  # the sampler
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

INTERVAL_S = 0.005


def pci_bus_id(device) -> str | None:
    """The PCI bus id NVML knows this torch CUDA device by (CUDA_VISIBLE_DEVICES renumbers devices)."""
    import torch

    props = torch.cuda.get_device_properties(device)
    try:
        return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:
        return None


class Sampler:
    """Starts the sampling process for one GPU; `window(t0, t1)` summarises the samples between."""

    def __init__(self, bus_id: str | None, path: str):
        self.path = path
        self.samples: list[tuple[float, float, float, float]] = []
        self._offset = 0
        self.process = None
        try:
            import pynvml  # noqa: F401  (nvidia-ml-py)
        except ImportError:
            print("telemetry: nvidia-ml-py is not installed; clock, power and temperature are not recorded",
                  flush=True)
            return
        open(path, "w").close()
        command = [sys.executable, "-m", "experiments.telemetry", "--output", path, "--parent", str(os.getpid())]
        if bus_id:
            command += ["--pci-bus-id", bus_id]
        self.process = subprocess.Popen(command)

    def window(self, started: float, ended: float) -> dict:
        """sm_clock_mhz (median), power_w (mean), temp_c (max), telemetry_samples over [started, ended]."""
        if self.process is None:
            return {}
        with open(self.path) as f:
            f.seek(self._offset)
            text = f.read()
        complete = text[:text.rfind("\n") + 1]
        self._offset += len(complete.encode())
        for line in complete.splitlines():
            try:
                self.samples.append(tuple(float(field) for field in line.split()))
            except ValueError:
                continue
        inside = [sample for sample in self.samples if started <= sample[0] <= ended]
        self.samples = [sample for sample in self.samples if sample[0] > ended]
        if not inside:
            return {"telemetry_samples": 0}
        return {"sm_clock_mhz": statistics.median(s[1] for s in inside),
                "power_w": statistics.fmean(s[2] for s in inside),
                "temp_c": max(s[3] for s in inside), "telemetry_samples": len(inside)}

    def close(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()


def sample(bus_id: str | None, output: str, parent: int) -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
    except Exception:  # no or unknown bus id: the only GPU, or the first
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with open(output, "a") as f:
        while os.getppid() == parent:  # ends with the measuring process
            clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
            power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
            f.write(f"{time.time():.4f} {clock} {power:.1f} {temp}\n")
            f.flush()
            time.sleep(INTERVAL_S)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pci-bus-id")
    parser.add_argument("--output", required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args()
    sample(args.pci_bus_id, args.output, args.parent)
