"""kernels._launch: cached compiled kernels launched directly, never the wrong one.

On the CPU the direct path is exercised with a stand-in for Triton's JIT launch (which needs a
GPU): a real `triton.jit` function under `triton.heuristics`, whose `kernel[grid](...)` returns
a fake compiled kernel that records what its launcher receives. The tests check that the
launcher gets every parameter in the kernel's order (heuristics and defaults included), and that
any change Triton would specialise on (an int's value, a pointer's alignment or dtype, a
constexpr, the launch options, an argument's type) goes back through the JIT. On a GPU, ours'
results with direct launches equal those through the JIT bit for bit, misaligned inputs included.
"""
import pytest
import torch
import triton
import triton.language as tl
from triton.backends.nvidia import driver as nvidia_driver
from triton.runtime.autotuner import Heuristics
from triton.runtime.jit import JITFunction, KernelInterface

import kernels._launch as launch_module
from kernels import attention_reference, flash_attention
from kernels._launch import launch_kernel

HAS_CUDA = torch.cuda.is_available()


def _toy(X, Y, n, scale, stride, FLAG: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr, LAST: tl.constexpr = 7):
    pass


class _FakeCompiled:
    function, packed_metadata = "function", "metadata"

    def __init__(self, log):
        self.log = log

    def run(self, *args):
        self.log.append(("direct", args))


