"""Time the Hopper backward (kernels/_hopper_bwd.py) per tile config against the portable backward
and cuDNN's, with the pipeline's own cell measurement (experiments.measure.attention: do_bench
median and percentiles, GPU and host time, memory), in one process on the paper's shapes (fp16,
batch x seqlen = 16k tokens, hidden 2048).

    python3 notes/hopper_bwd_tiles.py OUT.csv [--passes 2] [--seqlens 4096 16384] [--modes bwd fwd_bwd]

Variants: portable (the default backward: dK/dV kernel, then the dQ kernel), hopper_bwd:<tiles>
(one pass, dQ by TMA reduce-add), and the sdpa_cudnn peer. With --no-dq-reduce, also
hopper_bwd_noreduce:<tiles>: the same kernel with its dQ reduce-add deleted (a wrong dQ; the time it
leaves is what the rest of the kernel costs, so the difference is the reduce's share). A probe for choosing the default tiles
and for notes/perf.md; the report's numbers come from the `hopper` ablation.
"""
import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import measure, provenance, results, run  # noqa: E402
from experiments.grid import Cell, paper_shape  # noqa: E402
from experiments.settings import ablation_settings, load_default  # noqa: E402

CANDIDATES = {64: [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (128, 128, 8, 2), (32, 128, 4, 2)],
              128: [(64, 128, 8, 2), (64, 64, 8, 2), (32, 128, 8, 2), (64, 128, 8, 3), (32, 128, 4, 2)]}


def noreduce_backward():
    """The launcher of a copy of kernels/_hopper_bwd.py whose dQ reduce-add line is deleted."""
    import importlib.util
    import tempfile

    source = (Path(__file__).resolve().parents[1] / "kernels" / "_hopper_bwd.py").read_text()
    line = "        dq_desc.atomic_add([bh, start_m, 0], dq.reshape([1, BLOCK_M, HEAD_DIM]))\n"
    assert line in source
    path = Path(tempfile.mkdtemp()) / "_hopper_bwd_noreduce.py"
    path.write_text(source.replace(line, "        dk += 0.0 * tl.sum(dq)  # dq still computed\n"))
    spec = importlib.util.spec_from_file_location("_hopper_bwd_noreduce", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.hopper_backward


def load_settings() -> dict:
    return ablation_settings(load_default(), ["hopper"])["hopper"]


def cells(seqlens, modes, passes, noreduce=False):
    settings = load_settings()
    for repetition in range(passes):
        for head_dim in (64, 128):
            for causal in (False, True):
                for n in seqlens:
                    shape = paper_shape(settings, n, head_dim)
                    for mode in modes:
                        yield Cell("hopper", "ours", mode, "fp16", causal=causal, variant="portable",
                                   repetition=repetition, **shape)
                        for tiles in CANDIDATES[head_dim]:
                            yield Cell("hopper", "ours", mode, "fp16", causal=causal,
                                       variant="hopper_bwd:" + "x".join(map(str, tiles)),
                                       switches=(("hopper_backward", True),), bwd_tiles=tiles,
                                       repetition=repetition, **shape)
                            if noreduce:
                                yield Cell("hopper", "ours", mode, "fp16", causal=causal,
                                           variant="hopper_bwd_noreduce:" + "x".join(map(str, tiles)),
                                           switches=(("hopper_backward", True),), bwd_tiles=tiles,
                                           repetition=repetition, **shape)
                        yield Cell("hopper", "sdpa_cudnn", mode, "fp16", causal=causal, repetition=repetition, **shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--seqlens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--modes", nargs="+", default=["bwd", "fwd_bwd"])
    parser.add_argument("--no-dq-reduce", action="store_true")
    parser.add_argument("--tiles", nargs="*", default=None, help="only these, e.g. 64x128x8x3")
    args = parser.parse_args()
    if args.tiles:
        for head_dim in CANDIDATES:
            CANDIDATES[head_dim] = [tuple(map(int, t.split("x"))) for t in args.tiles]
    import kernels._hopper_bwd as hopper_bwd
    real, noreduce = hopper_bwd.hopper_backward, (noreduce_backward() if args.no_dq_reduce else None)
    settings = load_settings()
    timing = {key: settings[key] for key in ("warmup_ms", "rep_ms")}
    device = torch.device("cuda")
    origin = provenance.collect()
    rows = []
    for cell in cells(args.seqlens, args.modes, args.passes, args.no_dq_reduce):
        hopper_bwd.hopper_backward = noreduce if "noreduce" in cell.variant else real
        try:
            values, status, note = measure.attention(cell, timing, device), "ok", ""
        except Exception as error:  # a config that does not fit: its row says why
            values, (status, note) = {}, measure.failure(error)
        rows.append(dataclasses.asdict(run.row(cell, values, status, note, origin, provenance.timestamp())))
        print(f"{cell.label}: {values.get('ms', float('nan')):.3f} ms {values.get('tflops', 0):.0f} TFLOP/s {status} {note[:80]}",
              flush=True)
        results.write_csv(rows, args.output)  # after every cell: a run cut short keeps its rows


if __name__ == "__main__":
    main()
