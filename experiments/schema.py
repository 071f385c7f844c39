"""The facts that the experiments and the analysis share, defined once: ablation names and the CSV schema.

Data flows one way (experiments/ writes results/*.csv, analysis/ reads them); both import these names
from here, so a column or an ablation is added in one place. The FLOP model that every TFLOP/s is
counted by lives beside this file in experiments/flops.py, read by both stages likewise.

A results row is one measurement of one cell (provider, variant, mode, dtype, shape) in one
repetition. Timed ablations run their whole grid `repetitions` times, one repetition after the
other (so the repetitions of a cell are minutes apart, not back to back), and each repetition also
times the matmul ceiling (provider torch_matmul, mode matmul) before its attention cells, so every
CSV carries the roof it is read against, measured interleaved with it. results/README.md documents
each column.
"""
import dataclasses

# Every ablation, in the order the README describes them; each writes results/<name>.csv.
ABLATIONS = ("speed", "tiles", "causal", "seqlen", "recompute", "fa1_vs_fa2", "accuracy", "ceiling", "training",
             "features", "decode", "fp8", "hopper")
# Ablations outside the cell grid: each has a runner of its own (experiments/<name>.py, called by
# experiments/run.py) and writes results/<name>.csv in columns of its own (FILE_COLUMNS below), which the
# analysis reads like a side file. The workflow plans, archives and restores them like the ablations above;
# they are not among ABLATIONS, whose rows are Row's (the analysis, `compare` and the grid read those).
# jit: the first-call (JIT compile) cost of the engine's kernels, with an empty and a filled Triton cache.
STANDALONE_ABLATIONS = ("jit",)
# Those that also run without a GPU (Triton's interpreter); the rest need a CUDA GPU or the archive.
INTERPRETER_ABLATIONS = ("accuracy",)
# Those whose rows are timings (repeated, with telemetry); accuracy's rows are errors.
TIMED_ABLATIONS = tuple(name for name in ABLATIONS if name != "accuracy")

STATUSES = ("ok", "oom", "unsupported", "error")
# train: one whole training step of experiments/gpt.py (forward, loss, backward, optimizer step)
MODES = ("fwd", "bwd", "fwd_bwd", "matmul", "copy", "train")
# Rows of these providers are the roofs measured beside the attention cells, not attention.
CEILING_PROVIDERS = ("torch_matmul", "torch_copy")


@dataclasses.dataclass
class Row:
    experiment: str
    provider: str
    variant: str = "default"
    mode: str | None = None
    dtype: str | None = None
    batch: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    seqlen_q: int | None = None
    seqlen_k: int | None = None
    head_dim: int | None = None
    causal: int | None = None
    # 0, 1, ...: which pass over the ablation's grid measured this row (timed ablations)
    repetition: int | None = None
    # tile config and recompute: ours only
    block_m: int | None = None
    block_n: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    recompute: int | None = None
    # timing of this repetition: triton.testing.do_bench median and p20/p80 (CUDA events around each
    # call, L2 flushed between calls), in ms
    ms: float | None = None
    ms_p20: float | None = None
    ms_p80: float | None = None
    # median GPU time of one call with every launch queued ahead behind a sleep kernel, so host gaps
    # cannot show; and median host time to issue one call (queue empty, no synchronisation)
    gpu_ms: float | None = None
    host_ms: float | None = None
    # 1: ms exceeds gpu_ms by more than experiments.measure.HOST_BOUND_EXCESS: the GPU waited for the
    # host, so ms measures launch overhead; such rows never decide a verdict
    host_bound: int | None = None
    # TFLOP/s by experiments/flops.py, from ms
    tflops: float | None = None
    # memory: what the call allocates at its peak, net of everything the process held before it
    # (attention's own footprint); the bytes of its inputs (q, k, v and, with a backward, dO); and
    # their sum, the total that attention needs (independent of allocator workspaces held earlier)
    attn_mem_bytes: int | None = None
    input_bytes: int | None = None
    peak_mem_bytes: int | None = None
    # GPU telemetry over this row's timing (NVML): median SM clock, mean power, highest temperature,
    # and how many samples they come from (empty where no sampler ran)
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    telemetry_samples: int | None = None
    # accuracy: relative L2 error against the float64 reference
    err_o: float | None = None
    err_lse: float | None = None
    err_dq: float | None = None
    err_dk: float | None = None
    err_dv: float | None = None
    # largest |o - o_ref| over the output's elements, against the same float64 reference (the fp8 ablation's
    # accuracy cells; empty elsewhere)
    max_abs_err_o: float | None = None
    # decode: the paged KV cache's page size (empty: dense) and the achieved bandwidth, GB/s: bytes of K and V
    # read plus q read and o written (experiments/decode.py), over ms
    page_size: int | None = None
    bandwidth_gbs: float | None = None
    status: str = "ok"  # one of STATUSES
    note: str = ""
    # provenance
    gpu: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    commit: str = ""
    timestamp: str = ""
    host_kind: str = ""
    source: str = "measured"


