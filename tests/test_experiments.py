"""The experiment stage's parts: config, grid, FLOP model, results journal, failure statuses, archive
and the runner's recovery from a worker that dies. The GPU measurement itself runs only with CUDA."""
import copy
import dataclasses
import json
import os

import pytest
import torch

from experiments import archive, flops, grid, measure, providers, results, run
from experiments.settings import ConfigError, ablation_settings, check, coerce_cli_strings, load_default

CONFIG = load_default()
SETTINGS = ablation_settings(CONFIG, grid.ABLATIONS)


def test_cli_strings_become_the_numbers_the_schema_wants():
    config = copy.deepcopy(CONFIG)
    config["speed"] = {"seqlens": ["512", "1024"], "causal": ["true"], "modes": ["fwd"]}
    config["warmup_ms"] = "12.5"
    config["archive_gpu"] = "4090"  # a string key stays a string
    config["features"] = {"seqlens": ["4096"]}  # a list whose schema refers to its definition through allOf
    config["fp8"] = {"seqlens": ["4096", "16384"], "accuracy": {"seed": "3"}}
    coerce_cli_strings(config)
    assert config["features"] == {"seqlens": [4096]}
    assert config["fp8"] == {"seqlens": [4096, 16384], "accuracy": {"seed": 3}}
    assert config["speed"] == {"seqlens": [512, 1024], "causal": [True], "modes": ["fwd"]}
    assert config["warmup_ms"] == 12.5 and config["archive_gpu"] == "4090"


@pytest.mark.parametrize("change, key", [
    (lambda c: c.update(hidden=2000), "hidden"),
    (lambda c: c["accuracy"]["shapes"][0].update(kv_heads=3), "accuracy.shapes[0].kv_heads"),
    (lambda c: c["fp8"]["accuracy"]["interpreter_shapes"][1].update(kv_heads=3),
     "fp8.accuracy.interpreter_shapes[1].kv_heads"),
    (lambda c: c["fp8"].update(head_dims=[96]), "fp8.head_dims"),
    (lambda c: c.update(hidden=128), "speed.head_dims"),
    (lambda c: c["fp8"]["accuracy"].update(precisions=["fp8_e5m2"]), "fp8.accuracy.precisions"),
    (lambda c: c["fp8"].update(providers=["ours", "sdpa_flash"]), "fp8.providers"),
    (lambda c: c["full_sweep_overrides"]["tiles"]["fwd"].update(block_q=[64]), "block_q"),
])
def test_relations_and_the_full_sweep_are_checked(change, key):
    config = copy.deepcopy(CONFIG)
    change(config)
    with pytest.raises(Exception, match=key.replace("[", r"\[")):
        check(config)
        ablation_settings(dict(config, full_sweep=True), grid.ABLATIONS)


def test_full_sweep_merges_into_the_sections():
    swept = ablation_settings(dict(CONFIG, full_sweep=True), grid.ABLATIONS)
    overrides = CONFIG["full_sweep_overrides"]
    assert swept["tiles"]["fwd"] == overrides["tiles"]["fwd"]
    assert swept["seqlen"]["shape_sets"]["long_context"] == overrides["seqlen"]["shape_sets"]["long_context"]
    assert swept["seqlen"]["shape_sets"]["fa1_readme"] == overrides["seqlen"]["shape_sets"]["fa1_readme"]
    assert swept["seqlen"]["providers"] == CONFIG["seqlen"]["providers"]  # untouched keys of a section stay
    assert swept["fa1_vs_fa2"]["seqlens"] == overrides["fa1_vs_fa2"]["seqlens"]
    assert swept["speed"]["dtypes"] == overrides["speed"]["dtypes"]
    assert swept["speed"]["providers"] == CONFIG["speed"]["providers"]  # untouched keys stay
    assert len(grid.tiles(swept["tiles"])) > len(grid.tiles(SETTINGS["tiles"]))


def test_paper_shapes_keep_tokens_and_hidden():
    for seqlen in SETTINGS["speed"]["seqlens"]:
        for head_dim in SETTINGS["speed"]["head_dims"]:
            shape = grid.paper_shape(SETTINGS["speed"], seqlen, head_dim)
            assert shape["batch"] * seqlen == CONFIG["tokens"]
            # the whole heads that fit the hidden size (all of it where the head dim divides it)
            assert shape["heads"] * head_dim <= CONFIG["hidden"] < (shape["heads"] + 1) * head_dim
            assert (shape["heads"] * head_dim == CONFIG["hidden"]) == (CONFIG["hidden"] % head_dim == 0)


def test_every_ablation_has_distinct_cells():
    for name in grid.ABLATIONS:
        for on_gpu in (True, False):
            cells = grid.cells(name, SETTINGS[name], on_gpu)
            assert cells and len({cell.key for cell in cells}) == len(cells)


@pytest.mark.parametrize("ablation", [name for name in grid.ABLATIONS if name != "accuracy"])
def test_timed_ablations_repeat_their_grid_in_passes_each_opening_with_the_matmul(ablation):
    settings = dict(SETTINGS[ablation], repetitions=3)
    cells = [cell for cell in grid.cells(ablation, settings, on_gpu=True)
             if cell.repetition is not None]  # fp8's accuracy cells come once, after the passes
    one_pass = len(cells) // 3
    assert len(cells) == 3 * one_pass
    for repetition in range(3):
        passed = cells[repetition * one_pass:(repetition + 1) * one_pass]
        assert {cell.repetition for cell in passed} == {repetition}
        assert passed[0].provider == "torch_matmul"  # the roof, measured interleaved with the cells
        strip = [dataclasses.replace(cell, repetition=None) for cell in passed]
        assert strip == [dataclasses.replace(cell, repetition=None) for cell in cells[:one_pass]]


