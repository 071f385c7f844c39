"""Launch Triton kernels with less host time: cached compiled kernels are launched directly.

`kernel[grid](*args, **kwargs)` binds and specialises every argument, builds the cache key and
looks the compiled kernel up on every call. With the 20-70 arguments of our kernels that costs
more host time than the launch itself (notes/launch_profile_h200.txt: 32 us through the JIT for
40 arguments, 6 us for the compiled kernel's own launcher), and at short sequences the host's
time is the call's time.

`launch_kernel(kernel, grid, *args, **kwargs)` does what `kernel[grid](*args, **kwargs)` does.
The first call with a given *signature* goes through Triton's JIT (which compiles or finds the
kernel, and launches it); the compiled kernel is kept under that signature, and later calls with
the same signature hand their arguments straight to its launcher.

The signature is finer than Triton's specialisation key, so one signature never stands for two
compiled kernels: the type of every argument, every non-tensor argument by exact value (Triton
specialises an int by whether it is 1, divisible by 16 and fits 32 bits, and a constexpr by
value), every tensor by dtype and whether its address is 16-byte aligned (what Triton
specialises a pointer on), the launch options (num_warps, num_stages), the keyword names and the
device. A stride or length not seen before costs one JIT call, never a wrong kernel. The
kernel's `triton.heuristics` are computed on the JIT call and kept with the signature: they must
depend on non-tensor arguments only (ours read lengths, tile sizes and switches).

The JIT path is kept where the direct one would skip something: with `enabled` False, with a
Triton launch hook installed (profilers), and for anything that is not a JIT function (the
interpreter's kernels, the compile check's recorders).

The Hopper kernels take tensor descriptors, which hold their tensor's address, so a signature of
argument values would never repeat. `launch_keyed` serves them instead: the caller names a key
that fixes everything the compiled kernel is specialised on (for those kernels: the device, the
dtype, every shape and the compile-time constants), and later calls with that key hand the
arguments, with `HostDescriptor`s in place of the descriptors, straight to the compiled launcher.
Triton's launcher encodes a CUDA tensor map for every descriptor on every launch (its Python wrapper
`inner`, driver.py); `launch_keyed` keeps each encoded map under everything it encodes (the address,
shape, strides, padding, and the block, swizzle and element type of the compiled kernel's descriptor),
so a repeated call reuses it and hands the compiled kernel's own C launcher the arguments as Triton's
wrapper would have built them.
"""

from __future__ import annotations

from operator import itemgetter
from typing import NamedTuple

import torch
from triton import knobs
from triton.backends.nvidia import driver as nvidia_driver
from triton.runtime.autotuner import Heuristics
from triton.runtime.jit import JITFunction

# Signatures kept per process; a training loop uses a handful. Past the bound the cache is cleared
# and refilled (one JIT call per signature again), so a stream of new shapes cannot grow it.
MAX_SIGNATURES = 4096

enabled = True  # False: every launch through Triton's JIT (to time the difference)
maps_kept = True  # False: launch_keyed's direct launches go through Triton's wrapper, which encodes every map

_sites: dict = {}  # (kernel, argument types, keyword names) -> _Site, or None where the JIT must run
_compiled: dict = {}  # signature -> (CompiledKernel, values of the parameters the call leaves out)
_keyed: dict = {}  # (device, caller's key) -> (CompiledKernel, _MapLauncher or None), for launch_keyed
_tensor_maps: dict = {}  # what a map encodes -> [map, *shape, *strides], the launcher's arguments for it


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host ints (grids, tile counts): triton.cdiv is a constexpr function, whose wrapper
    costs ~1.5 us a call on the host."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The least power of two >= n, as triton.next_power_of_2 gives it (0 for 0), for host ints."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def _getter(indices: list[int]):
    """A function returning the items at `indices` of a sequence, always as a tuple."""
    if not indices:
        return lambda seq: ()
    if len(indices) == 1:
        index = indices[0]
        return lambda seq: (seq[index],)
    return itemgetter(*indices)


