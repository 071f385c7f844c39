"""The Hopper forward with two and with three consumer warpgroups (kernels/_hopper.py's `consumers`; 128 and 192
query rows a program), and dropout's forward+backward with the default's atomic dQ and with deterministic=True,
on one GPU, in one process:

    PYTHONPATH=. python3 notes/round30/consumers_probe.py > $OUT/consumers_probe.csv        (an sm_90 GPU; ~2 min)

Forward: head dim 64 (the three-consumer tile's target) and 128, fp16, batch x seqlen = 16k tokens, hidden 2048,
causal and full; the arms alternate, twice, and cuDNN's forward (SDPA) is timed beside them as the yardstick. The
three-consumer output must equal the two-consumer one within rounding (max |diff| is printed). Dropout: 0.1 at
head dim 128, forward+backward, ours default (atomic dQ), ours deterministic=True, SDPA flash with dropout.
Rows: part,label,head_dim,causal,seqlen,run,ms,note
"""
import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import flash_attention
from kernels._hopper import hopper_forward

torch.manual_seed(0)
print("part,label,head_dim,causal,seqlen,run,ms,note", flush=True)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=150)


for head_dim in (64, 128):
    heads = 2048 // head_dim
    for seqlen in (1024, 4096, 16384):
        batch = 16384 // seqlen
        q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
        for causal in (False, True):
            scale = head_dim ** -0.5
            two = hopper_forward(q, k, v, scale, causal, consumers=2)[0]
            note = ""
            if head_dim == 64:
                three = hopper_forward(q, k, v, scale, causal, consumers=3)[0]
                note = f"max_abs_diff={(three.float() - two.float()).abs().max().item():.3g}"
            arms = {"consumers2": lambda: hopper_forward(q, k, v, scale, causal, consumers=2)}
            if head_dim == 64:
                arms["consumers3"] = lambda: hopper_forward(q, k, v, scale, causal, consumers=3)

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            arms["cudnn"] = cudnn
            for run in range(2):
                for label, fn in arms.items():
                    print(f"fwd,{label},{head_dim},{int(causal)},{seqlen},{run},{bench(fn):.4f},{note}", flush=True)

head_dim, heads = 128, 16
for seqlen in (4096, 16384):
    batch = 16384 // seqlen
    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    do = torch.randn_like(q)
    for causal in (False, True):
        arms = {
            "dropout_default": lambda: torch.autograd.grad(flash_attention(q, k, v, causal=causal, dropout_p=0.1),
                                                           (q, k, v), do),
            "dropout_deterministic": lambda: torch.autograd.grad(
                flash_attention(q, k, v, causal=causal, dropout_p=0.1, deterministic=True), (q, k, v), do),
        }

        def sdpa_flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=0.1),
                                           (q, k, v), do)
        arms["sdpa_flash_dropout"] = sdpa_flash
        for run in range(2):
            for label, fn in arms.items():
                print(f"dropout_fwd_bwd,{label},{head_dim},{int(causal)},{seqlen},{run},{bench(fn):.4f},", flush=True)