def test_accuracy_is_not_repeated():
    assert all(cell.repetition is None for cell in grid.cells("accuracy", SETTINGS["accuracy"], on_gpu=True))


def test_seqlen_runs_each_shape_set_as_a_variant():
    cells = grid.seqlen(SETTINGS["seqlen"])
    for name, shape in CONFIG["seqlen"]["shape_sets"].items():
        mine = [cell for cell in cells if cell.variant == name]
        assert {cell.seqlen_q for cell in mine} == set(shape["seqlens"])
        assert {(cell.batch, cell.heads, cell.head_dim) for cell in mine} == {
            (shape["batch"], shape["heads"], shape["head_dim"])}


def test_a_config_typo_names_the_key_and_what_is_allowed():
    config = copy.deepcopy(CONFIG)
    config["speed"]["seqlen"] = [512]
    with pytest.raises(ConfigError) as raised:
        check(config)
    message = str(raised.value)
    assert "speed.seqlen: unknown key" in message and "seqlens" in message and "$defs" not in message


def test_speed_grid_is_the_paper_grid_with_flex_where_configured():
    s = SETTINGS["speed"]
    cells = grid.speed(s)
    others = [cell for cell in cells if cell.provider != "flex"]
    assert len(others) == (len(s["dtypes"]) * len(s["head_dims"]) * len(s["causal"]) * len(s["modes"])
                           * len(s["seqlens"]) * (len(s["providers"]) - 1))
    flex = [cell for cell in cells if cell.provider == "flex"]
    assert flex and all(c.seqlen_q in s["flex_seqlens"] and c.dtype in s["flex_dtypes"] for c in flex)


def test_hopper_grid_sets_each_arm_beside_cudnn_on_every_shape():
    s = SETTINGS["hopper"]
    cells = grid.hopper(s)
    shapes = {(c.mode, c.head_dim, c.causal, c.seqlen_q) for c in cells}
    assert len(shapes) == len(s["modes"]) * len(s["head_dims"]) * len(s["causal"]) * len(s["seqlens"])
    portable = {"hopper": False, "hopper_backward": False}
    forward_arms = {("ours", "portable"): portable,
                    ("ours", "hopper_serial"): {"hopper": True, "hopper_overlap": False, "hopper_backward": False},
                    ("ours", "hopper"): {"hopper": True, "hopper_backward": False}}
    one_pass = {("ours", "hopper_bwd"): {"hopper": True, "hopper_backward": True}}
    expected = {"fwd": forward_arms, "fwd_bwd": {**forward_arms, **one_pass},
                "bwd": {("ours", "portable"): portable, **one_pass}}
    for shape in shapes:
        arms = {(c.provider, c.variant): dict(c.switches) for c in cells if (c.mode, c.head_dim, c.causal, c.seqlen_q) == shape}
        assert arms == {**expected[shape[0]], **{(peer, "default"): {} for peer in s["peers"]}}
    one_pass_row = next(c for c in cells if c.variant == "hopper_bwd" and c.mode == "bwd")
    d64 = one_pass_row.head_dim == 64  # the producer warp's fused schedule at 64, the self-loading one at 128
    assert providers.tile_columns(one_pass_row) == dict(block_m=64, block_n=128, num_warps=12 if d64 else 8,
                                                        recompute=1, num_stages=3 if d64 else 2)
    hopper_row = next(c for c in cells if c.variant == "hopper" and c.mode == "fwd")
    assert providers.tile_columns(hopper_row)["num_warps"] == 12  # the Hopper kernel's, not the portable default
    assert providers.tile_columns(next(c for c in cells if c.variant == "portable" and c.mode == "fwd"))["num_warps"] != 12


@pytest.mark.parametrize("ablation", ["tiles", "causal", "recompute", "fa1_vs_fa2"])
def test_ablations_of_the_portable_kernels_pin_them(ablation):
    """On sm_90 at head dim 128 the default forward is the Hopper kernel: these ablations study the
    FlashAttention-2 kernels, so every one of their cells runs hopper=False and hopper_backward=False."""
    cells = grid.cells(ablation, SETTINGS[ablation], on_gpu=True)
    ours = [c for c in cells if c.provider == "ours"]
    assert ours and all(dict(c.switches)["hopper"] is False for c in ours)
    assert all(dict(c.switches)["hopper_backward"] is False for c in ours)


def test_engine_ablations_run_the_defaults():
    for ablation in ("speed", "seqlen", "accuracy"):
        assert all(not c.switches for c in grid.cells(ablation, SETTINGS[ablation], on_gpu=True)), ablation


def test_tiles_sweep_each_pass_and_measure_the_default():
    s = SETTINGS["tiles"]
    cells = grid.tiles(s)
    for mode, field in (("fwd", "fwd_tiles"), ("bwd", "bwd_tiles")):
        sweep = [getattr(cell, field) for cell in cells if cell.mode == mode and cell.variant == "sweep"]
        per_head_dim = len(s[mode]["block_m"]) * len(s[mode]["block_n"]) * len(s[mode]["num_warps"]) * len(
            s[mode]["num_stages"])
        assert len(sweep) == per_head_dim * len(s["head_dims"]) and all(sweep)
        defaults = [cell for cell in cells if cell.mode == mode and cell.variant == "default"]
        assert len(defaults) == len(s["head_dims"]) and not any(c.fwd_tiles or c.bwd_tiles for c in defaults)


