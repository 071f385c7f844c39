"""A first look at end-to-end training on the GPU: GPT3-1.3B at 2k context, a few steps per attention.

    python notes/training_smoke.py [--steps 5] [--warmup 3] [--batch 8]

Not the `training` ablation (which the pipeline will run, repeated, with every size and context):
a check that experiments/training.py runs on the GPU, with a rough step time per provider, printed
as a table. Each provider is timed eagerly; `ours` also under torch.compile.
"""
import argparse

import torch

from experiments.gpt import preset
from experiments.training import time_training

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()
config = preset("gpt3_1_3b", seqlen=2048)
runs = [(name, False) for name in ("ours", "sdpa_flash", "sdpa_cudnn", "standard", "ours_fa1")] + [("ours", True)]
print(f"{'attention':12s} {'compile':8s} {'status':7s} {'step ms':>9s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'peak GiB':>9s}",
      flush=True)
for name, compiled in runs:
    result = time_training(config, name, args.batch, 2048, args.steps, args.warmup, torch.device("cuda"),
                           compile=compiled)
    step = result.get("step_ms") or float("nan")
    print(f"{name:12s} {str(compiled):8s} {result['status']:7s} {step:9.1f} {result.get('tokens_per_s') or 0:10.0f} "
          f"{result.get('tflops') or 0:8.1f} {(result.get('peak_mem_bytes') or 0) / 2**30:9.1f}", flush=True)