@pytest.fixture
def fake_jit(monkeypatch):
    """A heuristics-wrapped JITFunction whose JIT launch is recorded, on a pretend CUDA device."""
    log = []
    kernel = Heuristics(JITFunction(_toy), ["X", "Y", "n", "scale", "stride", "FLAG", "BLOCK", "EVEN", "LAST"],
                        {"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})

    def getitem(self, grid):
        def jit_launch(*args, **kwargs):
            log.append(("jit", args, kwargs))
            return _FakeCompiled(log)
        return jit_launch

    monkeypatch.setattr(KernelInterface, "__getitem__", getitem)
    monkeypatch.setattr(launch_module, "_device_and_stream", lambda: (0, 1234))
    monkeypatch.setattr(launch_module, "_compiled", {})
    monkeypatch.setattr(launch_module, "_sites", {})
    monkeypatch.setattr(launch_module, "enabled", True)
    return kernel, log


def _kinds(log):
    return [entry[0] for entry in log]


def test_a_repeated_call_launches_directly_with_every_parameter_in_order(fake_jit):
    kernel, log = fake_jit
    x, y = torch.zeros(64), torch.zeros(64, dtype=torch.float16)
    for _ in range(3):
        launch_kernel(kernel, (5, 2), x, y, 64, 0.5, 32, FLAG=True, BLOCK=16, num_warps=4)
    assert _kinds(log) == ["jit", "direct", "direct"]
    args = log[1][1]
    assert args[:9] == (5, 2, 1, 1234, "function", "metadata", None, None, None)
    # X, Y, n, scale, stride, FLAG, BLOCK, EVEN (the heuristic's value), LAST (its default)
    assert args[9:11] == (x, y) and args[11:] == (64, 0.5, 32, True, 16, True, 7)


@pytest.mark.parametrize("change", ["int_value", "int_to_one", "alignment", "dtype", "constexpr", "option",
                                    "type", "keyword_order", "heuristic_input"])
def test_whatever_triton_specialises_on_goes_back_through_the_jit(fake_jit, change):
    kernel, log = fake_jit
    x, y = torch.zeros(64), torch.zeros(64, dtype=torch.float16)
    call = dict(args=[x, y, 64, 0.5, 32], kwargs=dict(FLAG=True, BLOCK=16, num_warps=4))
    launch_kernel(kernel, (1,), *call["args"], **call["kwargs"])
    launch_kernel(kernel, (1,), *call["args"], **call["kwargs"])
    args, kwargs = list(call["args"]), dict(call["kwargs"])
    if change == "int_value":
        args[4] = 48  # still divisible by 16: Triton's key would not change, ours does (finer is safe)
    elif change == "int_to_one":
        args[4] = 1
    elif change == "alignment":
        args[1] = torch.zeros(65, dtype=torch.float16)[1:]  # address 2 bytes past an aligned one
    elif change == "dtype":
        args[0] = torch.zeros(64, dtype=torch.float64)
    elif change == "constexpr":
        kwargs["FLAG"] = False
    elif change == "option":
        kwargs["num_warps"] = 8
    elif change == "type":
        args[2] = 64.0  # equal to 64 as a Python value, a float to Triton
    elif change == "keyword_order":
        kwargs = dict(BLOCK=16, FLAG=True, num_warps=4)
    elif change == "heuristic_input":
        args[2] = 72  # EVEN flips
    launch_kernel(kernel, (1,), *args, **kwargs)
    assert _kinds(log) == ["jit", "direct", "jit"]
    launch_kernel(kernel, (1,), *args, **kwargs)
    assert _kinds(log) == ["jit", "direct", "jit", "direct"]
    if change == "heuristic_input":
        assert log[-1][1][9 + 7] is False  # EVEN recomputed for the new signature


def test_launch_hooks_and_the_switch_keep_the_jit_path(fake_jit, monkeypatch):
    kernel, log = fake_jit
    x, y = torch.zeros(64), torch.zeros(64, dtype=torch.float16)

    def call():
        launch_kernel(kernel, (1,), x, y, 64, 0.5, 32, FLAG=True, BLOCK=16)

    call()
    monkeypatch.setattr(launch_module, "enabled", False)
    call()
    monkeypatch.setattr(launch_module, "enabled", True)
    hook = triton.knobs.runtime.launch_enter_hook
    hook.add(print)
    try:
        call()
    finally:
        hook.remove(print)
    call()
    assert _kinds(log) == ["jit", "jit", "jit", "direct"]


def test_the_signature_cache_is_bounded(fake_jit, monkeypatch):
    kernel, log = fake_jit
    monkeypatch.setattr(launch_module, "MAX_SIGNATURES", 4)
    x, y = torch.zeros(64), torch.zeros(64, dtype=torch.float16)
    for n in range(10):
        launch_kernel(kernel, (1,), x, y, n, 0.5, 32, FLAG=True, BLOCK=16)
    assert len(launch_module._compiled) <= 4
    assert _kinds(log) == ["jit"] * 10


def test_keyed_launches_go_through_the_jit_once_per_key_and_device(fake_jit, monkeypatch):
    """launch_keyed (the Hopper kernels'): the JIT on a key's first call, then the kept kernel gets the
    caller's arguments directly; a new key, another device, `enabled` False or a hook go to the JIT."""
    _, log = fake_jit
    monkeypatch.setattr(launch_module, "_keyed", {})

    def call(key, marker):
        def jit_launch():
            log.append(("jit", marker))
            return _FakeCompiled(log)
        return launch_module.launch_keyed(key, (3, 2), lambda: ("arg", marker), jit_launch)

    call(("a", 1), 0)
    call(("a", 1), 1)
    call(("a", 2), 2)
    call(("a", 2), 3)
    monkeypatch.setattr(launch_module, "_device_and_stream", lambda: (1, 99))
    call(("a", 1), 4)
    monkeypatch.setattr(launch_module, "enabled", False)
    call(("a", 1), 5)
    monkeypatch.setattr(launch_module, "enabled", True)
    hook = triton.knobs.runtime.launch_enter_hook
    hook.add(print)
    try:
        call(("a", 1), 6)
    finally:
        hook.remove(print)
    call(("a", 1), 7)
    assert _kinds(log) == ["jit", "direct", "jit", "direct", "jit", "jit", "jit", "direct"]
    assert log[1][1] == (3, 2, 1, 1234, "function", "metadata", None, None, None, "arg", 1)
    assert log[-1][1][3] == 99 and log[-1][1][-1] == 7


class _FakeRun:
    """A compiled kernel's `run` as Triton 3.6's CudaLauncher holds it: `launch` is the driver's own
    descriptor wrapper (`wrap_handle_tensordesc`) around a C launcher, here one that records its arguments."""
    launch_cooperative_grid, launch_pdl, global_scratch_size, profile_scratch_size = False, False, 0, 0
    num_ctas, global_scratch_align, profile_scratch_align = 1, 1, 1
    __call__ = nvidia_driver.CudaLauncher.__call__  # the driver's own path from compiled.run to launch

    def __init__(self, log, signature, metas):
        self.launch = nvidia_driver.wrap_handle_tensordesc(lambda *args: log.append(("raw", args)), signature, metas)


def test_keyed_launches_keep_tensor_maps_and_pass_what_the_driver_wrapper_would(fake_jit, monkeypatch):
    """The direct launches of launch_keyed give the C launcher the arguments Triton's wrapper builds,
    encoding a tensor map only for what no kept map encodes: a new address, shape, stride or padding
    gets its own (and maps_kept False goes back to the wrapper, which encodes on every launch)."""
    _, log = fake_jit
    monkeypatch.setattr(launch_module, "_keyed", {})
    monkeypatch.setattr(launch_module, "_tensor_maps", {})
    encoded = []

    def make_tensordesc_arg(arg, meta):  # the driver's encoding, which needs a GPU, as a recorded stand-in
        encoded.append((arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides), arg.padding, meta["swizzle"]))
        return [("map", len(encoded)), *arg.shape, *arg.strides]

    monkeypatch.setattr(nvidia_driver, "make_tensordesc_arg", make_tensordesc_arg)
    signature = {"a": "tensordesc<fp16[64, 32]>", "n": "i32", "b": "tensordesc<fp16[128, 32]>", "X": "*fp32",
                 "C": "constexpr"}
    metas = [dict(swizzle=3, elem_size=2, elem_type=6, block_size=[64, 32], fp4_padded=False),
             dict(swizzle=2, elem_size=2, elem_type=6, block_size=[128, 32], fp4_padded=False)]
    compiled = _FakeCompiled(log)
    compiled.run = _FakeRun(log, signature, metas)
    x, y, out = torch.zeros(64, 32), torch.zeros(128, 32), torch.zeros(4)

    def call(a, b, n=5):
        launch_module.launch_keyed(("k",), (3, 2), lambda: (a, n, b, out, 7), lambda: compiled)

    def expected(a, b, map_a, map_b, n=5):
        return (3, 2, 1, 1234, "function", False, False, None, None, "metadata", None, None, None,
                ("map", map_a), *a.shape, *a.strides, n, ("map", map_b), *b.shape, *b.strides, out, 7)

    da, db = launch_module.row_descriptor(x.view(1, 1, 64, 32)), launch_module.row_descriptor(y.view(1, 1, 128, 32))
    call(da, db)  # the JIT's launch: nothing kept is used
    assert log == [] and encoded == []
    call(da, db)
    call(da, db, n=6)
    assert encoded == [(x.data_ptr(), (64, 32), (32, 1), "zero", 3), (y.data_ptr(), (128, 32), (32, 1), "zero", 2)]
    assert log[0] == ("raw", expected(da, db, 1, 2)) and log[1] == ("raw", expected(da, db, 1, 2, n=6))
    # the same address with another shape, another stride, another padding; another address
    for desc in (launch_module.HostDescriptor(x, [32, 32], [32, 1]), launch_module.HostDescriptor(x, [32, 32], [64, 1]),
                 launch_module.HostDescriptor(x, [32, 32], [64, 1], "nan"), launch_module.row_descriptor(y.view(1, 1, 128, 32))):
        before = len(encoded)
        call(desc, db)
        assert len(encoded) == before + 1 and log[-1] == ("raw", expected(desc, db, before + 1, 2))
    monkeypatch.setattr(launch_module, "_keyed", {})
    monkeypatch.setattr(launch_module, "maps_kept", False)
    call(da, db)
    call(da, db)
    call(da, db)
    assert len(encoded) == 10  # Triton's wrapper encodes both maps on each of the two direct launches
    assert log[-1] == ("raw", expected(da, db, 9, 10))  # and builds the arguments the kept maps gave


def test_row_descriptor_is_the_rows_matrix():
    t = torch.zeros(2, 3, 5, 8)
    d = launch_module.row_descriptor(t)
    assert d.base is t and d.shape == [30, 8] and d.strides == [8, 1] and d.padding == "zero"


@pytest.mark.skipif(not (HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)),
                    reason="the Hopper kernels need a compute capability 9.0 GPU")