def test_accuracy_takes_interpreter_shapes_without_a_gpu():
    shapes = {(c.seqlen_q, c.head_dim) for c in grid.cells("accuracy", SETTINGS["accuracy"], on_gpu=False)}
    assert shapes == {(s["seqlen_q"], s["head_dim"]) for s in CONFIG["accuracy"]["interpreter_shapes"]}


def test_flop_model_is_the_papers():
    forward = 4 * 2 * 16 * 1024 * 1024 * 128
    assert flops.attention_flops(2, 16, 1024, 1024, 128, False, "fwd") == forward
    assert flops.attention_flops(2, 16, 1024, 1024, 128, True, "fwd") == forward / 2
    assert flops.attention_flops(2, 16, 1024, 1024, 128, False, "bwd") == 2.5 * forward
    assert flops.attention_flops(2, 16, 1024, 1024, 128, True, "fwd_bwd") == 3.5 * forward / 2
    assert flops.attention_flops(1, 1, 512, 1024, 64, True, "fwd") == 4 * 512 * 1024 * 64  # halved only if square
    assert flops.matmul_flops(8192, 8192, 8192) == 2 * 8192**3
    assert flops.tflops(1e12, 1000.0) == pytest.approx(1.0)


def test_journal_keeps_finished_rows_and_names_the_cell_that_died(tmp_path):
    path = str(tmp_path / "journal.jsonl")
    journal = results.Journal(path)
    journal.set_provenance({"gpu": "g"})
    journal.start("a")
    journal.done("a", results.Row("speed", "ours", ms=1.5))
    journal.start("b")
    with open(path, "a") as f:
        f.write('{"done": "b", "row": {"exp')  # torn by a kill mid-write
    reread = results.Journal(path)
    assert set(reread.rows) == {"a"} and reread.rows["a"]["ms"] == 1.5
    assert reread.unfinished() == "b" and reread.provenance == {"gpu": "g"}


def test_csv_has_the_schema_columns_and_refuses_others(tmp_path):
    path = str(tmp_path / "rows.csv")
    results.write_csv([vars(results.Row("speed", "ours", causal=1, ms=0.25))], path)
    (row,) = results.read_csv(path)
    assert list(row) == results.COLUMNS and row["ms"] == "0.25" and row["tflops"] == ""
    with open(path, "w") as f:
        f.write("experiment,provider\nspeed,ours\n")
    with pytest.raises(ValueError, match="missing"):
        results.read_csv(path)


@pytest.mark.parametrize("error, status", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 GiB"), "oom"),
    (providers.Unsupported("needs a CUDA GPU"), "unsupported"),
    (ValueError("TileConfig.block_m must be a power of two"), "unsupported"),
    (RuntimeError("No available kernel. Aborting execution."), "unsupported"),
    (NotImplementedError("hopper=True does not support a compute capability 9.0 (Hopper) GPU"), "unsupported"),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), "error"),
])
def test_failures_get_their_status_and_message(error, status):
    got, note = measure.failure(error)
    assert got == status and str(error).split(".")[0] in note


def test_archive_saves_a_gpu_run_with_provenance_and_restores_it(tmp_path):
    rows = [vars(results.Row("speed", "ours", gpu="Test GPU", driver="550", cuda="12.4", torch="2.11", triton="3.6",
                             commit=commit, timestamp=stamp, host_kind="cuda", status=status))
            for commit, stamp, status in (("c1", "2026-01-01T00:00:00+00:00", "ok"),
                                          ("c1", "2026-01-01T00:05:00+00:00", "oom"))]
    measured = str(tmp_path / "speed.csv")
    results.write_csv(rows, measured)
    dest = str(tmp_path / "archive" / "test-gpu")
    archive.save([measured], "test-gpu", dest)
    with open(os.path.join(dest, "provenance.json")) as f:
        summary = json.load(f)
    assert summary["gpu"] == ["Test GPU"] and summary["commit"] == ["c1"]
    assert summary["first_timestamp"] < summary["last_timestamp"]
    assert summary["files"]["speed.csv"]["status"] == {"ok": 1, "oom": 1}
    with pytest.raises(SystemExit, match="other-gpu"):
        archive.save([measured], "other-gpu", str(tmp_path / "elsewhere"))
    # a side file (training_loss.csv: no status column) goes in beside its ablation
    loss = str(tmp_path / "training_loss.csv")
    with open(loss, "w") as f:
        f.write("provider,seed,step,loss,gpu,driver,cuda,torch,triton,commit,timestamp,host_kind,source\n"
                "ours,0,0,8.3,Test GPU,550,12.4,2.11,3.6,c1,2026-01-01T00:01:00+00:00,cuda,measured\n")
    archive.save([measured, loss], "test-gpu", dest)
    with open(os.path.join(dest, "provenance.json")) as f:
        assert json.load(f)["files"]["training_loss.csv"]["rows"] == 1
    restored = str(tmp_path / "restored.csv")
    archive.restore(os.path.join(dest, "speed.csv"), restored, "test-gpu")
    assert {row["source"] for row in results.read_csv(restored)} == {"archive:test-gpu"}


@pytest.mark.parametrize("commits", [("c1", "c2"), ("c1-dirty", "c1-dirty"), ("unknown", "unknown")])
def test_archive_refuses_rows_of_several_or_unclean_commits(tmp_path, commits):
    rows = [vars(results.Row("speed", "ours", gpu="Test GPU", commit=commit, timestamp="2026-01-01T00:00:00+00:00",
                             host_kind="cuda")) for commit in commits]
    measured = str(tmp_path / "speed.csv")
    results.write_csv(rows, measured)
    with pytest.raises(SystemExit, match="one clean commit"):
        archive.save([measured], "test-gpu", str(tmp_path / "archive"))