class _Site:
    """How the arguments of one kind of call (`kernel`, the argument types, the keyword names)
    map to the kernel's parameters. `full` below is args + the keyword values, in call order."""

    def __init__(self, kernel, types: tuple, n_args: int, keywords: tuple):
        heuristics, fn = [], kernel
        while isinstance(fn, Heuristics):
            heuristics.append(fn.values)
            fn = fn.fn
        self.fn, self.heuristics, self.n_args, self.keywords = fn, heuristics, n_args, keywords
        computed = {name for rules in heuristics for name in rules}
        given = {name: i for i, name in enumerate(fn.arg_names[:n_args])}
        given.update({name: n_args + i for i, name in enumerate(keywords)})
        self.left_out = [name for name in fn.arg_names if name not in given or name in computed]
        full_length = n_args + len(keywords)
        order = [full_length + self.left_out.index(name) if name in self.left_out else given[name]
                 for name in fn.arg_names]
        self.ordered = _getter(order)
        tensors = [i for i, t in enumerate(types) if issubclass(t, torch.Tensor)]
        self.tensors = _getter(tensors)
        self.scalars = _getter([i for i in range(full_length) if i not in tensors])
        self.defaults = {p.name: p.default for p in fn.params if p.has_default}

    def left_out_values(self, args: tuple, kwargs: dict) -> tuple:
        """The values Triton's run gives the parameters the call leaves out: heuristics, defaults."""
        bound = dict(zip(self.fn.arg_names, args))
        bound.update(kwargs)
        for rules in self.heuristics:  # as Heuristics.run computes them, outermost first
            for name, rule in rules.items():
                bound[name] = rule(bound)
        return tuple(bound[name] if name in bound else self.defaults[name] for name in self.left_out)


def _device_and_stream() -> tuple[int, int]:
    """The current CUDA device and its current stream's handle, as Triton's launcher takes it
    (the calls Triton's own driver makes, without torch.cuda's Python wrappers)."""
    device = torch._C._cuda_getDevice()
    return device, torch._C._cuda_getCurrentRawStream(device)


def _hooks_set() -> bool:
    """Whether a launch hook is installed (Triton 3.6 keeps them as HookChains, empty by default)."""
    return any(getattr(hook, "calls", hook) for hook in (knobs.runtime.launch_enter_hook,
                                                          knobs.runtime.launch_exit_hook))


def _site(kernel, types: tuple, n_args: int, keywords: tuple):
    key = (kernel, types, keywords)
    try:
        return _sites[key]
    except KeyError:
        pass
    fn = kernel
    while isinstance(fn, Heuristics):
        fn = fn.fn
    site = _sites[key] = _Site(kernel, types, n_args, keywords) if isinstance(fn, JITFunction) else None
    return site


def launch_kernel(kernel, grid: tuple, *args, **kwargs):
    """`kernel[grid](*args, **kwargs)`, launching a cached compiled kernel directly when one
    matches the call's signature (see the module docstring). Returns the compiled kernel."""
    if not enabled or not isinstance(kernel, (JITFunction, Heuristics)) or _hooks_set():
        return kernel[grid](*args, **kwargs)
    full = args + tuple(kwargs.values())
    types = tuple(map(type, full))
    keywords = tuple(kwargs)
    site = _site(kernel, types, len(args), keywords)
    if site is None:
        return kernel[grid](*args, **kwargs)
    device, stream = _device_and_stream()
    signature = (kernel, types, keywords, device, site.scalars(full),
                 tuple([(t.dtype, t.data_ptr() & 15 == 0) for t in site.tensors(full)]))
    entry = _compiled.get(signature)
    if entry is None:
        compiled = kernel[grid](*args, **kwargs)
        if len(_compiled) >= MAX_SIGNATURES:
            _compiled.clear()
        _compiled[signature] = (compiled, site.left_out_values(args, kwargs))
        return compiled
    compiled, left_out = entry
    grid_y = grid[1] if len(grid) > 1 else 1
    grid_z = grid[2] if len(grid) > 2 else 1
    compiled.run(grid[0], grid_y, grid_z, stream, compiled.function, compiled.packed_metadata, None, None, None,
                 *site.ordered(full + left_out))
    return compiled


class HostDescriptor(NamedTuple):
    """What a compiled kernel's launcher reads of a host tensor descriptor (Triton 3.6's
    `make_tensordesc_arg` in triton/backends/nvidia/driver.py: base, shape, strides, padding; the
    block shape and swizzle come from the compiled kernel). Cheaper to build than Triton's
    TensorDescriptor dataclasses, which validate their tensor and compute a layout on every call."""
    base: torch.Tensor
    shape: list
    strides: list
    padding: str = "zero"