@pytest.mark.parametrize("head_dim, causal", [(128, True), (128, False), (64, True)])
def test_hopper_kernels_with_direct_launches_equal_the_jit_path(head_dim, causal, monkeypatch):
    """The Hopper forward bit for bit and the Hopper backward's dK and dV bit for bit (its dQ additions
    land in any order: within the tests' rule), on GQA with ragged lengths, with fresh tensors on every
    call, and a d_out 2 bytes past a 16-byte boundary."""
    from test_kernels import assert_close_to_reference

    shape_q, shape_kv = (2, 4, 333, head_dim), (2, 2, 517, head_dim)

    def run(seed):
        torch.manual_seed(seed)
        q = torch.randn(shape_q, device="cuda", dtype=torch.float16, requires_grad=True)
        k, v = (torch.randn(shape_kv, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(2))
        d_out = torch.randn(q.numel() + 1, device="cuda", dtype=torch.float16)[1:].view(shape_q)
        out = flash_attention(q, k, v, causal=causal, hopper=True, hopper_backward=True)
        return (out, *torch.autograd.grad(out, (q, k, v), d_out)), (q, k, v, d_out)

    monkeypatch.setattr(launch_module, "enabled", False)
    through_jit, inputs = run(1)
    monkeypatch.setattr(launch_module, "enabled", True)
    for _ in range(3):  # the first call may compile; the later ones launch directly
        direct, _ = run(1)
        out, dq, dk, dv = direct
        assert torch.equal(out, through_jit[0]) and torch.equal(dk, through_jit[2]) and torch.equal(dv, through_jit[3])
    q, k, v, d_out = inputs
    ref = attention_reference(q, k, v, causal=causal)[0]
    low = attention_reference(q, k, v, causal=causal, upcast=False)[0]
    assert_close_to_reference("dq", dq, torch.autograd.grad(low, q, d_out)[0],
                              torch.autograd.grad(ref, q, d_out.double())[0])


@pytest.mark.skipif(not HAS_CUDA, reason="direct launches need a GPU")
@pytest.mark.parametrize("misaligned", [False, True])
def test_ours_with_direct_launches_equals_the_jit_path_bit_for_bit(misaligned, monkeypatch):
    torch.manual_seed(0)
    shape = (2, 3, 77, 64)

    def inputs():
        if misaligned:  # views whose addresses are 2 bytes past a 16-byte boundary
            return [torch.randn(2 * 3 * 77 * 64 + 1, device="cuda", dtype=torch.float16)[1:].view(shape)
                    .requires_grad_() for _ in range(3)]
        return [torch.randn(shape, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3)]

    q, k, v = inputs()
    d_out = torch.randn(shape, device="cuda", dtype=torch.float16)

    def run():
        out = flash_attention(q, k, v, causal=True, deterministic=True)  # the portable kernels' launches
        return (out, *torch.autograd.grad(out, (q, k, v), d_out))

    monkeypatch.setattr(launch_module, "enabled", False)
    through_jit = run()
    monkeypatch.setattr(launch_module, "enabled", True)
    first, second = run(), run()  # the second is launched directly
    for a, b, c in zip(through_jit, first, second):
        assert torch.equal(a, b) and torch.equal(a, c)
    ref, _ = attention_reference(q, k, v, causal=True)
    torch_error = (attention_reference(q, k, v, causal=True, upcast=False)[0].double() - ref).abs().max()
    assert (second[0].double() - ref).abs().max() <= 2 * torch_error + 1e-5  # flash-attn's rule


@triton.jit
def _copy_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)


@pytest.mark.skipif(not HAS_CUDA, reason="direct launches need a GPU")
def test_a_host_tensor_after_direct_launches_is_refused_not_read_as_a_device_address():
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    for _ in range(2):  # the second is launched directly
        launch_kernel(_copy_kernel, (4,), x, y, 1000, BLOCK=256)
    assert torch.equal(x, y)
    # same dtype and alignment, on the host: the direct launch's signature matches, and the launcher refuses it
    with pytest.raises(ValueError, match="cpu tensor"):
        launch_kernel(_copy_kernel, (4,), x.cpu(), y, 1000, BLOCK=256)