def test_a_worker_that_dies_in_a_cell_leaves_an_error_row_and_the_run_goes_on(tmp_path, monkeypatch):
    settings = dict(SETTINGS["tiles"], head_dims=[64], fwd=dict(SETTINGS["tiles"]["fwd"], num_stages=[2]))
    cells = grid.tiles(settings)[:3]
    deaths = []

    def worker(command, env):
        """Stands in for the worker process: dies in the second cell once, then finishes."""
        journal = results.Journal(command[command.index("--worker") + 1])
        journal.set_provenance({"gpu": "Test GPU"})
        for cell in cells:
            if cell.key in journal.rows:
                continue
            journal.start(cell.key)
            if cell is cells[1] and not deaths:
                deaths.append(cell)
                return -11
            journal.done(cell.key, run.row(cell, {"ms": 1.0}, "ok", "", journal.provenance, "now"))
        return 0

    monkeypatch.setattr(run.subprocess, "call", worker)
    monkeypatch.setattr(run.gpus, "pin", lambda: "0")
    monkeypatch.setattr(run.grid, "cells", lambda ablation, settings, on_gpu: cells)
    output = str(tmp_path / "tiles.csv")
    run.supervise("tiles", settings, output)
    rows = results.read_csv(output)
    assert [row["status"] for row in rows] == ["ok", "error", "ok"]
    assert "died in this cell (exit code -11)" in rows[1]["note"] and rows[1]["gpu"] == "Test GPU"
    assert [int(rows[1][name]) for name in ("block_m", "block_n", "num_warps", "num_stages")] == list(cells[1].fwd_tiles)
    assert not os.listdir(tmp_path / ".partial")


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd_bwd"])
def test_each_mode_times_the_call_it_names(mode, monkeypatch):
    """On the CPU (interpreter), with the timer replaced: the timed function's result and the FLOP count."""
    timed = []

    held = []

    def bench(fn, timing, input_bytes):
        timed.append(fn())
        held.append(input_bytes)
        return {"ms": 2.0, "ms_p20": 1.9, "ms_p80": 2.1, "peak_mem_bytes": 0}

    monkeypatch.setattr(measure, "_bench", bench)
    cell = grid.Cell("speed", "standard", mode, "fp16", batch=1, heads=2, kv_heads=2, seqlen_q=32, seqlen_k=32,
                     head_dim=16, causal=True)
    values = measure.attention(cell, {}, torch.device("cpu"))
    (result,) = timed
    if mode == "fwd":
        assert result.shape == (1, 2, 32, 16) and result.requires_grad
    else:
        assert len(result) == 3 and all(grad.shape == (1, 2, 32, 16) for grad in result)
    count = flops.attention_flops(1, 2, 32, 32, 16, True, mode)
    assert values["tflops"] == pytest.approx(count / 2e-3 / 1e12)
    tensor_bytes = 1 * 2 * 32 * 16 * 2
    assert held == [tensor_bytes * (3 if mode == "fwd" else 4)]  # q, k, v, and dO with a backward


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_every_provider_measures_a_small_cell_on_the_gpu():
    timing = {"warmup_ms": 5, "rep_ms": 10}
    for provider in ("ours", "standard", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex"):
        for mode in ("fwd", "bwd", "fwd_bwd"):
            cell = grid.Cell("speed", provider, mode, "fp16", batch=2, heads=4, kv_heads=4, seqlen_q=512,
                             seqlen_k=512, head_dim=64, causal=True)
            values = measure.attention(cell, timing, torch.device("cuda"))
            assert values["ms_p20"] <= values["ms"] <= values["ms_p80"] and values["tflops"] > 0
            assert values["gpu_ms"] > 0 and values["host_ms"] > 0 and values["host_bound"] in (0, 1)
            assert values["attn_mem_bytes"] > 0
            assert values["peak_mem_bytes"] == values["input_bytes"] + values["attn_mem_bytes"]


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
                    reason="needs a compute capability 9.0 GPU")
