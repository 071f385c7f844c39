"""analysis/compare.py on hand-made runs: each verdict (within noise, regression, improvement, status change,
host-bound, only on one side) from a few rows written as CSV, an old-schema file, the archive against itself,
and the exit code of --fail-on-regression."""
from pathlib import Path

import pandas as pd
import pytest

from analysis.compare import compare_dirs, main, read_results_file, summarise
from experiments.schema import ABLATIONS, COLUMNS

ARCHIVE = Path(__file__).resolve().parents[1] / "results" / "archive" / "nvidia-h200"
SHAPE = dict(dtype="fp16", batch=4, heads=16, kv_heads=16, seqlen_q=2048, seqlen_k=2048, head_dim=64, causal=0)


def rows(ms_per_repetition, *, experiment="speed", provider="ours", mode="fwd", status="ok", host_bound=None,
         **values) -> list[dict]:
    """One row per repetition of one cell; the columns not given stay empty."""
    out = []
    for repetition, ms in enumerate(ms_per_repetition):
        row = dict.fromkeys(COLUMNS, "")
        row.update(SHAPE, experiment=experiment, provider=provider, variant="default", mode=mode,
                   repetition=repetition, status=status, gpu="NVIDIA H200", commit="abc123", torch="2.11.0",
                   triton="3.6.0", source="measured")
        if status == "ok" and ms is not None:
            row.update(ms=ms, tflops=100.0 / ms)
        if host_bound is not None:
            row["host_bound"] = host_bound[repetition] if isinstance(host_bound, list) else host_bound
        row.update(values)
        out.append(row)
    return out


