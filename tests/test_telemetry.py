"""experiments/telemetry.py: the samples of a row's window become its clock, power and temperature."""
import sys

from experiments import telemetry


def sampler_reading(path) -> telemetry.Sampler:
    """A Sampler reading `path`, as if its sampling process were running (no NVML needed)."""
    sampler = object.__new__(telemetry.Sampler)
    sampler.path, sampler.samples, sampler._offset, sampler.process = str(path), [], 0, object()
    return sampler


def test_a_window_keeps_its_own_samples_and_summarises_them(tmp_path):
    path = tmp_path / "samples.txt"
    path.write_text("10.000 1980 500.0 50\n10.005 1965 600.0 52\n10.010 1500 700.0 60\n")
    sampler = sampler_reading(path)
    window = sampler.window(10.0, 10.006)
    assert window == {"sm_clock_mhz": (1980 + 1965) / 2, "power_w": 550.0, "temp_c": 52, "telemetry_samples": 2}
    with open(path, "a") as f:
        f.write("10.020 1470 710.0 61\n10.0")  # a line still being written is read next time
    assert sampler.window(10.007, 10.021) == {"sm_clock_mhz": (1500 + 1470) / 2, "power_w": 705.0, "temp_c": 61,
                                               "telemetry_samples": 2}
    assert sampler.window(11.0, 12.0) == {"telemetry_samples": 0}


def test_without_nvml_there_is_no_sampler_and_no_columns(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    sampler = telemetry.Sampler(None, str(tmp_path / "samples.txt"))
    assert sampler.process is None and sampler.window(0.0, 1.0) == {}
    assert "nvidia-ml-py is not installed" in capsys.readouterr().out
    sampler.close()
