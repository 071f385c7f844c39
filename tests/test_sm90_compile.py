"""Every kernel compiles for the H100/H200 (sm_90), also on a machine without a GPU.

The interpreter checks what the kernels compute, never that Triton can compile them; inline PTX,
layouts and on-chip memory are the compiler's. tests/sm90_compile.py records the launches our
host code makes (each head dim class, every feature, atomic dQ, the probabilities and decoding
kernels, the fp8 forward at each head dim class, causal and not) and compiles each for sm_90 as
Triton would before a launch. It runs in a subprocess
because this session's kernels were imported under the interpreter. Head dim 256 must also stay
free of register spills in its default backward (the tiles were chosen for that).
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_kernel_compiles_for_sm90_and_head_dim_256_does_not_spill():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "sm90_compile.py"), "--max-spill",
                             "_attn_bwd_dkdv:256:0", "_attn_bwd_dq:256:0", "_attn_fwd:256:0"],
                            env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "_decode_combine" in result.stdout and "_attn_probs" in result.stdout
    assert "d128 fp8 causal" in result.stdout and "d64 fp8" in result.stdout
