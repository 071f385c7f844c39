"""Decoding's split count by waves of programs, on the decode ablation's long-cache cells, dense and paged.

    PYTHONPATH=. python3 notes/decode_wave_probe.py > notes/<dir>/decode_wave_probe_h200.csv   (a CUDA GPU; ~2 min)

`notes/decode_small_probe.py` found, on three dense cells, the fastest split count to be the largest power of
two whose programs (batch x KV heads x query blocks x splits) fit in one wave of the SMs, where
`kernels._decode.choose_num_splits` aimed at two waves (v17). This probe asks the same of every fp16 `ours` cell of
the decode ablation (`experiments.grid.decode` on experiments/config.yaml's `decode` section: its batches,
heads, dense and shuffled-page layouts and cache cap) with a cache of 8k keys or more. Its run at f0db4f3 (notes/round17b/decode_wave_probe_f0db4f3_h200.csv) gave
v18's rule: one wave for dense caches, two for paged ones.

For each cell: the GPU time of `kernels._decode.decode_forward` at the rule's split count and at each power of
two from 1 up to four waves of programs, each the median of CUDA-graph replays
(`triton.testing.do_bench_cudagraph`), so that no host time is in them; and the bandwidth of those times (K
and V bytes read / time). One CSV row per (cell, split count); the `arm` column says `rule` for the rule's
count (a count may appear twice, once as the rule's) and `fixed` for the others; `waves` is programs x splits
over the SM count.
"""
import torch
import triton
from triton.testing import do_bench_cudagraph

from experiments import grid
from experiments.decode import _inputs, cache_bytes
from experiments.settings import ablation_settings, load_default
from kernels._decode import MAX_SPLITS, decode_block_sizes, decode_forward, launch_shape, sm_count

MIN_CACHE = 8192


def _time(q, k, v, seqlens, table, cell, splits):
    scale = cell.head_dim ** -0.5
    return do_bench_cudagraph(lambda: decode_forward(q, k, v, seqlens, None, None, table, None, scale, True,
                                                     (-1, -1), 0.0, splits, cell.seqlen_k), rep=40)


def main():
    device = torch.device("cuda")
    sms = sm_count(device)
    settings = ablation_settings(load_default(), grid.ABLATIONS)["decode"]
    cells = [cell for cell in grid.decode(settings)
             if cell.provider == "ours" and cell.dtype == "fp16" and cell.seqlen_k >= MIN_CACHE]
    print("batch,heads,kv_heads,seqlen_k,layout,arm,num_splits,waves,us,gbs", flush=True)
    for cell in cells:
        q, k, v, table = _inputs(cell, device)
        seqlens = torch.full((cell.batch,), cell.seqlen_k, dtype=torch.int32, device=device)
        kv_bytes = cache_bytes(cell.batch, cell.kv_heads, cell.seqlen_k, cell.head_dim, cell.dtype)
        *_, m_blocks, rule = launch_shape(cell.batch, cell.heads // cell.kv_heads, cell.kv_heads, cell.head_dim,
                                          cell.seqlen_k, device, 0, paged=table is not None)
        programs = cell.batch * cell.kv_heads * m_blocks
        counts = [("rule", rule)]
        splits = 1
        while programs * splits <= 4 * sms and splits <= MAX_SPLITS:
            counts.append(("fixed", splits))
            splits *= 2
        for arm, splits in counts:
            ms = _time(q, k, v, seqlens, table, cell, splits)
            print(f"{cell.batch},{cell.heads},{cell.kv_heads},{cell.seqlen_k},{cell.variant},{arm},{splits},"
                  f"{programs * splits / sms:.2f},{ms * 1e3:.2f},{kv_bytes / ms / 1e6:.0f}", flush=True)
        del q, k, v, table
        torch.cuda.empty_cache()
    head_dim = settings["head_dim"]
    print(f"# SMs: {sms}; block sizes (GQA 8:1, MHA): {decode_block_sizes(head_dim, 8, device)}, "
          f"{decode_block_sizes(head_dim, 1, device)}; triton {triton.__version__}")


if __name__ == "__main__":
    main()
