"""The decode cells under 70% of the copy bandwidth in 1e32447's archive, by split count.

    PYTHONPATH=. python3 notes/decode_small_probe.py > notes/decode_small_probe_h200.csv   (a CUDA GPU; ~30 s)

B8 H32/4 with an 8k cache reads at 55-58% of the copy bandwidth (54 µs for 134 MB, cuDNN 49-51 µs) and B1
H32/4 with a 128k cache at 75%. For those shapes (one new token, fp16, dense cache, head dim 128), the GPU time
of `flash_attn_with_kvcache` at each split count (0 = the rule's choice), of SDPA's cuDNN backend on the
same data, and of a device-to-device copy of the same bytes (its bandwidth: bytes read plus written), each as the median of CUDA-graph replays
(`triton.testing.do_bench_cudagraph`), so that no host time is in them. Prints one CSV row per arm.
It needs v17's flash_attn_with_kvcache (127c496), which reads nothing back for an int cache_seqlens; on
main while e53e423 reverts v17, the capture stops at that read-back (as it did at 360c663).
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench_cudagraph

from kernels import flash_attn_with_kvcache
from kernels._decode import choose_num_splits, decode_block_sizes, sm_count


def main():
    print("batch,heads,kv_heads,seqlen_k,arm,num_splits,us,gbs", flush=True)
    for batch, seqlen_k in ((8, 8192), (1, 131072), (8, 32768)):
        heads, kv_heads, d = 32, 4, 128
        q = torch.randn(batch, 1, heads, d, device="cuda", dtype=torch.float16)
        k_cache, v_cache = (torch.randn(batch, seqlen_k, kv_heads, d, device="cuda", dtype=torch.float16)
                            for _ in range(2))
        kv_bytes = 2 * k_cache.numel() * k_cache.element_size()
        block_m, block_n, _, _ = decode_block_sizes(d, heads // kv_heads, q.device)
        chosen = choose_num_splits(batch, kv_heads, 1, seqlen_k, q.device, block_n)
        for splits in (0, 4, 8, 16, 32, 64, 128):
            ms = do_bench_cudagraph(lambda: flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlen_k,
                                                                    num_splits=splits), rep=50)
            print(f"{batch},{heads},{kv_heads},{seqlen_k},ours,{splits or chosen},{ms * 1e3:.2f},"
                  f"{kv_bytes / ms / 1e6:.0f}", flush=True)
        qt, kt, vt = q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ms = do_bench_cudagraph(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), rep=50)
        print(f"{batch},{heads},{kv_heads},{seqlen_k},sdpa_cudnn,0,{ms * 1e3:.2f},{kv_bytes / ms / 1e6:.0f}", flush=True)
        src = torch.empty(kv_bytes // 2, device="cuda", dtype=torch.float16)
        dst = torch.empty_like(src)
        ms = do_bench_cudagraph(lambda: dst.copy_(src), rep=50)
        # as the pipeline's copy roof (analysis.decode.copy_bandwidth): bytes read plus written, over the time
        print(f"{batch},{heads},{kv_heads},{seqlen_k},copy_same_bytes,0,{ms * 1e3:.2f},{2 * kv_bytes / ms / 1e6:.0f}",
              flush=True)
    print(f"# SMs: {sm_count(torch.device('cuda'))}")


if __name__ == "__main__":
    main()
