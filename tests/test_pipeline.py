"""The Snakemake workflow: config validation, planning, lint, and a tiny run end to end on the CPU.

The workflow is copied into a temporary directory with a synthetic GPU archive, so these tests
never touch the repository's results/; they take the CPU path even on a GPU host, but for the last,
which measures a tiny grid where there is a GPU.
"""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from experiments import gpus, grid, results, run
from experiments.schema import SIDE_FILES, STANDALONE_ABLATIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_ABLATIONS = list(grid.ABLATIONS) + list(STANDALONE_ABLATIONS)  # the workflow's targets (jit: a runner of its own)
ARCHIVED = [name for name in ALL_ABLATIONS if name not in grid.INTERPRETER_ABLATIONS]
SIDE = {name: list(SIDE_FILES.get(name, ())) for name in ALL_ABLATIONS}  # files written beside an ablation's CSV
ARCHIVED_FILES = ARCHIVED + [side for name in ARCHIVED for side in SIDE[name]]
TEST_GPU = "test-gpu"

# A grid small enough for Triton's interpreter on two cores: one shape, one dtype.
TINY_CONFIG = """
dtypes: [fp16]
head_dims: [64]
accuracy:
  causal: [false, true]
  providers: [ours, standard, sdpa_flash]
  shapes: [{batch: 1, heads: 2, kv_heads: 1, seqlen_q: 37, seqlen_k: 37, head_dim: 24}]
  interpreter_shapes: [{batch: 1, heads: 2, kv_heads: 1, seqlen_q: 37, seqlen_k: 37, head_dim: 24}]
"""


def snakemake(workdir, *args, check=True, cpu_only=True):
    """Run Snakemake in `workdir`, as on a host without a GPU unless cpu_only is False; the rules'
    `python3` is the interpreter running the tests."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    if cpu_only:
        env[gpus.COUNT_ENV] = "0"
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def planned_jobs(done) -> dict[str, int]:
    """The job counts of a dry run's "Job stats" table."""
    lines = done.stdout.splitlines()
    start = lines.index("Job stats:") + 3
    jobs = {}
    for line in lines[start:]:
        name, count = line.split()
        if name == "total":
            return jobs
        jobs[name] = int(count)
    raise AssertionError(done.stdout)


def synthetic_row(experiment: str) -> results.Row:
    return results.Row(experiment=experiment, provider="ours", mode="fwd", dtype="fp16", batch=1, heads=2,
                       kv_heads=2, seqlen_q=64, seqlen_k=64, head_dim=64, causal=0, ms=1.0, ms_p20=0.9,
                       ms_p80=1.1, tflops=1.0, peak_mem_bytes=1, gpu="Test GPU", driver="1", cuda="12",
                       torch="2", triton="3", commit="abc", timestamp="2026-01-01T00:00:00+00:00", host_kind="cuda")