def row_descriptor(t: torch.Tensor) -> HostDescriptor:
    """A dense (B, H, N, D) tensor as one (B*H*N, D) matrix, as the Hopper kernels address it."""
    b, h, n, d = t.shape
    return HostDescriptor(t, [b * h * n, d], [d, 1])


class _MapLauncher:
    """A compiled kernel's C launcher with its tensor descriptors' maps kept (`_tensor_maps`): the
    arguments Triton's wrapper (`wrap_handle_tensordesc`'s `inner` in Triton 3.6's driver.py) builds,
    without encoding a map already encoded. `for_kernel` gives None where that wrapper is not the one
    this reads (another Triton, a kernel without descriptors, scratch memory to allocate per launch):
    those launches go through `compiled.run`."""

    def __init__(self, compiled, raw_launch, indices, metas):
        run = compiled.run
        self.compiled, self.raw_launch = compiled, raw_launch
        self.flags = (run.launch_cooperative_grid, run.launch_pdl)
        self.indices = indices  # positions of the descriptors among the kernel's arguments
        self.metas = metas  # Triton's per-descriptor metadata, in the same order
        self.meta_keys = [(m["swizzle"], m["elem_size"], m["elem_type"], tuple(m["block_size"]), m["fp4_padded"])
                          for m in metas]

    @classmethod
    def for_kernel(cls, compiled):
        run = getattr(compiled, "run", None)
        wrapper = getattr(run, "launch", None)
        code = getattr(wrapper, "__code__", None)
        if (code is None or code.co_name != "inner" or wrapper.__closure__ is None
                or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1)):
            return None
        cells = dict(zip(code.co_freevars, (cell.cell_contents for cell in wrapper.__closure__)))
        if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= cells.keys():
            return None
        metas = list(cells["tensordesc_meta"])
        if not metas or any(meta is None for meta in metas):
            return None
        return cls(compiled, cells["launcher"], sorted(cells["tensordesc_indices"]), metas)

    def __call__(self, grid_x, grid_y, grid_z, stream, args):
        compiled = self.compiled
        final = [grid_x, grid_y, grid_z, stream, compiled.function, *self.flags, None, None,
                 compiled.packed_metadata, None, None, None]
        start = 0
        for index, meta, meta_key in zip(self.indices, self.metas, self.meta_keys):
            final.extend(args[start:index])
            desc = args[index]
            key = (desc.base.data_ptr(), tuple(desc.shape), tuple(desc.strides), desc.padding, meta_key)
            expanded = _tensor_maps.get(key)
            if expanded is None:
                if len(_tensor_maps) >= MAX_SIGNATURES:
                    _tensor_maps.clear()
                expanded = _tensor_maps[key] = nvidia_driver.make_tensordesc_arg(desc, meta)
            final.extend(expanded)
            start = index + 1
        final.extend(args[start:])
        self.raw_launch(*final)


def launch_keyed(key: tuple, grid: tuple, direct_args, jit_launch):
    """Launch the compiled kernel kept under (current device, `key`) with `direct_args()` (every
    parameter of the kernel in order, compile-time constants included, HostDescriptors for the
    descriptors), or, on the key's first call (and with `enabled` False or a launch hook set), call
    `jit_launch()`, which launches through Triton's JIT and returns the compiled kernel, and keep it.
    `key` must fix everything the compiled kernel is specialised on. The descriptors' tensor maps are
    kept too (`_MapLauncher`)."""
    device, stream = _device_and_stream()
    full_key = (device, key)
    entry = _keyed.get(full_key) if enabled and not _hooks_set() else None
    if entry is None:
        compiled = jit_launch()
        if enabled:
            if len(_keyed) >= MAX_SIGNATURES:
                _keyed.clear()
            _keyed[full_key] = (compiled, _MapLauncher.for_kernel(compiled) if maps_kept else None)
        return compiled
    compiled, map_launcher = entry
    grid_y = grid[1] if len(grid) > 1 else 1
    grid_z = grid[2] if len(grid) > 2 else 1
    if map_launcher is not None:
        map_launcher(grid[0], grid_y, grid_z, stream, direct_args())
    else:
        compiled.run(grid[0], grid_y, grid_z, stream, compiled.function, compiled.packed_metadata, None, None, None,
                     *direct_args())
    return compiled
