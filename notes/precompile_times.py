"""Time an ablation's precompile (experiments.measure.precompile) configuration by configuration.

    TORCHINDUCTOR_COMPILE_THREADS=1 python3 notes/precompile_times.py features OUT.csv [--workers 16]

Runs what `precompile` runs (one call of each representative cell, in a pool of spawned processes,
as many as the measuring job would use) and writes, per configuration, the worker's start and end
(seconds from the pool's start), the provider, mode, variant and shape, then prints the pool's wall
time. From these a different order can be simulated offline (for example the slowest first). Use
fresh Inductor and Triton cache directories (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR): a warm cache
hides the compile times.
"""
import argparse
import csv
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _timed(cell, started):
    from experiments import measure

    begin = time.time() - started
    measure._call_once(cell, "cuda")
    return begin, time.time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ablation")
    parser.add_argument("output")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    import torch

    from experiments import grid, measure
    from experiments.settings import ablation_settings, load_default

    settings = ablation_settings(load_default(), [args.ablation])[args.ablation]
    cells = grid.cells(args.ablation, settings, True)
    representatives = list(measure.compile_representatives(cells, torch.device("cuda")).values())
    print(f"{args.ablation}: {len(representatives)} configurations in {args.workers} processes", flush=True)
    started = time.time()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        spans = list(pool.map(_timed, representatives, [started] * len(representatives)))
    wall = time.time() - started
    with open(args.output, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["order", "start_s", "end_s", "seconds", "provider", "mode", "variant", "dtype", "batch",
                         "heads", "seqlen_q", "head_dim", "causal"])
        for order, (cell, (begin, end)) in enumerate(zip(representatives, spans)):
            writer.writerow([order, f"{begin:.1f}", f"{end:.1f}", f"{end - begin:.1f}", cell.provider, cell.mode,
                             cell.variant, cell.dtype, cell.batch, cell.heads, cell.seqlen_q, cell.head_dim,
                             int(cell.causal)])
    print(f"wall {wall:.0f} s", flush=True)


if __name__ == "__main__":
    main()