@pytest.fixture
def workflow(tmp_path):
    """A copy of the workflow (without the report stage) holding an archive of a synthetic GPU run."""
    shutil.copy(os.path.join(ROOT, "Snakefile"), tmp_path)
    for package in ("experiments", "kernels", "envs"):
        shutil.copytree(os.path.join(ROOT, package), tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ARCHIVED:
        row = vars(synthetic_row(name))
        if name in STANDALONE_ABLATIONS:  # columns of its own: the shared ones, and its times
            row = {key: value for key, value in row.items() if key in results.columns_of(name)}
            row.update(seqlen=64, cache="empty", concurrent=1, first_fwd_s=1.5, first_bwd_s=3.0, second_fwd_bwd_s=0.002)
        results.write_csv([row], str(tmp_path / "results" / "archive" / TEST_GPU / f"{name}.csv"))
    loss = {key: value for key, value in vars(synthetic_row("training")).items() if key in results.columns_of("training_loss")}
    results.write_csv([dict(loss, provider=provider, seed=seed, step=0, loss=4.8)
                       for provider, seed in (("ours", 0), ("sdpa_flash", 0), ("sdpa_flash", 1))],
                      str(tmp_path / "results" / "archive" / TEST_GPU / "training_loss.csv"))
    (tmp_path / "tiny.yaml").write_text(TINY_CONFIG)
    return tmp_path


@pytest.mark.parametrize("override, key", [
    ("speed={seqlenz: [512]}", "seqlenz"),
    ("tiles={block_m: [48]}", "block_m"),
    ("head_dims=[512]", "head_dims"),
    ("mode=fast", "mode"),
    ("hidden=2000", "hidden"),
])
def test_bad_config_is_refused_naming_the_key(override, key):
    done = snakemake(ROOT, "-n", "--config", "mode=measure", override, check=False)
    assert done.returncode != 0
    assert key in done.stderr + done.stdout


def test_each_ablation_plans_alone_when_measuring(workflow):
    for name in ALL_ABLATIONS:
        done = snakemake(workflow, "-n", name, "--config", "mode=measure")
        side_jobs = {"training_loss": 1} if name == "training" else {}  # the loss-agreement run, a job of its own
        assert planned_jobs(done) == {"measure": 1, name: 1, **side_jobs}, done.stdout
        assert f"wildcards: ablation={name}" in done.stdout


def test_a_smaller_seqlen_list_overrides_the_config(workflow):
    done = snakemake(workflow, "-n", "-p", "speed", "--config", "mode=measure", "speed={seqlens: [512, 1024]}")
    assert '"seqlens": [512, 1024]' in done.stdout


def test_lint_is_clean_for_the_experiment_rules():
    for mode in ("measure", "archive"):
        done = snakemake(ROOT, "--lint", "--config", f"mode={mode}", check=False)
        assert "experiments/rules.smk" not in done.stdout + done.stderr, done.stdout


def test_without_gpu_the_plan_reads_the_archive_and_never_rewrites_it(workflow):
    done = snakemake(workflow, "-n", "results", "--config", "mode=archive", f"archive_gpu={TEST_GPU}")
    assert planned_jobs(done) == {"from_archive": len(ARCHIVED_FILES), "measure": 1, "results": 1}
    assert "rule archive:" not in done.stdout
    for name in ALL_ABLATIONS:
        done = snakemake(workflow, "-n", name, "--config", "mode=archive", f"archive_gpu={TEST_GPU}")
        rule = "measure" if name in grid.INTERPRETER_ABLATIONS else "from_archive"
        assert planned_jobs(done) == {rule: 1 + len(SIDE[name]), name: 1}


def test_an_ablation_the_archive_lacks_is_skipped_by_default_and_named_when_asked_for(workflow):
    for name in ("training", "training_loss"):
        os.remove(workflow / "results" / "archive" / TEST_GPU / f"{name}.csv")
    done = snakemake(workflow, "-n", "results", "--config", "mode=archive", f"archive_gpu={TEST_GPU}")
    assert planned_jobs(done) == {"from_archive": len(ARCHIVED) - 1, "measure": 1, "results": 1}
    assert "training" not in done.stdout
    done = snakemake(workflow, "-n", "training", "--config", "mode=archive", f"archive_gpu={TEST_GPU}", check=False)
    assert done.returncode != 0
    assert "training.csv is missing" in done.stdout + done.stderr
    assert "snakemake --cores 1 archive" in done.stdout + done.stderr


def test_an_archive_without_jit_plans_the_rest_and_the_jit_target_says_how_to_make_it(workflow):
    os.remove(workflow / "results" / "archive" / TEST_GPU / "jit.csv")
    done = snakemake(workflow, "-n", "results", "--config", "mode=archive", f"archive_gpu={TEST_GPU}")
    assert planned_jobs(done) == {"from_archive": len(ARCHIVED_FILES) - 1, "measure": 1, "results": 1}
    assert "jit.csv" not in done.stdout
    done = snakemake(workflow, "-n", "jit", "--config", "mode=archive", f"archive_gpu={TEST_GPU}", check=False)
    assert done.returncode != 0 and "jit.csv is missing" in done.stdout + done.stderr
    done = snakemake(workflow, "-n", "archive", "--config", "mode=measure")  # a GPU run archives it with the rest
    assert "results/archive/nvidia-h200/jit.csv" in done.stdout and "results/jit.csv" in done.stdout


def test_a_missing_archive_says_what_to_run(workflow):
    done = snakemake(workflow, "-n", "speed", "--config", "mode=archive", "archive_gpu=no-such-gpu", check=False)
    assert done.returncode != 0
    assert "snakemake --cores 1 archive" in done.stdout + done.stderr
    assert TEST_GPU in done.stdout + done.stderr  # lists the archives there are


@pytest.mark.skipif(run.interpreter_problem() is not None, reason=str(run.interpreter_problem()))
def test_tiny_config_runs_end_to_end_on_the_cpu(workflow):
    snakemake(workflow, "results", "--configfile", "tiny.yaml", "--config", "mode=archive", f"archive_gpu={TEST_GPU}")
    for name in ARCHIVED_FILES:
        rows = results.read_csv(str(workflow / "results" / f"{name}.csv"))
        assert {row["source"] for row in rows} == {f"archive:{TEST_GPU}"}
        assert {row["gpu"] for row in rows} == {"Test GPU"}
    rows = results.read_csv(str(workflow / "results" / "accuracy.csv"))
    status = {(row["provider"], row["causal"]): row["status"] for row in rows}
    assert status == {(provider, causal): "unsupported" if provider == "sdpa_flash" else "ok"
                      for provider in ("ours", "standard", "sdpa_flash") for causal in ("0", "1")}
    for row in rows:
        assert row["source"] == "measured" and row["host_kind"] == "cpu-interpreter" and row["timestamp"]
        if row["provider"] == "ours":
            assert float(row["err_o"]) < 1e-2 and float(row["err_lse"]) < 1e-3
    assert "[accuracy 6/6]" in (workflow / "results" / "logs" / "accuracy.log").read_text()
    assert not os.listdir(workflow / "results" / ".partial")

    # a CPU run cannot pass for a GPU run in the archive
    saved = subprocess.run([sys.executable, "-m", "experiments.archive", "save", "--gpu", TEST_GPU, "--dest",
                            str(workflow / "archived"), str(workflow / "results" / "accuracy.csv")],
                           cwd=workflow, capture_output=True, text=True)
    assert saved.returncode != 0 and "cannot go into the archive" in saved.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_tiny_speed_grid_is_measured_on_the_gpu(workflow):
    tiny = ("speed={seqlens: [256], modes: [fwd, bwd], providers: [ours, sdpa_flash], flex_seqlens: [],"
            " head_dims: [64], dtypes: [fp16]}")
    snakemake(workflow, "speed", "--config", "mode=measure", "repetitions=2", tiny, cpu_only=False)
    rows = results.read_csv(str(workflow / "results" / "speed.csv"))
    attention = [row for row in rows if row["provider"] != "torch_matmul"]
    assert len(attention) == 2 * 2 * 2 * 2  # repetitions x causal x modes x providers
    assert sorted(row["repetition"] for row in rows if row["provider"] == "torch_matmul") == ["0", "1"]
    for row in rows:
        assert row["status"] == "ok" and float(row["ms"]) > 0 and float(row["gpu_ms"]) > 0
        assert int(row["peak_mem_bytes"]) > 0 and row["host_bound"] in ("0", "1")
        assert row["host_kind"] == "cuda" and row["source"] == "measured" and row["gpu"] and row["driver"]
    for row in attention:
        assert float(row["tflops"]) > 0
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return
    assert all(float(row["sm_clock_mhz"]) > 0 and float(row["power_w"]) > 0 for row in rows)


def test_an_archive_without_hopper_plans_the_rest_and_the_hopper_target_says_how_to_make_it(workflow):
    os.remove(workflow / "results" / "archive" / TEST_GPU / "hopper.csv")
    done = snakemake(workflow, "-n", "results", "--config", "mode=archive", f"archive_gpu={TEST_GPU}")
    assert planned_jobs(done) == {"from_archive": len(ARCHIVED_FILES) - 1, "measure": 1, "results": 1}
    assert "hopper.csv" not in done.stdout
    done = snakemake(workflow, "-n", "hopper", "--config", "mode=archive", f"archive_gpu={TEST_GPU}", check=False)
    assert done.returncode != 0 and "hopper.csv is missing" in done.stdout + done.stderr
    done = snakemake(workflow, "-n", "-p", "hopper", "--config", "mode=measure", "hopper={seqlens: [4096]}")
    assert planned_jobs(done) == {"measure": 1, "hopper": 1}
    assert "-m experiments.run hopper --output results/hopper.csv" in done.stdout and '"seqlens": [4096]' in done.stdout


def test_an_archive_without_fp8_plans_the_rest_and_the_fp8_target_says_how_to_make_it(workflow):
    os.remove(workflow / "results" / "archive" / TEST_GPU / "fp8.csv")
    done = snakemake(workflow, "-n", "results", "--config", "mode=archive", f"archive_gpu={TEST_GPU}")
    assert planned_jobs(done) == {"from_archive": len(ARCHIVED_FILES) - 1, "measure": 1, "results": 1}
    assert "fp8.csv" not in done.stdout
    done = snakemake(workflow, "-n", "fp8", "--config", "mode=archive", f"archive_gpu={TEST_GPU}", check=False)
    assert done.returncode != 0 and "fp8.csv is missing" in done.stdout + done.stderr
    # on a GPU host: one measuring job with the fp8 section's settings, and archived with the rest
    done = snakemake(workflow, "-n", "-p", "fp8", "--config", "mode=measure", "fp8={seqlens: [4096, 16384]}")
    assert planned_jobs(done) == {"measure": 1, "fp8": 1}
    assert "-m experiments.run fp8 --output results/fp8.csv" in done.stdout
    assert '"seqlens": [4096, 16384]' in done.stdout and '"providers": ["ours", "ours_fp8"]' in done.stdout
    done = snakemake(workflow, "-n", "archive", "--config", "mode=measure")
    assert "results/archive/nvidia-h200/fp8.csv" in done.stdout and "results/fp8.csv" in done.stdout
