"""Decoding's split count by waves of programs, on the decode ablation's long-cache cells, dense and paged.

    PYTHONPATH=. python3 notes/decode_wave_probe.py > notes/<dir>/decode_wave_probe_h200.csv   (a CUDA GPU; ~2 min)

`notes/decode_small_probe.py` found, on three dense cells, the fastest split count to be the largest power of
two whose programs (batch x KV heads x query blocks x splits) fit in one wave of the SMs, where
`kernels._decode.choose_num_splits` aims at two waves. This probe asks the same of every cell of the decode
ablation with a cache of 8k keys or more (batch 1, 8, 64; caches 8k, 32k, 128k; GQA 8:1 and MHA; dense, and
paged with pages of 256 and 16 keys shuffled as in experiments/decode.py; fp16, head dim 128, causal, one new
token), within the ablation's 40 GB cap on the cache.

For each cell: the GPU time of `kernels._decode.decode_forward` at the rule's split count and at each power of
two from 1 up to four waves of programs, each the median of CUDA-graph replays
(`triton.testing.do_bench_cudagraph`), so that no host time is in them; and the bandwidth of those times (K
and V bytes read / time). One CSV row per (cell, split count); the `arm` column says `rule` for the rule's
count (a count may appear twice, once as the rule's) and `fixed` for the others; `waves` is programs x splits
over the SM count.
"""
import types

import torch
import triton
from triton.testing import do_bench_cudagraph

from experiments.decode import _inputs, cache_bytes, layout_variant
from kernels._decode import decode_block_sizes, decode_forward, launch_shape, sm_count

MAX_CACHE_BYTES = 40e9
HEAD_DIM = 128


def _time(q, k, v, seqlens, table, seqlen_k, splits):
    scale = HEAD_DIM ** -0.5
    return do_bench_cudagraph(lambda: decode_forward(q, k, v, seqlens, None, None, table, None, scale, True,
                                                     (-1, -1), 0.0, splits, seqlen_k), rep=40)


def main():
    device = torch.device("cuda")
    sms = sm_count(device)
    print("batch,heads,kv_heads,seqlen_k,layout,arm,num_splits,waves,us,gbs", flush=True)
    for batch in (1, 8, 64):
        for seqlen_k in (8192, 32768, 131072):
            for heads, kv_heads in ((32, 4), (32, 32)):
                if cache_bytes(batch, kv_heads, seqlen_k, HEAD_DIM, "fp16") > MAX_CACHE_BYTES:
                    continue
                for page_size in (None, 256, 16):
                    variant = layout_variant(page_size)
                    cell = types.SimpleNamespace(batch=batch, heads=heads, kv_heads=kv_heads, seqlen_k=seqlen_k,
                                                 head_dim=HEAD_DIM, dtype="fp16", variant=variant)
                    q, k, v, table = _inputs(cell, device)
                    seqlens = torch.full((batch,), seqlen_k, dtype=torch.int32, device=device)
                    kv_bytes = cache_bytes(batch, kv_heads, seqlen_k, HEAD_DIM, "fp16")
                    *_, m_blocks, rule = launch_shape(batch, heads // kv_heads, kv_heads, HEAD_DIM, seqlen_k,
                                                      device, 0)
                    programs = batch * kv_heads * m_blocks
                    counts = [("rule", rule)]
                    splits = 1
                    while programs * splits <= 4 * sms and splits <= 128:
                        counts.append(("fixed", splits))
                        splits *= 2
                    for arm, splits in counts:
                        ms = _time(q, k, v, seqlens, table, seqlen_k, splits)
                        print(f"{batch},{heads},{kv_heads},{seqlen_k},{variant},{arm},{splits},"
                              f"{programs * splits / sms:.2f},{ms * 1e3:.2f},{kv_bytes / ms / 1e6:.0f}", flush=True)
                    del q, k, v, table
                    torch.cuda.empty_cache()
    print(f"# SMs: {sms}; block sizes (GQA 8:1, MHA): {decode_block_sizes(HEAD_DIM, 8, device)}, "
          f"{decode_block_sizes(HEAD_DIM, 1, device)}; triton {triton.__version__}")


if __name__ == "__main__":
    main()