COLUMNS = [field.name for field in dataclasses.fields(Row)]
SHAPE_COLUMNS = ["dtype", "batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim", "causal"]
TILE_COLUMNS = ["block_m", "block_n", "num_warps", "num_stages"]
TIMING_COLUMNS = ["ms", "ms_p20", "ms_p80", "gpu_ms", "host_ms", "tflops"]
MEMORY_COLUMNS = ["attn_mem_bytes", "input_bytes", "peak_mem_bytes"]
TELEMETRY_COLUMNS = ["sm_clock_mhz", "power_w", "temp_c", "telemetry_samples"]
ERROR_COLUMNS = ["err_o", "err_lse", "err_dq", "err_dk", "err_dv"]
PROVENANCE_COLUMNS = ["gpu", "driver", "cuda", "torch", "triton", "commit", "timestamp", "host_kind", "source"]
INTEGER_COLUMNS = ["batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim", "causal", "repetition",
                   *TILE_COLUMNS, "recompute", "host_bound", "attn_mem_bytes", "input_bytes", "peak_mem_bytes",
                   "telemetry_samples", "page_size"]
FLOAT_COLUMNS = [column for column in TIMING_COLUMNS + TELEMETRY_COLUMNS + ERROR_COLUMNS
                 + ["max_abs_err_o", "bandwidth_gbs"] if column not in INTEGER_COLUMNS]
# Columns added after files were archived: a file without some or all of them reads as if they were empty (the
# decode ablation's page_size and bandwidth_gbs, the fp8 ablation's max_abs_err_o; every other ablation leaves
# them empty anyway).
LATER_COLUMNS = ("page_size", "bandwidth_gbs", "max_abs_err_o")
# A cell's identity across repetitions and runs (with experiment, provider, variant and mode).
CELL_KEYS = ["experiment", "provider", "variant", "mode"] + SHAPE_COLUMNS

# Files an ablation writes beside results/<ablation>.csv, in columns of their own (not rows of Row):
# training's loss-agreement run, one loss per provider, seed and step (results/README.md).
SIDE_FILES = {"training": ("training_loss",)}
LOSS_COLUMNS = ["provider", "seed", "step", "loss"] + PROVENANCE_COLUMNS
# jit (experiments/jit.py): one row per fresh process, `cache` "empty" (it compiled every kernel) or "filled"
# (it loaded what the "empty" process before it compiled into the same TRITON_CACHE_DIR); wall-clock seconds
# of its first forward, first backward and second forward+backward; `concurrent`: how many such process
# pairs ran at once (each with its own cache directory).
JIT_CACHES = ("empty", "filled")
JIT_TIMES = ["first_fwd_s", "first_bwd_s", "second_fwd_bwd_s"]
JIT_COLUMNS = (["dtype", "batch", "heads", "seqlen", "head_dim", "causal", "cache", "repetition", "concurrent"]
               + JIT_TIMES + ["status", "note"] + PROVENANCE_COLUMNS)
FILE_COLUMNS = {"training_loss": LOSS_COLUMNS, "jit": JIT_COLUMNS}  # a file's columns by its name; COLUMNS for the rest


def side_files(ablations) -> list[str]:
    """The names of the files that `ablations` write beside their CSVs (training: training_loss)."""
    return [side for ablation in ablations for side in SIDE_FILES.get(ablation, ())]
