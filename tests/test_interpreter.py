"""The interpreter fixes in kernels/_interpreter.py: bf16 and e4m3 casts round as the GPU does, bf16 dots are exact.

On a CUDA host the kernels are compiled and these check the GPU itself, which must agree too.
"""
import pytest
import torch
import triton
import triton.language as tl

import kernels  # noqa: F401  (installs the interpreter fixes where the interpreter is on)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _to_bf16(x_ptr, y_ptr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets).to(tl.bfloat16))


@triton.jit
def _bf16_dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    rows, cols = tl.arange(0, N)[:, None], tl.arange(0, N)[None, :]
    a = tl.load(a_ptr + rows * N + cols)
    b = tl.load(b_ptr + rows * N + cols)
    tl.store(c_ptr + rows * N + cols, tl.dot(a, b))


def test_float32_to_bf16_rounds_to_nearest_even_like_torch():
    x = torch.randn(1024, device=DEVICE, dtype=torch.float32)
    x[:4] = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8 + 2**-20), float("nan")])  # ties and a NaN
    y = torch.empty(1024, device=DEVICE, dtype=torch.bfloat16)
    _to_bf16[(1,)](x, y, N=1024)
    expected = x.to(torch.bfloat16)
    assert torch.equal(y[3:4].isnan(), torch.tensor([True], device=DEVICE))
    assert torch.equal(y[:3], expected[:3]) and torch.equal(y[4:], expected[4:])


def test_bf16_dot_matches_float32_product_of_the_same_values():
    a = torch.randn(32, 32, device=DEVICE).to(torch.bfloat16)
    b = torch.randn(32, 32, device=DEVICE).to(torch.bfloat16)
    c = torch.empty(32, 32, device=DEVICE, dtype=torch.float32)
    _bf16_dot[(1,)](a, b, c, N=32)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


@triton.jit
def _to_e4m3(x_ptr, y_ptr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets).to(tl.float8e4nv))


def test_float32_to_e4m3_rounds_to_nearest_even_like_torch():
    """The fp8 forward rounds P (in [0, 1]) to e4m3; normal and subnormal values, and ties."""
    x = torch.rand(4096, device=DEVICE) * 2.0 ** torch.randint(-12, 1, (4096,), device=DEVICE).float()
    x[:4] = torch.tensor([1.0625, 1.1875, 2.0**-7 + 2.0**-10, -0.3])  # ties to even (up and down), subnormal
    y = torch.empty(4096, device=DEVICE, dtype=torch.float8_e4m3fn)
    _to_e4m3[(1,)](x, y, N=4096)
    assert torch.equal(y.view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8))


KERNEL_MODULES = ["kernels._forward", "kernels._backward", "kernels._features", "kernels._fa1", "kernels._decode"]


def _python_function(obj):
    """The Python function under a @triton.jit (compiled or interpreted) and any @triton.heuristics."""
    while hasattr(obj, "fn") and type(obj).__name__ in ("JITFunction", "InterpretedFunction", "Heuristics",
                                                         "Autotuner"):
        obj = obj.fn
    return obj


@pytest.mark.parametrize("module_name", KERNEL_MODULES)
def test_jit_code_reads_only_constexpr_globals(module_name):
    """Compiled Triton refuses a kernel that reads a plain module global (a float constant, say);
    the interpreter does not, so a CPU run alone would never notice. Every global a kernel reads
    must be a tl.constexpr, another kernel, a module or a callable."""
    import ast
    import builtins
    import importlib
    import inspect
    import textwrap

    module = importlib.import_module(module_name)
    offenders = []
    for name, obj in vars(module).items():
        if type(obj).__name__ not in ("JITFunction", "InterpretedFunction", "Heuristics", "Autotuner"):
            continue
        function = _python_function(obj)
        if getattr(function, "__module__", None) != module_name:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        bound = {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
        bound |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
                if node.id in function.__globals__:
                    value = function.__globals__[node.id]
                elif hasattr(builtins, node.id):
                    continue
                else:
                    offenders.append(f"{name}: {node.id} is not defined")
                    continue
                if not (isinstance(value, tl.constexpr) or callable(value) or inspect.ismodule(value)):
                    offenders.append(f"{name}: {node.id} ({type(value).__name__})")
    assert not offenders, f"{module_name}: kernels read non-constexpr globals: {offenders}"
