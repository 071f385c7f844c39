"""The `jit` ablation: first-call (JIT compile) cost of the engine's kernels, and what Triton's on-disk cache saves.

    python -m experiments.run jit --output results/jit.csv       (snakemake --cores 1 jit; a CUDA GPU only)

Triton compiles a kernel the first time a process calls it with a new specialisation (head dim, mask,
dtype, tile config: each is a constexpr), keeps the compiled kernel in memory for the rest of the process,
and writes it to its cache directory on disk (TRITON_CACHE_DIR, ~/.triton/cache by default), from which a
later process loads it instead of compiling it again.

For each head dim and mask of the settings, a fresh Python process with an empty TRITON_CACHE_DIR times
its first forward call (which compiles the forward kernel), its first backward (the delta and dK/dV and dQ
kernels) and its second forward+backward (everything in memory); then a second fresh process with the same,
now filled, cache directory times its first calls again: those load the compiled kernels from disk. Each
time is wall-clock seconds around the call, ended by a device synchronisation. Every (empty, filled) pair
runs `repetitions` times, each with a cache directory of its own; up to `concurrent` pairs (the head dims
and masks of one repetition) run at once, and each row records how many did (compilation is mostly
single-threaded on the host's CPU; the GPU work of these small calls takes milliseconds). One row per
process (experiments/schema.py, JIT_COLUMNS), with the provenance columns of every results file.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import threading
import time

from experiments import gpus, provenance, results
from experiments.schema import JIT_CACHES, JIT_COLUMNS, JIT_TIMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD_MARK = "jit-times"  # the line of a child's output that carries its times
CHILD_TIMEOUT_S = 600
NOTE_CHARS = 300


def cases(settings: dict) -> list[tuple[int, bool]]:
    """The (head dim, causal) pairs the ablation measures, in order."""
    return [(head_dim, causal) for head_dim in settings["head_dims"] for causal in settings["causal"]]


def child_line(first_fwd_s: float, first_bwd_s: float, second_fwd_bwd_s: float) -> str:
    """What a measuring process prints: its three times, marked so that the parent finds them."""
    return f"{CHILD_MARK} {first_fwd_s:.6f} {first_bwd_s:.6f} {second_fwd_bwd_s:.6f}"


def parse_child_output(stdout: str) -> dict[str, float]:
    """The times of a measuring process from its output (the last marked line); ValueError when there is none
    or its times are not three non-negative numbers."""
    lines = [line.split() for line in stdout.splitlines() if line.startswith(CHILD_MARK + " ")]
    if not lines:
        raise ValueError(f"no '{CHILD_MARK}' line in the measuring process's output")
    fields = lines[-1][1:]
    if len(fields) != len(JIT_TIMES):
        raise ValueError(f"expected {len(JIT_TIMES)} times after '{CHILD_MARK}', got {fields}")
    times = dict(zip(JIT_TIMES, (float(field) for field in fields)))
    if any(not value >= 0 for value in times.values()):  # also refuses nan
        raise ValueError(f"times must be non-negative seconds, got {times}")
    return times


def build_row(settings: dict, head_dim: int, causal: bool, cache: str, repetition: int, concurrent: int,
              times: dict | None, status: str, note: str, origin: dict, timestamp: str) -> dict:
    """One results row (JIT_COLUMNS) of one measuring process; times None for a process that failed."""
    if cache not in JIT_CACHES:
        raise ValueError(f"cache must be one of {JIT_CACHES}, got {cache!r}")
    values = dict(origin, dtype=settings["dtype"], batch=settings["batch"], heads=settings["heads"],
                  seqlen=settings["seqlen"], head_dim=head_dim, causal=int(causal), cache=cache, repetition=repetition,
                  concurrent=concurrent, **{name: (times or {}).get(name, "") for name in JIT_TIMES}, status=status,
                  note=note, timestamp=timestamp, source="measured")
    return {column: values.get(column, "") for column in JIT_COLUMNS}


def child(head_dim: int, causal: bool, dtype: str, batch: int, heads: int, seqlen: int) -> None:
    """Measure in this (fresh) process: first forward, first backward, second forward+backward."""
    import torch

    from kernels import flash_attention

    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch_dtype, requires_grad=True)
               for _ in range(3))
    torch.cuda.synchronize()

    def timed(fn):
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        return result, time.perf_counter() - start

    out, first_fwd = timed(lambda: flash_attention(q, k, v, causal=causal))
    grad = torch.ones_like(out)
    torch.cuda.synchronize()
    _, first_bwd = timed(lambda: torch.autograd.grad(out, (q, k, v), grad))
    _, second = timed(lambda: torch.autograd.grad(flash_attention(q, k, v, causal=causal), (q, k, v), grad))
    print(child_line(first_fwd, first_bwd, second), flush=True)


def _spawn(settings: dict, head_dim: int, causal: bool, environment: dict) -> tuple[dict | None, str, str]:
    """One fresh measuring process: (times, status, note)."""
    command = [sys.executable, "-m", "experiments.jit", "--child", str(head_dim), str(int(causal)), settings["dtype"],
               str(settings["batch"]), str(settings["heads"]), str(settings["seqlen"])]
    try:
        done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "error", f"the measuring process ran over {CHILD_TIMEOUT_S} s"
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return None, "error", f"exit code {done.returncode}: {tail}"[:NOTE_CHARS]
    try:
        return parse_child_output(done.stdout), "ok", ""
    except ValueError as error:
        return None, "error", str(error)[:NOTE_CHARS]


def measure(settings: dict, environment: dict, log=print) -> list[dict]:
    """Every (empty, filled) process pair of every repetition; rows without the provenance columns filled."""
    todo = cases(settings)
    at_once = max(1, min(settings["concurrent"], len(todo)))
    total = settings["repetitions"] * len(todo) * len(JIT_CACHES)
    lock, finished, started = threading.Lock(), [0], time.monotonic()
    measured = {}

    def pair(repetition: int, head_dim: int, causal: bool) -> None:
        with tempfile.TemporaryDirectory(prefix="triton-cache-jit-") as cache_dir:
            env = dict(environment, TRITON_CACHE_DIR=cache_dir)
            for cache in JIT_CACHES:
                if cache == "filled" and measured[(repetition, head_dim, causal, "empty")][1] != "ok":
                    found = (None, "error", "not run: the empty-cache process before it failed")
                else:
                    found = _spawn(settings, head_dim, causal, env)
                measured[(repetition, head_dim, causal, cache)] = found
                with lock:
                    finished[0] += 1
                    elapsed = time.monotonic() - started
                    times, status, note = found
                    what = (f"first fwd {times['first_fwd_s']:.2f} s, first bwd {times['first_bwd_s']:.2f} s, "
                            f"second fwd+bwd {times['second_fwd_bwd_s'] * 1e3:.1f} ms" if status == "ok"
                            else f"{status}: {note}")
                    left = elapsed / finished[0] * (total - finished[0])
                    log(f"[jit {finished[0]}/{total}] rep {repetition} d{head_dim} {'causal' if causal else 'full'} "
                        f"{cache} cache: {what} | {elapsed:.0f} s, ~{left:.0f} s left")

    log(f"jit: {len(todo)} head dim and mask pairs x {len(JIT_CACHES)} processes x {settings['repetitions']} "
        f"repetitions, {at_once} pairs at once, {settings['dtype']} shape ({settings['batch']}, {settings['heads']}, "
        f"{settings['seqlen']}, d)")
    for repetition in range(settings["repetitions"]):
        with concurrent.futures.ThreadPoolExecutor(max_workers=at_once) as pool:
            for future in [pool.submit(pair, repetition, head_dim, causal) for head_dim, causal in todo]:
                future.result()
    return [dict(repetition=repetition, head_dim=head_dim, causal=causal, cache=cache, concurrent=at_once,
                 found=measured[(repetition, head_dim, causal, cache)])
            for repetition in range(settings["repetitions"]) for head_dim, causal in todo for cache in JIT_CACHES]


def run(settings: dict, output: str) -> None:
    """The ablation into `output` (results/jit.csv), on this host's CUDA GPU."""
    device = gpus.pin()
    if device is None:
        sys.exit("jit needs a CUDA GPU and this host shows none; "
                 "run `snakemake --cores 1 --config mode=archive` to take it from results/archive/ instead")
    print(f"jit: CUDA device {device}", flush=True)
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    found = measure(settings, environment, log=lambda line: print(line, flush=True))
    origin, stamp = provenance.collect(), provenance.timestamp()
    rows = [build_row(settings, item["head_dim"], item["causal"], item["cache"], item["repetition"],
                      item["concurrent"], *item["found"], origin, stamp) for item in found]
    results.write_csv(rows, output)
    failed = sum(row["status"] != "ok" for row in rows)
    print(f"jit: wrote {output} ({len(rows)} rows{f', {failed} failed' if failed else ''})", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=6, metavar=("HEAD_DIM", "CAUSAL", "DTYPE", "BATCH", "HEADS", "SEQLEN"),
                        required=True, help="measure in this process (the runner starts these; see experiments.run)")
    args = parser.parse_args(argv)
    head_dim, causal, dtype, batch, heads, seqlen = args.child
    child(int(head_dim), causal == "1", dtype, int(batch), int(heads), int(seqlen))


if __name__ == "__main__":
    main()