def test_each_hopper_arm_measures_a_small_cell_on_the_gpu():
    timing = {"warmup_ms": 5, "rep_ms": 10}
    for cell in grid.hopper(dict(SETTINGS["hopper"], seqlens=[1024], tokens=4096)):
        if cell.head_dim == 64 and cell.causal:
            values = measure.attention(cell, timing, torch.device("cuda"))
            assert values["ms_p20"] <= values["ms"] <= values["ms_p80"] and values["tflops"] > 0, cell


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fp8_measures_both_forwards_on_the_gpu():
    from experiments import fp8

    settings = dict(SETTINGS["fp8"], warmup_ms=5, rep_ms=10)
    for provider, dtype in (("ours", "fp16"), ("ours_fp8", "fp8_e4m3")):
        cell = grid.Cell("fp8", provider, "fwd", dtype, batch=4, heads=16, kv_heads=16, seqlen_q=1024, seqlen_k=1024,
                         head_dim=128, causal=True)
        values = fp8.measure(cell, settings, torch.device("cuda"))
        assert values["ms_p20"] <= values["ms"] <= values["ms_p80"] and values["tflops"] > 0
        assert values["gpu_ms"] > 0 and values["host_ms"] > 0 and values["host_bound"] in (0, 1)
        assert values["input_bytes"] == 3 * 4 * 16 * 1024 * 128 * (1 if provider == "ours_fp8" else 2) + (
            3 * 4 * 16 * 4 if provider == "ours_fp8" else 0)
        # the row's tiles: fp8.measure gives ours_fp8's, experiments.run adds ours' (providers.tile_columns)
        tiles = values if provider == "ours_fp8" else providers.tile_columns(cell)
        assert values["attn_mem_bytes"] > 0 and tiles["block_m"] > 0
    for dtype in fp8.PRECISIONS:
        cell = grid.Cell("fp8", fp8.provider_of(dtype), "fwd", dtype, batch=1, heads=16, kv_heads=16, seqlen_q=1024,
                         seqlen_k=1024, head_dim=128, causal=False, variant="accuracy")
        values = fp8.measure(cell, settings, torch.device("cuda"))
        assert 0 < values["err_o"] < (0.04 if dtype == "fp8_e4m3" else 0.01) and values["max_abs_err_o"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_memory_is_net_of_what_the_process_held_before():
    """A workspace that an earlier call left allocated (cuBLAS's, say) does not count; the outputs do."""
    timing = {"warmup_ms": 5, "rep_ms": 10}
    cell = grid.Cell("speed", "ours", "fwd_bwd", "fp16", batch=1, heads=16, kv_heads=16, seqlen_q=1024,
                     seqlen_k=1024, head_dim=128, causal=False)
    ballast = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")  # held before, as a workspace is
    values = measure.attention(cell, timing, torch.device("cuda"))
    del ballast
    tensor = 1 * 16 * 1024 * 128 * 2
    # q, k, v, dO held; out, dq, dk, dv made by the call: 8 tensors; the rest is small (lse, delta, dQ buffer),
    # but for the Hopper backward's float32 dQ accumulator (as flash-attn's dq_accum): two tensors' bytes
    from kernels.attention import hopper_backward_by_default

    accumulator = 2 * tensor if hopper_backward_by_default(128, False, torch.device("cuda")) else 0
    assert values["input_bytes"] == 4 * tensor
    assert 4 * tensor + accumulator <= values["attn_mem_bytes"] <= 1.5 * 4 * tensor + accumulator


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_host_bound_call_is_flagged_and_a_long_one_is_not():
    import time as _time

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)

    def slow_host():
        _time.sleep(0.002)  # the GPU work is tiny, the host's is 2 ms
        return x[:8, :8] + 1

    timing = {"warmup_ms": 5, "rep_ms": 20}
    assert measure._bench(slow_host, timing)["host_bound"] == 1
    assert measure._bench(lambda: x @ x, timing)["host_bound"] == 0


def test_training_grid_is_one_cell_per_model_context_attention_and_compiled_config():
    s = SETTINGS["training"]
    cells = grid.training(s)
    eager = [cell for cell in cells if not cell.variant.endswith("+compile")]
    assert len(eager) == len(s["models"]) * len(s["contexts"]) * len(s["providers"])
    compiled = [cell for cell in cells if cell.variant.endswith("+compile")]
    assert {(c.provider, c.variant.split("+")[0], c.seqlen_q) for c in compiled} == {
        (p, m, n) for p in s["compile"]["providers"] for m in s["compile"]["models"] for n in s["compile"]["contexts"]}
    for cell in cells:
        assert cell.mode == "train" and cell.dtype == "bf16" and cell.causal and cell.head_dim == 128
        assert cell.batch * cell.seqlen_q == s["tokens_per_step"] and cell.heads == cell.kv_heads
    passes = grid.cells("training", s, on_gpu=True)
    assert passes[0].provider == "torch_matmul" and passes[0].dtype == "bf16"


def test_a_training_row_maps_time_training_to_the_schema(monkeypatch):
    from experiments import training

    calls = []

    def time_training(config, attention, batch, seqlen, steps, warmup, device, compile):
        calls.append((config.layers, config.seqlen, attention, batch, steps, warmup, compile))
        return dict(status="ok", note="", step_ms=400.0, step_ms_min=390.0, step_ms_max=430.0, tflops=300.0,
                    tokens_per_s=40960.0, params=1_316_000_000, peak_mem_bytes=40 * 2**30, warmup_s=95.0)

    monkeypatch.setattr(training, "time_training", time_training)
    cell = grid.Cell("training", "ours", "train", "bf16", batch=2, heads=16, kv_heads=16, seqlen_q=8192,
                     seqlen_k=8192, head_dim=128, causal=True, variant="gpt3_1_3b+compile")
    values = measure.training(cell, SETTINGS["training"], torch.device("cpu"))
    assert calls == [(24, 8192, "ours", 2, SETTINGS["training"]["steps"], SETTINGS["training"]["warmup_steps"], True)]
    assert (values["ms"], values["ms_p20"], values["ms_p80"], values["gpu_ms"]) == (400.0, 390.0, 430.0, 400.0)
    assert values["host_bound"] == 0 and values["input_bytes"] == 0 and values["tflops"] == 300.0
    assert values["attn_mem_bytes"] == values["peak_mem_bytes"] == 40 * 2**30
    assert values["note"].endswith("warm-up 95.0 s")
    row = run.row(cell, values, "ok", values.pop("note"), {}, "now")
    assert row.mode == "train" and row.variant == "gpt3_1_3b+compile" and row.repetition is None


