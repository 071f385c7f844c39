"""Analysis stage on a synthetic results set: schema checks, rule evaluation, claim verdicts that flip
when the data crosses a claim's threshold, and every figure drawn (also from failed or missing rows)."""
import pandas as pd
import pytest

from analysis import synthetic
from analysis.catalog import FIGURES, caption_path
from analysis.claims import (DOES_NOT_HOLD, HOLDS, NO_DATA, PARTLY, evaluate_claims, evaluate_rule, fill,
                             read_claims, select)
from analysis.figures import draw, save
from analysis.load import EXPERIMENTS, SchemaError, read_experiment, read_results, results_path
from analysis.peaks import read_hardware


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return synthetic.write_results(tmp_path_factory.mktemp("results"))


@pytest.fixture
def frames(results_dir):
    return read_results(results_dir)


def verdicts(frames):
    return {record["id"]: record for record in evaluate_claims(frames, read_claims(), read_hardware())}


def scale(frames, experiment, arm, factor, columns=("ms", "ms_p20", "ms_p80")):
    """Multiply `columns` of the rows matching `arm`; tflops moves inversely to ms."""
    frame = frames[experiment].copy()
    rows = select(frame, arm).index
    for column in columns:
        frame.loc[rows, column] *= factor
    if "ms" in columns:
        frame.loc[rows, "tflops"] /= factor
    return {**frames, experiment: frame}


def test_read_results_types_and_statuses(frames):
    assert set(frames) == set(EXPERIMENTS)
    assert str(frames["speed"]["seqlen_k"].dtype) == "Int64"
    assert {"ok", "oom"} <= set(frames["speed"]["status"])


@pytest.mark.parametrize("change, message", [
    (lambda frame: frame.drop(columns="tflops"), "missing columns"),
    (lambda frame: frame.assign(status="crashed"), "status"),
    (lambda frame: frame.assign(seqlen_k="long"), "non-numeric"),
])
def test_schema_errors_name_the_problem(results_dir, tmp_path, change, message):
    frame = pd.read_csv(results_path(results_dir, "speed"), dtype=str, keep_default_na=False)
    change(frame).to_csv(tmp_path / "speed.csv", index=False)
    with pytest.raises(SchemaError, match=message):
        read_experiment(tmp_path / "speed.csv")


@pytest.mark.parametrize("expression, values, expected", [
    ("min >= 3", {"min": 3.0}, True),
    ("min >= 3 and max <= 10", {"min": 3.0, "max": 11.0}, False),
    ("min >= 3 and max <= 10", {"min": None, "max": 11.0}, False),
    ("min >= 3 and max <= 10", {"min": None, "max": 9.0}, None),
    ("min >= 3 or max >= 3", {"min": None, "max": 4.0}, True),
    ("not slope <= 1.2", {"slope": 2.0}, True),
    ("max(a, b) / 2 > 1", {"a": 1.0, "b": 4.0}, True),
])
def test_rule_evaluation(expression, values, expected):
    assert evaluate_rule(expression, values) is expected


def test_rule_rejects_unknown_names_and_calls():
    with pytest.raises(KeyError, match="median"):
        evaluate_rule("median > 1", {"min": 1.0})
    with pytest.raises(ValueError, match="unsupported"):
        evaluate_rule("__import__('os')", {})


def test_every_claim_has_a_metric_a_figure_and_a_verdict(frames):
    records = verdicts(frames)
    assert len(records) >= 9
    for claim in read_claims():
        record = records[claim["id"]]
        assert record["figure"] in FIGURES
        assert record["verdict"] in {HOLDS, PARTLY, DOES_NOT_HOLD}
        assert "n/a" not in record["finding"]
        assert "n/a" not in fill(claim["context"], record["values"])