def write(directory: Path, ablation: str, table: list[dict], columns=COLUMNS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(table, columns=COLUMNS)[list(columns)].to_csv(directory / f"{ablation}.csv", index=False)
    return directory


def compare(tmp_path, baseline: list[dict], candidate: list[dict], ablation="speed", **options) -> pd.DataFrame:
    write(tmp_path / "baseline", ablation, baseline)
    write(tmp_path / "candidate", ablation, candidate)
    cells, _ = compare_dirs(tmp_path / "baseline", tmp_path / "candidate", **options)
    return cells


def only(cells: pd.DataFrame, **keys) -> dict:
    """The one compared cell matching `keys` (compare.csv's key columns are strings)."""
    match = cells
    for column, value in keys.items():
        match = match[match[column] == str(value)]
    assert len(match) == 1, match
    return match.iloc[0].to_dict()


STEADY = [1.00, 1.01, 0.99]  # spread 2%


def test_identical_runs_are_within_noise(tmp_path):
    run = (rows(STEADY) + rows([2.0, 2.1, 1.9], provider="sdpa_flash") + rows([0.5, 0.5, 0.5], mode="bwd")
           + rows([1.5, 1.5, 1.5], provider="torch_matmul", mode="matmul"))
    cells = compare(tmp_path, run, run)
    assert len(cells) == 4
    assert set(cells["verdict"]) == {"within noise"}
    assert (cells["ratio"] == 1.0).all()
    assert cells["regression"].sum() == 0
    assert only(cells, provider="sdpa_flash")["baseline_spread"] == pytest.approx(0.1)
    assert only(cells, provider="ours", mode="fwd")["baseline_n"] == 3


def test_thirty_percent_slower_with_small_spread_is_a_regression(tmp_path):
    cells = compare(tmp_path, rows(STEADY), rows([1.3 * ms for ms in STEADY]))
    cell = only(cells, provider="ours")
    assert cell["ratio"] == pytest.approx(1.3)
    assert cell["band"] == pytest.approx(0.02)
    assert cell["margin"] == pytest.approx(0.05)  # the threshold is the floor of the band
    assert cell["verdict"] == "regression" and cell["regression"] == 1
    assert cell["candidate_min"] == pytest.approx(1.287) and cell["candidate_max"] == pytest.approx(1.313)


def test_thirty_percent_slower_within_a_fifty_percent_spread_is_noise(tmp_path):
    cells = compare(tmp_path, rows(STEADY), rows([0.95, 1.3, 1.6]))
    cell = only(cells, provider="ours")
    assert cell["ratio"] == pytest.approx(1.3)
    assert cell["candidate_spread"] == pytest.approx(0.5)
    assert cell["band"] == pytest.approx(0.5)
    assert cell["verdict"] == "within noise" and cell["regression"] == 0


def test_thirty_percent_faster_is_an_improvement(tmp_path):
    cells = compare(tmp_path, rows(STEADY), rows([0.7 * ms for ms in STEADY]))
    assert only(cells, provider="ours")["verdict"] == "improvement"
    assert cells["regression"].sum() == 0


def test_a_cell_failing_on_the_candidate_is_a_status_change_and_a_regression(tmp_path):
    baseline = rows(STEADY) + rows(STEADY, provider="standard", status="oom")
    candidate = rows(STEADY, status="error") + rows(STEADY, provider="standard")
    cells = compare(tmp_path, baseline, candidate)
    failed = only(cells, provider="ours")
    assert failed["verdict"] == "status change"
    assert (failed["baseline_status"], failed["candidate_status"]) == ("ok", "error")
    assert failed["regression"] == 1
    recovered = only(cells, provider="standard")  # oom -> ok: a status change, not a regression
    assert recovered["verdict"] == "status change" and recovered["regression"] == 0
    summary = summarise(cells)
    assert (summary["regressions"], summary["newly failed"], summary["status changes"]) == (1, 1, 2)


def test_a_cell_failing_in_one_repetition_is_a_regression(tmp_path):
    candidate = rows(STEADY)
    candidate[1].update(status="error", ms="", tflops="")
    cell = only(compare(tmp_path, rows(STEADY), candidate), provider="ours")
    assert cell["candidate_status"] == "mixed" and cell["candidate_n"] == 2
    assert cell["verdict"] == "status change" and cell["regression"] == 1


def test_old_schema_file_loads_and_compares(tmp_path):
    # the columns of the first archive's schema, before repetitions, host-bound timing, net memory and telemetry
    added = {"repetition", "gpu_ms", "host_ms", "host_bound", "attn_mem_bytes", "input_bytes", "sm_clock_mhz",
             "power_w", "temp_c", "telemetry_samples"}
    old_columns = [column for column in COLUMNS if column not in added]
    baseline = write(tmp_path / "baseline", "speed", rows([1.0]) + rows([1.0], provider="flex"), columns=old_columns)
    frame = read_results_file(baseline / "speed.csv")
    assert set(COLUMNS) <= set(frame.columns)
    assert frame["repetition"].isna().all() and str(frame["repetition"].dtype) == "Int64"
    # a new-schema candidate with three repetitions: a 5% change is noise against a side measured once,
    # 10% is not
    write(tmp_path / "candidate", "speed", rows([1.04, 1.05, 1.06]) + rows([1.09, 1.10, 1.11], provider="flex"))
    cells, _ = compare_dirs(baseline, tmp_path / "candidate")
    ours, flex = only(cells, provider="ours"), only(cells, provider="flex")
    assert (ours["baseline_n"], ours["candidate_n"]) == (1, 3)
    assert pd.isna(ours["baseline_spread"])
    assert ours["band"] == pytest.approx(0.05)
    assert ours["verdict"] == "within noise"
    assert flex["verdict"] == "regression"


def test_host_bound_cell_is_listed_but_not_counted(tmp_path):
    baseline = rows(STEADY) + rows(STEADY, provider="flex", host_bound=0)
    candidate = rows(STEADY) + rows([2.0, 2.0, 2.0], provider="flex", host_bound=1)
    cells = compare(tmp_path, baseline, candidate)
    cell = only(cells, provider="flex")
    assert cell["candidate_host_bound"] == 1 and cell["judged"] == 0
    assert cell["verdict"] == "regression" and cell["regression"] == 0
    summary = summarise(cells)
    assert (summary["regressions"], summary["host-bound"], summary["within noise"]) == (0, 1, 1)
    assert main([str(tmp_path / "baseline"), str(tmp_path / "candidate"), "--out", str(tmp_path / "out"),
                 "--fail-on-regression"]) == 0
    assert "Host-bound cells, not judged" in (tmp_path / "out" / "compare.md").read_text()


def test_a_host_bound_repetition_is_left_out_of_the_median(tmp_path):
    candidate = rows([1.0, 5.0, 1.0], host_bound=[0, 1, 0])
    cell = only(compare(tmp_path, rows(STEADY), candidate), provider="ours")
    assert cell["candidate_n"] == 2 and cell["candidate_n_host_bound"] == 1
    assert cell["candidate_host_bound"] == 0 and cell["judged"] == 1
    assert cell["candidate_median"] == pytest.approx(1.0) and cell["verdict"] == "within noise"


def test_tile_sweep_cells_differ_by_tiles(tmp_path):
    tiles = dict(experiment="tiles", variant="sweep")
    baseline = (rows(STEADY, block_m=128, block_n=64, num_warps=8, num_stages=3, **tiles)
                + rows(STEADY, block_m=64, block_n=32, num_warps=4, num_stages=2, **tiles))
    candidate = (rows(STEADY, block_m=128, block_n=64, num_warps=8, num_stages=3, **tiles)
                 + rows([1.5 * ms for ms in STEADY], block_m=64, block_n=32, num_warps=4, num_stages=2, **tiles))
    cells = compare(tmp_path, baseline, candidate, ablation="tiles")
    assert len(cells) == 2
    assert only(cells, block_m=128)["verdict"] == "within noise"
    assert only(cells, block_m=64)["verdict"] == "regression"


def test_accuracy_compares_errors(tmp_path):
    def errors(provider, factor):
        return rows([None], experiment="accuracy", provider=provider, mode="fwd_bwd", repetition="",
                    err_o=1e-4 * factor, err_dq=3e-4 * factor, err_dk=2e-4, err_dv=2e-4)

    baseline = errors("ours", 1) + errors("standard", 1)
    candidate = errors("ours", 1.5) + [{**errors("standard", 1)[0], "err_dk": 5e-4}]
    cells = compare(tmp_path, baseline, candidate, ablation="accuracy")
    ours, standard = only(cells, provider="ours"), only(cells, provider="standard")
    assert ours["verdict"] == "within noise" and ours["ratio"] == pytest.approx(1.5)
    assert standard["verdict"] == "regression" and standard["metric"] == "err_dk"
    assert standard["ratio"] == pytest.approx(2.5) and standard["regression"] == 1


def test_cells_and_ablations_on_one_side_only(tmp_path, capsys):
    write(tmp_path / "baseline", "causal", rows(STEADY, experiment="causal"))
    baseline = rows(STEADY) + rows(STEADY, provider="flex")
    cells = compare(tmp_path, baseline, rows(STEADY) + rows(STEADY, mode="bwd"))
    assert set(cells["ablation"]) == {"speed"}
    assert only(cells, provider="flex")["verdict"] == "only in baseline"
    assert only(cells, provider="ours", mode="bwd")["verdict"] == "only in candidate"
    assert cells["regression"].sum() == 0
    main([str(tmp_path / "baseline"), str(tmp_path / "candidate"), "--out", str(tmp_path / "out")])
    assert "causal: skipped, no causal.csv in the candidate directory" in capsys.readouterr().out


def test_archive_against_itself_has_no_regressions(tmp_path, capsys):
    assert main([str(ARCHIVE), str(ARCHIVE), "--out", str(tmp_path), "--fail-on-regression"]) == 0
    cells = pd.read_csv(tmp_path / "compare.csv")
    # the ablations' CSVs; side files (training_loss.csv: loss curves, no timings) are not compared
    csvs = [path for path in ARCHIVE.glob("*.csv") if path.stem in ABLATIONS]
    assert set(cells["ablation"]) == {path.stem for path in csvs}
    keys = ["provider", "variant", "mode", "dtype", "batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim",
            "causal", "block_m", "block_n", "num_warps", "num_stages"]
    expected_cells = 0
    for path in csvs:  # a cell is its keys (tile sweeps differ by tiles), over its repetitions
        frame = pd.read_csv(path)
        frame = frame if path.stem == "tiles" else frame.assign(block_m=0, block_n=0, num_warps=0, num_stages=0)
        expected_cells += len(frame[keys].drop_duplicates())
    assert len(cells) == expected_cells
    assert cells["regression"].sum() == 0
    assert set(cells["verdict"]) == {"within noise"}
    summary = (tmp_path / "compare.md").read_text()
    assert "**0 regressions**" in summary and "NVIDIA H200" in summary and "provenance.json" in summary
    assert summary in capsys.readouterr().out


def test_fail_on_regression_sets_the_exit_code(tmp_path):
    write(tmp_path / "baseline", "speed", rows(STEADY))
    write(tmp_path / "candidate", "speed", rows([1.3 * ms for ms in STEADY]))
    arguments = [str(tmp_path / "baseline"), str(tmp_path / "candidate"), "--out", str(tmp_path / "out")]
    assert main(arguments) == 0
    assert main(arguments + ["--fail-on-regression"]) == 1
    assert main(arguments + ["--fail-on-regression", "--threshold", "0.5"]) == 0
    same = [str(tmp_path / "baseline"), str(tmp_path / "baseline"), "--out", str(tmp_path / "same")]
    assert main(same + ["--fail-on-regression"]) == 0
    written = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert list(written["verdict"]) == ["within noise"]  # the last call, --threshold 0.5


def test_the_error_cells_of_a_timed_ablation_compare_errors(tmp_path):
    """fp8.csv: timed cells by their times, its accuracy cells (errors, no time) by their errors."""
    fp8 = dict(experiment="fp8", provider="ours_fp8", dtype="fp8_e4m3")

    def accuracy(err_o):
        return rows([None], **fp8, variant="accuracy", repetition="", err_o=err_o, max_abs_err_o=0.02)

    baseline = rows(STEADY, **fp8) + accuracy(0.02)
    candidate = rows(STEADY, **fp8) + accuracy(0.05)
    cells = compare(tmp_path, baseline, candidate, ablation="fp8")
    timed, errors = only(cells, variant="default"), only(cells, variant="accuracy")
    assert timed["verdict"] == "within noise" and timed["metric"] == "ms"
    assert errors["verdict"] == "regression" and errors["metric"] == "err_o"
    assert errors["ratio"] == pytest.approx(2.5) and errors["regression"] == 1