def test_a_training_cell_that_runs_out_of_memory_adds_the_largest_batch_that_fits(tmp_path, monkeypatch):
    """The worker on the CPU, time_training replaced: batch 8 and 4 run out of memory, 2 fits."""
    from experiments import provenance, training

    def time_training(config, attention, batch, seqlen, steps, warmup, device, compile):
        if batch > 2:
            return dict(status="oom", note="OutOfMemoryError: CUDA out of memory (simulated)")
        return dict(status="ok", note="", step_ms=100.0, step_ms_min=99.0, step_ms_max=101.0, tflops=50.0,
                    tokens_per_s=1e5, params=10, peak_mem_bytes=2**30, warmup_s=1.0)

    settings = dict(SETTINGS["training"], models=["gpt3_1_3b"], contexts=[2048], providers=["standard"],
                    repetitions=1, compile={"providers": [], "models": [], "contexts": []})
    cells = [cell for cell in grid.cells("training", settings, on_gpu=True) if cell.provider != "torch_matmul"]
    monkeypatch.setattr(training, "time_training", time_training)
    monkeypatch.setattr(run.grid, "cells", lambda ablation, settings, on_gpu: cells)
    monkeypatch.setattr(provenance, "collect", lambda: {"gpu": "Test GPU"})
    output = str(tmp_path / "training.csv")
    journal_path = run.journal_of("training", settings, True, output)
    run.work("training", settings, journal_path, "cpu")
    journal = results.Journal(journal_path)
    (cell,) = cells
    derived = grid.largest_batch_cell(cell)
    assert journal.rows[cell.key]["status"] == "oom" and journal.rows[cell.key]["batch"] == 8
    extra = journal.rows[derived.key]
    assert extra["status"] == "ok" and extra["batch"] == 2 and extra["variant"] == "gpt3_1_3b+largest_batch"
    assert "largest batch that fits" in extra["note"] and extra["ms"] == 100.0

    # the supervisor writes the oom row and, after it, the largest batch's row
    monkeypatch.setattr(run.subprocess, "call", lambda command, env: 0)
    monkeypatch.setattr(run.gpus, "pin", lambda: "0")
    run.supervise("training", settings, output)
    rows = results.read_csv(output)
    assert [(row["variant"], row["status"], row["batch"]) for row in rows] == [
        ("gpt3_1_3b", "oom", "8"), ("gpt3_1_3b+largest_batch", "ok", "2")]


def test_jit_reads_its_times_from_the_measuring_process_and_refuses_anything_else():
    from experiments import jit

    out = "a warning\n" + jit.child_line(1.7, 3.9, 0.0021) + "\n"
    assert jit.parse_child_output(out) == {"first_fwd_s": 1.7, "first_bwd_s": 3.9, "second_fwd_bwd_s": 0.0021}
    for bad in ("", "1.7 3.9 0.002", f"{jit.CHILD_MARK} 1.7 3.9", f"{jit.CHILD_MARK} 1.7 -3.9 0.002",
                f"{jit.CHILD_MARK} 1.7 nan 0.002", f"{jit.CHILD_MARK} 1.7 fast 0.002"):
        with pytest.raises(ValueError):
            jit.parse_child_output(bad)


def test_jit_pairs_an_empty_and_a_filled_process_per_case_and_repetition(monkeypatch, tmp_path):
    from experiments import jit
    from experiments.schema import JIT_COLUMNS

    settings = dict(ablation_settings(CONFIG, ["jit"])["jit"], repetitions=2, concurrent=3)
    spawned = []

    def fake_spawn(s, head_dim, causal, environment):
        cache_dir = environment["TRITON_CACHE_DIR"]
        spawned.append((head_dim, causal, cache_dir))
        if head_dim == 128 and causal and sum(entry[:2] == (128, True) for entry in spawned) == 1:
            return None, "error", "exit code 1: boom"  # the first empty-cache process of d128 causal dies
        empty = sum(entry[2] == cache_dir for entry in spawned) == 1
        return {"first_fwd_s": 2.0 if empty else 0.5, "first_bwd_s": 4.0 if empty else 2.0,
                "second_fwd_bwd_s": 0.002}, "ok", ""

    monkeypatch.setattr(jit, "_spawn", fake_spawn)
    lines = []
    found = jit.measure(settings, {"PATH": "/bin"}, log=lines.append)
    cases = jit.cases(settings)
    assert len(found) == 2 * len(cases) * 2 and len(spawned) == len(found) - 1  # no filled run after a failure
    assert [(item["repetition"], item["head_dim"], item["causal"], item["cache"]) for item in found] == [
        (repetition, head_dim, causal, cache) for repetition in range(2) for head_dim, causal in cases
        for cache in ("empty", "filled")]
    by_dir = {}
    for head_dim, causal, cache_dir in spawned:
        by_dir.setdefault(cache_dir, set()).add((head_dim, causal))
    assert all(len(owners) == 1 for owners in by_dir.values())  # one cache directory per pair, its own
    failed = {(item["head_dim"], item["causal"], item["cache"]): item["found"]
              for item in found if item["repetition"] == 0}
    assert failed[(128, True, "empty")][1] == "error" and "before it failed" in failed[(128, True, "filled")][2]
    assert sum(line.startswith("[jit ") for line in lines) == len(found) and f"/{len(found)}]" in lines[-1]

    origin = {"gpu": "Test GPU", "driver": "1", "cuda": "12", "torch": "2", "triton": "3", "commit": "c1",
              "host_kind": "cuda"}
    rows = [jit.build_row(settings, item["head_dim"], item["causal"], item["cache"], item["repetition"],
                          item["concurrent"], *item["found"], origin, "2026-01-01T00:00:00+00:00") for item in found]
    path = str(tmp_path / "jit.csv")
    results.write_csv(rows, path)
    back = results.read_csv(path)
    assert list(back[0]) == JIT_COLUMNS and {row["concurrent"] for row in back} == {"3"}
    assert back[0]["first_fwd_s"] == "2.0" and back[1]["first_fwd_s"] == "0.5" and back[1]["cache"] == "filled"
    assert back[0]["gpu"] == "Test GPU" and back[0]["host_kind"] == "cuda" and back[0]["source"] == "measured"
    assert {row["first_fwd_s"] for row in back if row["status"] == "error"} == {""}
    archive.save([path], "test-gpu", str(tmp_path / "archive"))  # archived and restored like the other files
    archive.restore(str(tmp_path / "archive" / "jit.csv"), str(tmp_path / "restored" / "jit.csv"), "test-gpu")
    assert {row["source"] for row in results.read_csv(str(tmp_path / "restored" / "jit.csv"))} == {"archive:test-gpu"}
    with pytest.raises(ValueError, match="cache"):
        jit.build_row(settings, 64, False, "warm", 0, 1, None, "error", "", origin, "")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_jit_measures_a_filled_cache_faster_on_the_gpu():
    from experiments import jit

    settings = dict(ablation_settings(CONFIG, ["jit"])["jit"], head_dims=[64], causal=[False], repetitions=1,
                    concurrent=1)
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    (empty, filled) = [item["found"] for item in jit.measure(settings, environment, log=lambda line: None)]
    assert empty[1] == filled[1] == "ok", (empty, filled)
    assert filled[0]["first_fwd_s"] < empty[0]["first_fwd_s"]
    assert empty[0]["second_fwd_bwd_s"] < empty[0]["first_fwd_s"]