ours_fwd, ours_bwd = {"provider": "ours", "mode": "fwd"}, {"provider": "ours", "mode": "bwd"}
FLIPS = [
    # claim, change to the synthetic results, verdict before, verdict after
    ("speedup_vs_standard", lambda f: scale(f, "speed", {"provider": "standard"}, 0.5), HOLDS, PARTLY),
    ("speedup_vs_standard", lambda f: scale(f, "speed", {"provider": "standard"}, 0.25), HOLDS, DOES_NOT_HOLD),
    ("speedup_vs_fa1", lambda f: scale(f, "fa1_vs_fa2", {"variant": "fa1_both"}, 0.5), HOLDS, DOES_NOT_HOLD),
    ("forward_peak_fraction", lambda f: scale(f, "speed", ours_fwd, 1.2, ["tflops"]), PARTLY, HOLDS),
    ("forward_peak_fraction", lambda f: scale(f, "speed", ours_fwd, 0.5, ["tflops"]), PARTLY, DOES_NOT_HOLD),
    ("backward_peak_fraction", lambda f: scale(f, "speed", ours_bwd, 1.4, ["tflops"]), DOES_NOT_HOLD, PARTLY),
    ("backward_peak_fraction", lambda f: scale(f, "speed", ours_bwd, 2.0, ["tflops"]), DOES_NOT_HOLD, HOLDS),
    ("memory_linear", lambda f: scale(f, "seqlen", {"provider": "standard"}, 3.0, ["peak_mem_bytes"]), PARTLY, HOLDS),
    ("causal_skip", lambda f: scale(f, "causal", {"variant": "skip_tiles"}, 1.15), HOLDS, PARTLY),
    ("causal_skip", lambda f: scale(f, "causal", {"variant": "skip_tiles"}, 2.0), HOLDS, DOES_NOT_HOLD),
    ("recompute_faster", lambda f: scale(f, "recompute", {"recompute": 1}, 2.0), HOLDS, DOES_NOT_HOLD),
    ("exact_error", lambda f: scale(f, "accuracy", {"provider": "ours"}, 3.0, ["err_o", "err_lse", "err_dq",
                                                                               "err_dk", "err_dv"]),
     HOLDS, DOES_NOT_HOLD),
    ("triton_vs_cuda", lambda f: scale(f, "speed", {"provider": "sdpa_flash"}, 0.5), DOES_NOT_HOLD, HOLDS),
]


@pytest.mark.parametrize("claim, change, before, after", FLIPS, ids=[f"{c}-{a}" for c, _, _, a in FLIPS])
def test_verdict_flips_when_the_data_crosses_the_threshold(frames, claim, change, before, after):
    assert verdicts(frames)[claim]["verdict"] == before
    changed = verdicts(change(frames))[claim]
    assert changed["verdict"] == after
    assert (changed["context"] != "") == (after != HOLDS)


def test_memory_claim_fails_when_our_memory_grows_quadratically(frames):
    frame = frames["seqlen"].copy()
    ours = frame["provider"] == "ours"
    frame.loc[ours, "peak_mem_bytes"] = frame.loc[ours, "seqlen_k"].astype(float) ** 2
    assert verdicts({**frames, "seqlen": frame})["memory_linear"]["verdict"] == DOES_NOT_HOLD


def test_failed_rows_give_no_data_verdicts_not_crashes(frames):
    failed = {name: frame.assign(status="error", note="kernel crashed") for name, frame in frames.items()}
    records = verdicts(failed)
    assert {record["verdict"] for record in records.values()} == {NO_DATA}
    assert "error" in records["speedup_vs_standard"]["finding"]


def test_missing_baseline_is_no_data(frames):
    speed = frames["speed"][frames["speed"]["provider"] != "standard"]
    record = verdicts({**frames, "speed": speed})["speedup_vs_standard"]
    assert record["verdict"] == NO_DATA
    assert "no rows" in record["finding"]


def test_unknown_gpu_leaves_the_datasheet_share_unknown(frames):
    speed = frames["speed"].assign(gpu="Some Future GPU")
    record = verdicts({**frames, "speed": speed})["forward_peak_fraction"]
    assert record["values"]["of_datasheet"] is None
    assert record["verdict"] == PARTLY  # judged on the measured ceiling alone


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_is_drawn_with_a_caption(frames, tmp_path, name):
    paths = save(draw(name, frames, read_hardware()), name, tmp_path)
    assert all(path.stat().st_size > 1000 for path in paths.values())
    assert caption_path(name).read_text().strip()


@pytest.mark.parametrize("name", list(FIGURES))
def test_figures_survive_empty_and_failed_results(frames, tmp_path, name):
    empty = {experiment: frame.iloc[:0] for experiment, frame in frames.items()}
    failed = {experiment: frame.assign(status="oom") for experiment, frame in frames.items()}
    for variant in (empty, failed):
        save(draw(name, variant, read_hardware()), name, tmp_path)
