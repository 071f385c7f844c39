"""v38 (paged decoding's page ids a tile ahead, in the dense kernel's pipeline stages while the grid fits one wave and
two past it) against the kernel before v36, in one process:
the decode ablation's GQA shapes (32 query heads over 4 KV heads, head dim 128, fp16, one new token, every
sequence full), dense and paged caches (pages of 16 and 256, shuffled), each cell timed with experiments.measure's
method (do_bench's median and spread, host time, GPU time behind a sleep) for both kernels, in alternating order,
twice.

    PYTHONPATH=<tree with v38> python3 notes/round32/decode_stages_probe.py BEFORE.py OUT.csv

Arms: v38 (the tree's kernels/_decode.py) and the kernel before v36. BEFORE.py: the kernels/_decode.py before v36
(`git show <commit>:kernels/_decode.py`), loaded as its own module. num_stages: v38's, from launch_shape.
"""
import csv
import importlib.util
import itertools
import sys
from types import SimpleNamespace

import torch

import kernels._decode as after
from experiments.decode import _inputs, layout_variant
from experiments.measure import _bench

TIMING = dict(warmup_ms=25, rep_ms=100)
FIELDS = ["batch", "seqlen_k", "layout", "kernel", "rep", "num_splits", "num_stages", "ms", "ms_p20", "ms_p80", "gpu_ms", "host_ms",
          "max_abs_diff"]


def load(path):
    spec = importlib.util.spec_from_file_location("decode_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(before_path, path):
    kernels = {"v38": after, "before": load(before_path)}
    arms = ("v38", "before")
    device = torch.device("cuda")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for batch, n, page in itertools.product((1, 8, 64), (1024, 8192, 32768, 131072), (None, 16, 256)):
            if 2 * batch * 4 * n * 128 * 2 > 20e9:
                continue
            cell = SimpleNamespace(batch=batch, heads=32, kv_heads=4, seqlen_k=n, head_dim=128, dtype="fp16",
                                   variant=layout_variant(page))
            q, k, v, table = _inputs(cell, device)
            seqlens = torch.full((batch,), n, dtype=torch.int32, device=device)

            def caller(arm):
                module = kernels[arm]

                def call():
                    return module.decode_forward(q, k, v, seqlens, None, None, table, None, 128 ** -0.5, True,
                                                 (-1, -1), 0.0, 0, n)
                return call

            outputs = {arm: caller(arm)() for arm in arms}
            diff = max((outputs[arm][0].float() - outputs["before"][0].float()).abs().max().item() for arm in arms)
            splits = outputs["v38"][2]
            stages = after.launch_shape(batch, 8, 4, 128, n, device, paged=page is not None)[3]
            del outputs
            for rep in range(2):
                for name in (arms if rep == 0 else arms[::-1]):
                    call = caller(name)
                    r = _bench(lambda: call()[0], TIMING)
                    writer.writerow(dict(batch=batch, seqlen_k=n, layout=cell.variant, kernel=name, rep=rep,
                                         num_splits=splits, num_stages=stages, ms=r["ms"], ms_p20=r["ms_p20"], ms_p80=r["ms_p80"],
                                         gpu_ms=r["gpu_ms"], host_ms=r["host_ms"], max_abs_diff=diff))
                    f.flush()
            print(f"B{batch} N{n} {cell.variant}: splits {splits}, stages {stages}, diff {diff:.2e}", flush=True)
            del q, k, v, table
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