def test_the_archived_files_read_without_the_columns_added_since(tmp_path):
    """The committed archive predates max_abs_err_o: its files read with it empty, in either reader."""
    from analysis.load import read_experiment
    from experiments.schema import COLUMNS, LATER_COLUMNS

    archived = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "archive",
                            CONFIG["archive_gpu"], "speed.csv")
    rows = results.read_csv(archived)
    assert set(rows[0]) == set(COLUMNS) and rows[0]["max_abs_err_o"] == ""
    assert list(read_experiment(archived).columns) == COLUMNS
    # a file lacking columns other than the later ones is still refused
    with open(archived) as f:
        header, *lines = f.read().splitlines()
    (tmp_path / "speed.csv").write_text("\n".join([header.replace(",tflops,", ","), *lines[:0]]) + "\n")
    with pytest.raises(ValueError, match="tflops"):
        results.read_csv(str(tmp_path / "speed.csv"))
    assert "max_abs_err_o" in LATER_COLUMNS


def test_fp8_times_both_forwards_on_the_paper_shapes_then_measures_errors_once():
    s = dict(SETTINGS["fp8"], repetitions=2)
    cells = grid.cells("fp8", s, on_gpu=True)
    timed = [cell for cell in cells if cell.repetition is not None]
    once = cells[len(timed):]
    assert all(cell.repetition is None and cell.variant == "accuracy" for cell in once)
    assert [cell.provider for cell in timed if cell.repetition == 0][0] == "torch_matmul"
    assert {cell.dtype for cell in timed if cell.provider == "torch_matmul"} == {"fp16"}  # no fp8 matmul roof
    attention = [cell for cell in timed if cell.provider != "torch_matmul" and cell.repetition == 0]
    assert len(attention) == len(s["head_dims"]) * len(s["causal"]) * len(s["seqlens"]) * len(s["providers"])
    assert {(cell.provider, cell.dtype) for cell in attention} == {("ours", "fp16"), ("ours_fp8", "fp8_e4m3")}
    for cell in attention:
        assert cell.mode == "fwd" and cell.batch * cell.seqlen_q == CONFIG["tokens"]
        assert cell.heads * cell.head_dim == CONFIG["hidden"] and cell.heads == cell.kv_heads
    a = s["accuracy"]
    assert len(once) == len(a["shapes"]) * len(a["causal"]) * len(a["precisions"])
    assert {(cell.provider, cell.dtype) for cell in once} == {("ours_fp8", "fp8_e4m3"), ("ours", "fp16"),
                                                              ("ours", "bf16")}
    assert {cell.seqlen_q for cell in once} == {shape["seqlen_q"] for shape in a["shapes"]}
    # without a GPU: the accuracy cells alone, on the interpreter's shapes
    cpu = grid.cells("fp8", s, on_gpu=False)
    assert {cell.variant for cell in cpu} == {"accuracy"}
    assert {(cell.seqlen_q, cell.head_dim) for cell in cpu} == {(shape["seqlen_q"], shape["head_dim"])
                                                                 for shape in a["interpreter_shapes"]}


