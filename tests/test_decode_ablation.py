"""The decode ablation: its grid, its rows, files written before its columns, its claims and figure."""
import copy
import csv

import pandas as pd
import pytest
import torch

from analysis.claims import DOES_NOT_HOLD, HOLDS, NO_DATA, evaluate_claims, read_claims
from analysis.figures import draw, save
from analysis.load import read_experiment, read_results, results_path
from analysis.peaks import read_hardware
from analysis.synthetic import write_results
from experiments import decode, grid, results
from experiments.grid import Cell
from experiments.schema import COLUMNS, LATER_COLUMNS
from experiments.settings import ablation_settings, check, load_default
from test_kernels import DEVICE


@pytest.fixture(scope="module")
def settings():
    return ablation_settings(load_default(), ["decode"])["decode"]


def test_grid_skips_caches_over_the_limit_and_times_a_copy_per_pass(settings):
    cells = grid.cells("decode", settings, on_gpu=True)
    one_pass = decode.cells(settings, Cell)
    assert len(cells) == settings["repetitions"] * (len(one_pass) + len(settings["dtypes"]) + 1)
    assert all(decode.cache_bytes(c.batch, c.kv_heads, c.seqlen_k, c.head_dim, c.dtype) <= settings["max_cache_gb"] * 1e9
               for c in one_pass)
    assert not any(c.batch == 64 and c.kv_heads == 32 and c.seqlen_k == 131072 for c in one_pass)  # 137 GB
    opening = [c for c in cells if c.repetition == 0][:len(settings["dtypes"]) + 1]
    assert [c.provider for c in opening] == ["torch_matmul"] * len(settings["dtypes"]) + ["torch_copy"]
    assert {c.variant for c in one_pass if c.provider == "ours"} == {"dense", "paged256", "paged16"}
    assert all(c.seqlen_q == 1 for c in one_pass)
    assert {c.batch for c in one_pass if c.provider == "flex"} == set(settings["flex_batches"])


def test_config_refuses_kv_heads_that_do_not_divide():
    config = copy.deepcopy(load_default())
    config["decode"]["heads"] = [[32, 5]]
    with pytest.raises(ValueError, match="decode.heads"):
        check(config)


def test_ours_cell_runs_on_this_host():
    """On the interpreter without a GPU, on the GPU where there is one."""
    cell = Cell("decode", "ours", "fwd", "fp16", batch=2, heads=8, kv_heads=1, seqlen_q=1, seqlen_k=300, head_dim=32,
                causal=True, variant="paged16")
    fn, note = decode.call(cell, torch.device(DEVICE))
    assert note.startswith("num_splits=")
    out = fn()
    assert out.shape == (2, 1, 8, 32) and torch.isfinite(out).all()
    sdpa = Cell("decode", "sdpa", "fwd", "fp16", batch=1, heads=8, kv_heads=1, seqlen_q=1, seqlen_k=64, head_dim=32,
                causal=True, variant="dense")
    from experiments.providers import Unsupported
    with pytest.raises(Unsupported):
        decode.call(sdpa, torch.device("cpu"))


def test_a_file_written_before_the_decode_columns_still_reads(tmp_path):
    directory = write_results(tmp_path / "results")
    path = results_path(directory, "speed")
    frame = pd.read_csv(path, dtype=str, keep_default_na=False).drop(columns=list(LATER_COLUMNS))
    frame.to_csv(path, index=False)
    assert list(read_experiment(path).columns) == COLUMNS
    rows = results.read_csv(str(path))
    assert set(rows[0]) == set(COLUMNS) and rows[0]["page_size"] == ""
    with open(path, newline="") as f:
        assert "page_size" not in next(csv.reader(f))


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    return read_results(write_results(tmp_path_factory.mktemp("results")))


def _verdicts(frames):
    return {r["id"]: r for r in evaluate_claims(frames, read_claims(), read_hardware()) if r["id"].startswith("decode")}


def test_claims_hold_on_the_synthetic_run_and_say_no_data_without_it(frames):
    records = _verdicts(frames)
    assert {r["verdict"] for r in records.values()} == {HOLDS}
    without = _verdicts({name: frame for name, frame in frames.items() if name != "decode"})
    assert {r["verdict"] for r in without.values()} == {NO_DATA}
    assert all(r["finding"] == "decode: not measured in the archived run yet" for r in without.values())


def test_slow_paged_and_slow_decode_do_not_hold(frames):
    frame = frames["decode"].copy()
    paged = frame["variant"] == "paged16"
    frame.loc[paged, ["ms", "gpu_ms"]] *= 1.3  # decoding is judged on GPU time (analysis/decode.py)
    records = _verdicts({**frames, "decode": frame})
    assert records["decode_paged"]["verdict"] == DOES_NOT_HOLD
    frame = frames["decode"].copy()
    frame.loc[frame["provider"] == "ours", ["ms", "gpu_ms"]] *= 2
    records = _verdicts({**frames, "decode": frame})
    assert records["decode_bandwidth"]["verdict"] == DOES_NOT_HOLD
    assert records["decode_vs_baselines"]["verdict"] == DOES_NOT_HOLD


