"""Runs one ablation into its CSV: python -m experiments.run <ablation> --output results/<ablation>.csv

(and training's loss-agreement run: python -m experiments.run training --loss-agreement --output
results/training_loss.csv; the jit ablation, outside the cell grid, goes to its own runner, experiments/jit.py)

The settings come as JSON from the Snakemake rule (--settings), or from experiments/config.yaml when
run by hand. The process started here pins itself to a free GPU (experiments/gpus.py) and supervises
a worker process that measures the cells one at a time, appending each row to a journal under
results/.partial/ and printing progress. A cell that fails becomes a row with its status and the grid
goes on; if the worker dies inside a cell (a crash, or a CUDA error that spoils the context), that
cell is recorded as an error and a fresh worker resumes after it. An interrupted run keeps every
finished row: rerunning skips them. The CSV is written once all cells have a row.
"""
import argparse
import dataclasses
import gc
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

from experiments import grid, gpus, provenance, results
from experiments.schema import STANDALONE_ABLATIONS

RESTART = 75  # worker's exit code after a cell left the CUDA context unusable


def row(cell, values: dict, status: str, note: str, origin: dict, timestamp: str) -> results.Row:
    """A cell's row: its identity, measured values, status, and the provenance columns of `origin`."""
    return results.Row(
        experiment=cell.experiment, provider=cell.provider, variant=cell.variant, mode=cell.mode, dtype=cell.dtype,
        batch=cell.batch, heads=cell.heads, kv_heads=cell.kv_heads, seqlen_q=cell.seqlen_q, seqlen_k=cell.seqlen_k,
        head_dim=cell.head_dim, causal=int(cell.causal) if cell.head_dim else None, repetition=cell.repetition,
        status=status, note=note, timestamp=timestamp, **values, **origin,
    )


def journal_of(ablation: str, settings: dict, on_gpu: bool, output: str) -> str:
    """The journal of a run: one per ablation, settings and kind of host, beside the output."""
    digest = hashlib.sha1(json.dumps([settings, on_gpu], sort_keys=True).encode()).hexdigest()[:12]
    return os.path.join(os.path.dirname(output) or ".", ".partial", f"{ablation}-{digest}.jsonl")


def interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run the kernels in this environment, or None. Triton 3.6's
    interpreter fails inside every kernel with numpy 2.4 or later ("only 0-dimensional arrays can be
    converted to Python scalars"); envs/cpu.txt pins an earlier one."""
    import numpy

    if tuple(int(part) for part in numpy.__version__.split(".")[:2]) >= (2, 4):
        return (f"Triton's interpreter needs numpy < 2.4 and this environment has numpy {numpy.__version__}: "
                "install the pins of envs/cpu.txt (pip install -r envs/cpu.txt)")
    return None


def supervise(ablation: str, settings: dict, output: str) -> None:
    device = gpus.pin()
    on_gpu = device is not None
    if not on_gpu and ablation not in grid.INTERPRETER_ABLATIONS:
        sys.exit(f"{ablation} needs a CUDA GPU and this host shows none; "
                 "run `snakemake --cores 1 --config mode=archive` to take it from results/archive/ instead")
    if not on_gpu and (problem := interpreter_problem()):
        sys.exit(f"{ablation} runs on Triton's interpreter here, which cannot run: {problem}")
    print(f"{ablation}: " + (f"CUDA device {device}" if on_gpu else "no CUDA GPU, Triton interpreter"), flush=True)
    cells = {cell.key: cell for cell in grid.cells(ablation, settings, on_gpu)}
    # a training cell that runs out of memory adds a row of the largest batch that fits
    derived = {key: extra for key, cell in cells.items() if (extra := grid.largest_batch_cell(cell))}
    known = {**cells, **{cell.key: cell for cell in derived.values()}}
    journal_path = journal_of(ablation, settings, on_gpu, output)
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    if not on_gpu:
        environment["TRITON_INTERPRET"] = "1"  # read by triton when the kernels are defined
    worker = [sys.executable, "-m", "experiments.run", ablation, "--output", output, "--settings", json.dumps(settings),
              "--worker", journal_path, "--device", "cuda" if on_gpu else "cpu"]
    while True:
        finished_before = len(results.Journal(journal_path).rows)
        code = subprocess.call(worker, env=environment)
        journal = results.Journal(journal_path)
        if code == 0:
            break
        crashed = journal.unfinished()
        if crashed is not None:
            from experiments.providers import tile_columns

            cell, note = known[crashed], f"the measuring process died in this cell (exit code {code})"
            print(f"{ablation}: {cell.label}: {note}; resuming after it", flush=True)
            journal.done(crashed, row(cell, tile_columns(cell), "error", note, journal.provenance, provenance.timestamp()))
        elif len(journal.rows) == finished_before:
            sys.exit(f"{ablation}: the measuring process failed (exit code {code}) before finishing a cell")
    rows = []
    for key in cells:
        rows.append(journal.rows[key])
        if key in derived and derived[key].key in journal.rows:
            rows.append(journal.rows[derived[key].key])
    results.write_csv(rows, output)
    for stale in glob.glob(os.path.join(os.path.dirname(journal_path), f"{ablation}-*.jsonl*")):
        os.remove(stale)  # this run's journal, and those of earlier settings that cannot resume now
    print(f"{ablation}: wrote {output} ({len(rows)} rows)", flush=True)


def work(ablation: str, settings: dict, journal_path: str, device_type: str) -> None:
    import torch

    from experiments import measure, telemetry

    on_gpu = device_type == "cuda"
    if on_gpu and not torch.cuda.is_available():
        sys.exit(f"nvidia-smi shows a GPU but torch {torch.__version__} cannot use CUDA: "
                 "install a CUDA build of torch, or run with --config mode=archive")
    device = torch.device(device_type)
    cells = grid.cells(ablation, settings, on_gpu)
    journal = results.Journal(journal_path)
    journal.set_provenance(provenance.collect())
    todo = [cell for cell in cells if cell.key not in journal.rows or _largest_batch_pending(cell, journal)]
    print(f"{ablation}: {len(cells)} cells, {len(cells) - len(todo)} done before, {len(todo)} to measure", flush=True)
    if on_gpu:
        measure.precompile(todo, device)
    sampler = None
    if on_gpu and ablation in grid.TIMED_ABLATIONS:
        sampler = telemetry.Sampler(telemetry.pci_bus_id(device), journal_path + ".telemetry")
    started = time.monotonic()
    for done, cell in enumerate(todo, 1):
        if cell.key not in journal.rows:
            _measure_one(ablation, cell, settings, device, journal, sampler, started, done, len(todo))
        if _largest_batch_pending(cell, journal):
            # a training size that does not fit: its oom row stays, and the largest batch that fits is a second row
            _measure_one(ablation, grid.largest_batch_cell(cell), settings, device, journal, sampler, started, done,
                         len(todo))
    if sampler is not None:
        sampler.close()


def _largest_batch_pending(cell, journal) -> bool:
    """The cell ran out of memory and has a largest-batch row to add that the journal does not hold yet."""
    derived = grid.largest_batch_cell(cell)
    return (derived is not None and journal.rows.get(cell.key, {}).get("status") == "oom"
            and derived.key not in journal.rows)


def _measure_one(ablation, cell, settings, device, journal, sampler, started, done, total) -> None:
    """Measure one cell into the journal and print its progress line."""
    import torch

    from experiments import accuracy, measure, providers
    from experiments.schema import CEILING_PROVIDERS

    key = cell.key
    journal.start(key)
    values, status, note = {}, "ok", ""
    window_start = time.time()
    try:
        values.update(providers.tile_columns(cell))
        if ablation == "accuracy":
            values.update(accuracy.errors(cell, device))
        elif cell.provider in CEILING_PROVIDERS:
            values.update(measure.ceiling(cell, settings, device))
        elif cell.variant.endswith(grid.LARGEST_BATCH):
            batch, found, status, note = measure.largest_batch(cell, settings, device)
            values.update(found)
            cell = dataclasses.replace(cell, batch=batch)  # the row says the batch that ran; the key stays
        elif cell.experiment == "training":
            values.update(measure.training(cell, settings, device))
        elif cell.experiment == "decode":
            from experiments import decode

            values.update(decode.measure(cell, settings, device))
        elif cell.experiment == "fp8":
            from experiments import fp8

            values.update(fp8.measure(cell, settings, device))
        else:
            values.update(measure.attention(cell, settings, device))
    except Exception as error:  # every failure becomes a row; the grid goes on
        status, note = measure.failure(error)
    if sampler is not None:
        values.update(sampler.window(window_start, time.time()))
    note = values.pop("note", note)
    journal.done(key, row(cell, values, status, note, journal.provenance, provenance.timestamp()))
    elapsed = time.monotonic() - started
    print(f"[{ablation} {done}/{total}] {cell.label}: {_summary(status, note, values)}"
          f" | {elapsed:.0f} s, ~{elapsed / done * (total - done):.0f} s left", flush=True)
    if status != "ok":
        gc.collect()  # what the failed call held may sit in reference cycles of its traceback
    if device.type == "cuda":
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:  # the context is gone: a fresh process carries on
            sys.exit(RESTART)


def _summary(status: str, note: str, values: dict) -> str:
    if status != "ok":
        return f"{status}: {note}"
    if "err_o" in values:  # accuracy: its errors (fp8's accuracy cells have err_o and max_abs_err_o)
        return " ".join(f"{name} {values[name]:.2e}" for name in ("err_o", "err_dq", "max_abs_err_o")
                        if values.get(name) is not None)
    if values.get("host_ms") is None:  # a training step: timed by CUDA events only
        text = f"{values['ms']:.1f} ms per step ({values['ms_p20']:.1f}-{values['ms_p80']:.1f})"
    else:
        text = f"{values['ms']:.3f} ms (GPU {values['gpu_ms']:.3f}, host {values['host_ms']:.3f})"
    if values.get("host_bound"):
        text += " host-bound"
    if values.get("tflops"):
        text += f", {values['tflops']:.1f} TFLOP/s"
    text += f", own memory {values['attn_mem_bytes'] / 2**20:.1f} MiB"
    if values.get("sm_clock_mhz") is not None:
        text += f", {values['sm_clock_mhz']:.0f} MHz {values['power_w']:.0f} W {values['temp_c']:.0f} C"
    return text


def loss_agreement(settings: dict, output: str) -> None:
    """training's loss-agreement run (experiments.training.loss_agreement) into a long CSV: one row per
    provider, seed and step (results/README.md), with the provenance columns of the results files."""
    device = gpus.pin()
    if device is None:
        sys.exit("training's loss-agreement run needs a CUDA GPU and this host shows none; "
                 "run `snakemake --cores 1 --config mode=archive` to take it from results/archive/ instead")
    from experiments import training
    from experiments.gpt import GPTConfig

    s = settings["loss_agreement"]
    config = GPTConfig(layers=s["layers"], hidden=s["hidden"], heads=s["heads"], vocab=s["vocab"], seqlen=s["context"])
    print(f"training loss agreement: {config}, {s['steps']} steps, batch {s['batch']}, seeds {s['seeds']}", flush=True)
    found = training.loss_agreement(config, s["steps"], tuple(s["seeds"]), device="cuda", batch=s["batch"])
    origin, stamp = provenance.collect(), provenance.timestamp()
    curves = (("ours", s["seeds"][0], found["ours"]), (found["reference"], s["seeds"][0], found["reference_curve"]),
              (found["reference"], s["seeds"][1], found["reference_other_seed"]))
    rows = [dict(origin, provider=provider, seed=seed, step=step, loss=loss, timestamp=stamp, source="measured")
            for provider, seed, losses in curves for step, loss in enumerate(losses)]
    results.write_csv(rows, output)
    print(f"training loss agreement: wrote {output}; largest |ours - {found['reference']}| {found['max_abs_diff']:.4f}, "
          f"{found['reference']} seed spread {found['seed_spread']:.4f}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ablation", choices=list(grid.ABLATIONS) + list(STANDALONE_ABLATIONS))
    parser.add_argument("--output", required=True, help="the CSV to write, e.g. results/speed.csv")
    parser.add_argument("--settings", help="the ablation's settings as JSON (default: experiments/config.yaml)")
    parser.add_argument("--loss-agreement", action="store_true",
                        help="training only: write its loss-agreement curves to --output (results/training_loss.csv)")
    parser.add_argument("--worker", metavar="JOURNAL", help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=["cuda", "cpu"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.settings:
        settings = json.loads(args.settings)
    else:
        from experiments.settings import ablation_settings, load_default

        settings = ablation_settings(load_default(), [args.ablation])[args.ablation]
    if args.loss_agreement:
        if args.ablation != "training":
            parser.error("--loss-agreement belongs to the training ablation")
        loss_agreement(settings, args.output)
    elif args.ablation == "jit":
        from experiments import jit

        jit.run(settings, args.output)
    elif args.worker:
        work(args.ablation, settings, args.worker, args.device)
    else:
        supervise(args.ablation, settings, args.output)


if __name__ == "__main__":
    main()