def test_fp8_quantises_per_batch_and_head_to_absmax_over_448():
    from experiments.fp8 import dequantise, quantise

    x = torch.randn(2, 3, 40, 16) * torch.arange(1, 7, dtype=torch.float32).reshape(2, 3, 1, 1)
    x8, descale = quantise(x)
    assert x8.dtype == torch.float8_e4m3fn and descale.dtype == torch.float32 and descale.shape == (2, 3)
    assert torch.allclose(descale, x.abs().amax(dim=(2, 3)) / 448)
    assert x8.float().abs().amax(dim=(2, 3)).eq(448).all()  # the absmax maps to e4m3's largest value
    error = (dequantise(x8, descale) - x.double()).abs() / x.double().abs().amax(dim=(2, 3), keepdim=True)
    assert error.max() <= 2**-4 + 1e-6  # 3 mantissa bits: within half a step of the absmax's binade


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the fp8 worker on CPU tensors, through Triton's interpreter (off on a GPU host)")
def test_fp8_writes_timed_and_accuracy_rows_on_a_tiny_shape(tmp_path, monkeypatch):
    """The worker on the CPU (Triton's interpreter), do_bench replaced: each timed cell calls its provider on its
    inputs (fp16 in, fp16 out; e4m3 in with descales, bfloat16 out), the accuracy cells measure their errors
    against float64, and the CSV reads back through the analysis's schema checks."""
    from analysis.load import read_experiment
    from experiments import provenance

    interpreter = CONFIG["fp8"]["accuracy"]["interpreter_shapes"]
    settings = dict(SETTINGS["fp8"], tokens=128, hidden=128, head_dims=[64], causal=[False, True], seqlens=[64],
                    repetitions=2, ceiling_matmul_size=32,
                    accuracy=dict(SETTINGS["fp8"]["accuracy"], shapes=interpreter))
    cells = grid.cells("fp8", settings, on_gpu=True)  # the GPU's grid, run here on the interpreter
    called = []

    def bench(fn, timing, input_bytes=0):
        out = fn()
        called.append((out.dtype, out.shape, input_bytes))
        assert timing["warmup_ms"] == CONFIG["warmup_ms"] and timing["rep_ms"] == CONFIG["rep_ms"]
        return {"ms": 2.0, "ms_p20": 1.9, "ms_p80": 2.1, "gpu_ms": 1.95, "host_ms": 0.1, "host_bound": 0,
                "attn_mem_bytes": 10, "input_bytes": input_bytes, "peak_mem_bytes": input_bytes + 10}

    monkeypatch.setattr(measure, "_bench", bench)
    monkeypatch.setattr(run.grid, "cells", lambda ablation, settings, on_gpu: cells)
    monkeypatch.setattr(provenance, "collect", lambda: {"gpu": "Test GPU", "host_kind": "cpu-interpreter"})
    output = str(tmp_path / "fp8.csv")
    run.work("fp8", settings, run.journal_of("fp8", settings, True, output), "cpu")
    monkeypatch.setattr(run.subprocess, "call", lambda command, env: 0)
    monkeypatch.setattr(run.gpus, "pin", lambda: "0")
    run.supervise("fp8", settings, output)

    frame = read_experiment(output)
    assert len(frame) == len(cells) and (frame["status"] == "ok").all(), frame[frame["status"] != "ok"]["note"]
    timed = frame[frame["repetition"].notna() & (frame["provider"] != "torch_matmul")]
    assert len(timed) == 2 * 2 * 2  # repetitions x masks x providers
    element = 2 * 2 * 64 * 64  # batch 2, 2 heads, seqlen 64, head dim 64
    fp16_bytes, fp8_bytes = 3 * element * 2, 3 * element + 3 * 2 * 2 * 4  # q, k, v; fp8 adds three (2, 2) descales
    assert set(called) == {(torch.float16, (2, 2, 64, 64), fp16_bytes), (torch.bfloat16, (2, 2, 64, 64), fp8_bytes),
                           (torch.float16, (32, 32), 2 * 32 * 32 * 2)}  # the two forwards, and the matmul roof
    flops_per_call = {0: flops.attention_flops(2, 2, 64, 64, 64, False, "fwd"),
                      1: flops.attention_flops(2, 2, 64, 64, 64, True, "fwd")}
    for row in timed.itertuples():
        assert row.mode == "fwd" and row.ms == 2.0 and row.host_bound == 0 and row.variant == "default"
        assert row.tflops == pytest.approx(flops_per_call[row.causal] / 2e-3 / 1e12)
        assert row.dtype == ("fp8_e4m3" if row.provider == "ours_fp8" else "fp16")
        assert row.block_m > 0 and row.num_warps > 0  # each arm's own default tiles
    from kernels.tiles import default_tiles

    fp8_row = timed[timed["provider"] == "ours_fp8"].iloc[0]
    assert fp8_row["block_n"] == default_tiles(64, "fwd", fp8=True).block_n
    accuracy = frame[frame["variant"] == "accuracy"]
    assert accuracy["repetition"].isna().all() and accuracy["ms"].isna().all()
    assert len(accuracy) == len(interpreter) * 2 * 3
    errors = accuracy.groupby("dtype")["err_o"].max()
    assert errors["fp16"] < 1e-3 < errors["fp8_e4m3"] < 0.05 and errors["fp16"] < errors["bf16"] < errors["fp8_e4m3"]
    assert (accuracy["max_abs_err_o"] > 0).all() and (accuracy["max_abs_err_o"] < 0.1).all()
    assert set(accuracy.loc[accuracy["dtype"] == "fp8_e4m3", "provider"]) == {"ours_fp8"}


def test_precompile_takes_one_decode_cell_per_kernel_specialisation_the_smallest(monkeypatch):
    """The decoding kernels specialise on dtype, group, tiles, page size and split count; the precompile
    compiles each once, from the cell of that specialisation with the smallest cache (processes compile at once)."""
    import kernels._decode
    from experiments import decode

    monkeypatch.setattr(kernels._decode, "sm_count", lambda device: 132)  # the H200's SMs, on the CPU
    device = torch.device("cpu")
    cells = [cell for cell in grid.decode(SETTINGS["decode"]) if cell.provider == "ours"]
    chosen = {key: cell for key, cell in measure.compile_representatives(cells, device).items() if key[:2] == ("decode", "ours")}
    specs = {decode.kernel_specialization(cell, device) for cell in cells}
    assert len(chosen) == len(specs) < len(cells)
    for key, cell in chosen.items():
        same = [c for c in cells if decode.kernel_specialization(c, device) == key[2:]]
        assert decode.cell_cache_bytes(cell) == min(decode.cell_cache_bytes(c) for c in same)


def test_an_interpreter_run_with_a_numpy_it_cannot_use_stops_naming_the_fix(monkeypatch, tmp_path):
    import numpy

    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    assert run.interpreter_problem() is None
    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    assert "numpy < 2.4" in run.interpreter_problem() and "envs/cpu.txt" in run.interpreter_problem()
    monkeypatch.setattr(run.gpus, "pin", lambda: None)
    with pytest.raises(SystemExit, match="numpy 2.4.0"):
        run.supervise("accuracy", {}, str(tmp_path / "accuracy.csv"))
    assert not (tmp_path / ".partial").exists()  # stopped before any worker or journal