def test_figure_with_and_without_results(frames, tmp_path):
    save(draw("decode", frames, read_hardware()), "decode", tmp_path)
    save(draw("decode", {k: v for k, v in frames.items() if k != "decode"}, read_hardware()), "decode", tmp_path)
    assert (tmp_path / "decode.png").exists()


def test_report_says_decode_was_not_measured_without_its_file(tmp_path):
    from analysis import claims, facts, figures
    from analysis.catalog import FIGURES
    from paper.render import render

    directory = write_results(tmp_path / "results")
    (directory / "decode.csv").unlink()
    build = tmp_path / "analysis"
    claims.main(str(directory), str(build / "verdicts.json"), str(build / "claims.csv"))
    facts.main(str(directory), str(build / "figures"), str(build / "facts.json"))
    for name in FIGURES:
        figures.main(name, str(directory), str(build / "figures"))
    text = render(build, tmp_path / "paper", pdf=False)["md"].read_text()
    assert "Beyond the paper: decoding" in text
    assert "decode: not measured in the archived run yet" in text


def test_bandwidth_claim_explains_its_least_cell_by_a_fixed_cost_fitted_over_the_cache_lengths(frames):
    """GPU times built as a fixed cost plus bytes over a rate (ours 12 us and 3000 GB/s, SDPA 20 us and the same
    rate) come back from the fit, the least cell's spare time is 70%-of-copy's time less the reads' time, and the
    report's "why" line says both; a cell off the line moves the fit."""
    from analysis.decode import copy_bandwidth

    decode = frames["decode"].copy()
    gqa = (decode["heads"] == 32) & (decode["kv_heads"] == 4)
    moved = pd.Series([decode_bytes(row) for row in decode.itertuples()], index=decode.index)
    for provider, fixed in (("ours", 12.0), ("sdpa", 20.0)):
        rows = gqa & (decode["provider"] == provider) & (decode["variant"] == "dense")
        for column in ("ms", "gpu_ms"):
            decode.loc[rows, column] = (fixed + moved[rows] / 3000e3) / 1e3
    record = _verdicts({**frames, "decode": decode})["decode_bandwidth"]
    values, copy_gbs = record["values"], copy_bandwidth(decode)
    assert values["fixed_us"] == pytest.approx(12.0) and values["peer_fixed_us"] == pytest.approx(20.0)
    assert values["stream_share"] == pytest.approx(3000 / copy_gbs)
    least = moved[gqa & (decode["seqlen_k"] == 8192)].iloc[0]
    assert values["spare_us"] == pytest.approx(least / (0.7 * copy_gbs * 1e3) - least / 3000e3)
    assert record["verdict"] != HOLDS and "a fixed 12.0 us a call" in record["context"]
    assert "fixed cost: 20.0 us" in record["context"]
    ours = gqa & (decode["provider"] == "ours") & (decode["variant"] == "dense")
    decode.loc[ours & (decode["seqlen_k"] == 1024), ["ms", "gpu_ms"]] *= 1.5  # the short cache slower: off the line
    assert _verdicts({**frames, "decode": decode})["decode_bandwidth"]["values"]["fixed_us"] > 12.5


def decode_bytes(row) -> float:
    """What a synthetic decode row moves (experiments.decode.moved_bytes), NaN for the copy and matmul rows."""
    if pd.isna(row.batch) or row.dtype not in ("fp16", "bf16"):
        return float("nan")
    return decode.moved_bytes(int(row.batch), int(row.heads), int(row.kv_heads), int(row.seqlen_k), int(row.head_dim),
                              row.dtype)


def test_paged_claim_splits_its_worst_shape_into_a_fixed_cost_and_a_streaming_rate(frames):
    """Paged16 built as 20 us plus the bytes at 2700 GB/s, dense as 12 us plus the bytes at 3000 GB/s (paged256 as
    dense): the fit at the worst pair's shape gives both fixed costs and a 90% rate, and the "why" line says so."""
    decode = frames["decode"].copy()
    moved = pd.Series([decode_bytes(row) for row in decode.itertuples()], index=decode.index)
    for variant, fixed, rate in (("dense", 12.0, 3000), ("paged256", 12.0, 3000), ("paged16", 20.0, 2700)):
        rows = (decode["provider"] == "ours") & (decode["variant"] == variant)
        for column in ("ms", "gpu_ms"):
            decode.loc[rows, column] = (fixed + moved[rows] / (rate * 1e3)) / 1e3
    record = _verdicts({**frames, "decode": decode})["decode_paged"]
    values = record["values"]
    assert values["fit_variant"] == "paged16" and values["max_at"].endswith("cache 1k fp16 paged16")
    assert values["paged_fixed_us"] == pytest.approx(20.0) and values["dense_fixed_us"] == pytest.approx(12.0)
    assert values["paged_rate_share"] == pytest.approx(0.9)
    assert record["verdict"] != HOLDS
    assert f"at {values['fit_at']}, the paged16 call's GPU time is a fixed 20.0 us against the dense call's 12.0 us" \
        in record["context"] and "90.0% of the dense call's streaming rate" in record["context"]
