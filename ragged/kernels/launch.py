"""Low-overhead launching of @triton.jit kernels.

``kernel[grid](*args)`` re-binds every argument, rebuilds the specialization key and looks the
compiled kernel up on every call; at ViT sizes that host work is most of the dispatch floor.
``Launcher`` does it once per caller-supplied key, keeps the compiled kernel, and afterwards
calls the compiled kernel's launcher directly.

Contract with the caller, which makes a cached kernel valid for a later call with the same key
(the caller passes ``fast=False`` for a call that breaks it; that call takes the plain path):
  * int arguments are either in the kernel's ``do_not_specialize`` list, or multiples of 16
    below 2**31 (Triton then specializes them all the same way: "divisible by 16", i32);
  * the key determines the dtypes, every constexpr, num_warps and num_stages.
The launcher itself checks the rest: tensors 16-byte aligned (else the plain path), the
device current, no launch hooks installed.

Measured on the H100 (torch 2.11 + triton 3.6), host us per launch of the attention kernel,
one run of ``python -m scripts.kernel_bench --launch-paths`` (docs/kernel.md):
``kernel[grid](...)`` 26.0, ``compiled[grid](...)`` 12.3, ``CompiledKernel.run`` 7.8 (7.5
with int pointers), the 3.6 C entry point with int pointers 5.6, ``Launcher.launch`` 7.3.
Since then the direct launch is ``c_launch.direct`` (one ``cuLaunchKernel``: 6.0 against the
C entry point's 6.9 on a later lease) where the kernel allows it, else the C entry point.
Integer strides are left to Triton's specialization: with ``tl.multiple_of`` hints on
unspecialized strides instead, it emitted no 16-byte loads and ran 2.5x slower
(BS=64/0%: 142 vs 57 us).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction

from . import c_launch

try:  # Triton >= 3.4
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - older Triton
    _knobs = None

# The same stream/device queries Triton makes; None in torch builds without CUDA.
raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
current_device = getattr(torch._C, "_cuda_getDevice", None)
# With one visible GPU the current device is always the tensors' device: skip asking.
SINGLE_DEVICE = torch.cuda.device_count() == 1

# (grid_x, grid_y, grid_z, stream, *pointers, *scalars) -> None
DirectLaunch = Callable[..., None]
_runtime_knobs = _knobs.runtime if _knobs is not None else None


def hooks_active() -> bool:
    """True when a profiler (e.g. proton) installed launch hooks: it must see every launch.

    Triton >= 3.5 keeps an always-present, usually empty ``HookChain`` there.
    """
    if _runtime_knobs is None:
        return False
    hook = _runtime_knobs.launch_enter_hook
    return hook is not None and getattr(hook, "calls", True) != []


# Triton 3.6's C entry point, called without CudaLauncher.__call__ (which rebuilds two
# closures and asks two allocators for zero bytes of scratch on every launch): 5.6 vs 7.5 us
# host per launch on the H100. Its argument layout was checked on a GPU for 3.6 only; other
# versions go through CompiledKernel.run, whose convention 3.6 and 3.8 share.
_C_ENTRY_LAYOUT_36 = triton.__version__.split(".")[:2] == ["3", "6"]


def _direct_launch(compiled: Any, tail: tuple) -> DirectLaunch:
    """Call the compiled kernel's launcher with the arguments ``JITFunction.run`` would pass.

    ``CompiledKernel.run(grid_x, grid_y, grid_z, stream, function, packed_metadata,
    launch_metadata, enter_hook, exit_hook, *args)`` is the call both Triton 3.6 and 3.8
    end every launch with; no launch hooks (see ``hooks_active``).
    """
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    c_entry = getattr(run, "launch", None)
    if (
        _C_ENTRY_LAYOUT_36
        and c_entry is not None
        and not getattr(run, "global_scratch_size", 1)
        and not getattr(run, "profile_scratch_size", 1)
    ):
        coop, pdl = run.launch_cooperative_grid, run.launch_pdl

        def launch_c(gx, gy, gz, stream, *args):
            c_entry(gx, gy, gz, stream, function, coop, pdl, None, None, metadata, None, None,
                    None, *args, *tail)  # fmt: skip

        return launch_c

    def launch(gx, gy, gz, stream, *args):
        run(gx, gy, gz, stream, function, metadata, None, None, None, *args, *tail)

    return launch


class Launcher:
    """Launch one @triton.jit kernel, compiled once per key, with the least host work.

    The kernel's parameters are ``(*pointers, *scalars, *constexprs)``, in that order.
    ``launch(key, grid, tensors, scalars, constexprs, num_warps, num_stages, device_index,
    fast)``:
      key          hashable and cheap to hash (e.g. an object hashed by identity), see the
                   module docstring for what it must determine
      grid         (x, y, z) ints, each >= 1
      tensors      the pointer arguments, as tensors
      scalars      the int/float arguments
      constexprs   dict name -> value of the trailing constexpr parameters, in signature order
      device_index CUDA device of the tensors, or -1 on the CPU (the Triton interpreter)
      fast         False when an int breaks the contract: plain ``kernel[grid](...)``
      pdl          a programmatic dependent launch (sm_90 and later; never on the CPU): the
                   key must determine it too
      ctas         at most this many programs an SM (``occupy``; 0: as many as fit): set on
                   the compiled function, so the key's constexprs must give it a compiled
                   function of its own (one that no launch without the cap shares)

    The direct path passes data pointers as ints: for a tensor, Triton's launcher calls its
    ``data_ptr`` method and then ``cuPointerGetAttribute``, once per tensor and call.
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.interpreted = isinstance(fn, InterpretedFunction)
        self._cache: dict[Any, DirectLaunch] = {}
        self._capped: set[Any] = set()  # the keys whose compiled kernel ``occupy`` has seen

    def launch(
        self,
        key: Any,
        grid: tuple[int, int, int],
        tensors: Sequence[torch.Tensor],
        scalars: Sequence[Any],
        constexprs: dict[str, Any],
        num_warps: int,
        num_stages: int,
        device_index: int,
        fast: bool = True,
        pdl: bool = False,
        ctas: int = 0,
    ) -> None:
        if fast:
            direct = self._cache.get(key)
            if (
                direct is not None
                and (SINGLE_DEVICE or device_index == current_device())
                and not hooks_active()
            ):
                ptrs = [t.data_ptr() for t in tensors]
                bits = 0
                for p in ptrs:
                    bits |= p
                if bits & 15 == 0:  # Triton specialized the pointers as 16-byte aligned
                    direct(grid[0], grid[1], grid[2], raw_stream(device_index), *ptrs, *scalars)
                    return
                fast = False
        if self.interpreted or device_index < 0:
            self.fn[grid](
                *tensors, *scalars, **constexprs, num_warps=num_warps, num_stages=num_stages
            )
            return
        extra = {"launch_pdl": True} if pdl else {}  # a programmatic dependent launch
        with torch.cuda.device(device_index):
            if ctas and key not in self._capped:  # capped before its first launch
                occupy(self.fn.warmup(*tensors, *scalars, **constexprs, num_warps=num_warps,
                                      num_stages=num_stages, grid=(1,), **extra), ctas)  # fmt: skip
                self._capped.add(key)
            compiled = self.fn[grid](
                *tensors, *scalars, **constexprs, num_warps=num_warps, num_stages=num_stages,
                **extra,
            )  # fmt: skip
        self._keep(key, compiled, tensors, constexprs, fast)

    def prepare(
        self,
        key: Any,
        tensors: Sequence[torch.Tensor],
        scalars: Sequence[Any],
        constexprs: dict[str, Any],
        num_warps: int,
        num_stages: int,
        device_index: int,
        fast: bool = True,
        pdl: bool = False,
        ctas: int = 0,
    ) -> None:
        """Compile (or load from Triton's disk cache) what ``launch`` with these arguments
        would, launching nothing (``JITFunction.warmup``), and keep its direct launch for
        ``key`` as ``launch`` would: a later ``launch`` of ``key`` compiles nothing. Nothing
        on the CPU (the interpreter compiles nothing) or where ``key`` is kept already."""
        if self.interpreted or device_index < 0 or key in self._cache:
            return
        extra = {"launch_pdl": True} if pdl else {}
        with torch.cuda.device(device_index):
            compiled = self.fn.warmup(
                *tensors, *scalars, **constexprs, num_warps=num_warps, num_stages=num_stages,
                grid=(1,), **extra,
            )  # fmt: skip
            if ctas:
                occupy(compiled, ctas)
                self._capped.add(key)
        self._keep(key, compiled, tensors, constexprs, fast)

    def _keep(
        self,
        key: Any,
        compiled: Any,
        tensors: Sequence[torch.Tensor],
        constexprs: dict[str, Any],
        fast: bool,
    ) -> None:
        """Keep ``compiled``'s direct launch for ``key`` (the C launcher's, else Triton's own
        launcher called directly), where the launch may take it: ``fast`` and 16-byte aligned
        pointers, as Triton specialized them."""
        if (fast and isinstance(compiled, triton.compiler.CompiledKernel)
                and all(t.data_ptr() % 16 == 0 for t in tensors)):  # fmt: skip
            self._cache[key] = c_launch.direct(compiled) or _direct_launch(
                compiled, tuple(constexprs.values())
            )

    def forget(self) -> None:
        """Drop every key's direct launch (a later launch of a key takes the plain path once)."""
        self._cache.clear()
        self._capped.clear()

    def direct(self, key: Any) -> DirectLaunch | None:
        """The compiled kernel's direct launcher for ``key``, once a launch has cached it.
        Its caller keeps the contract above and checks what ``launch`` checks."""
        return self._cache.get(key)


def specializable(*ints: int) -> bool:
    """True when Triton specializes all these ints alike: multiples of 16 below 2**31."""
    bits = 0
    for v in ints:
        bits |= v
    return bits & 15 == 0 and bits < 2**31


# CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, and sm_90's carveouts (KB an SM)
_CARVEOUT_ATTRIBUTE = 9
CARVEOUTS_KB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
# the compiled kernels occupy has seen (not their CUfunction's address: a kernel compiled again
# after its module was unloaded may get the same one)
_occupied: weakref.WeakSet = weakref.WeakSet()


def carveout_percent(shared: int, ctas: int, total_kb: int) -> int:
    """The preferred shared-memory carveout, in percent of an SM's ``total_kb``, that holds
    ``ctas`` programs of ``shared`` bytes each (with the 1 KB a program the driver reserves)
    and no more: the smallest of ``CARVEOUTS_KB`` that holds them. The driver takes the
    smallest of them at or above the percent (measured: ``experiments.kernel_parts
    --carveout-report``; 44% of 228 KB gave 132 KB, 43% 100 KB), so the percent is rounded
    down. ValueError where none holds them, or where that one holds more."""
    program = shared + 1024
    fits = [kb for kb in CARVEOUTS_KB if ctas * program <= kb * 1024 and kb <= total_kb]
    if ctas < 1 or not fits or fits[0] * 1024 >= (ctas + 1) * program:
        raise ValueError(f"{ctas} programs of {shared} B an SM: no carveout of {total_kb} KB "
                         f"holds that many and no more")  # fmt: skip
    return 100 * fits[0] // total_kb


def set_carveout(function: int, percent: int) -> int:
    """The preferred shared-memory carveout of a ``CUfunction``, in percent of an SM's shared
    memory (-1: none) -> the CUresult of ``cuFuncSetAttribute`` (0: set)."""
    import ctypes

    return ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(
        ctypes.c_void_p(function), _CARVEOUT_ATTRIBUTE, percent)  # fmt: skip


def occupy(compiled: Any, ctas: int, total_kb: int | None = None) -> None:
    """At most ``ctas`` programs of ``compiled`` an SM: its preferred shared-memory carveout
    (``cuFuncSetAttribute`` on the compiled function, once; every launch of that function
    then runs so, the fast paths' too). The occupancy calculator does not count the
    preference; the SM does (docs/kernel.md, "Three programs an SM past two waves").
    ``total_kb``: an SM's shared memory (default: the current device's).

    Where no carveout holds ``ctas`` programs of this compilation and no more, it runs
    uncapped, silently: the 17-128 key loop takes 40 KB as the fast paths specialize it, but
    24 KB where a stride is not a multiple of 16 (head_dim 40, say), a kernel the cap was not
    measured for. Where the driver refuses the carveout, it warns once and runs uncapped."""
    if compiled in _occupied:
        return
    _occupied.add(compiled)
    if total_kb is None:
        total_kb = torch.cuda.get_device_properties(
            torch.cuda.current_device()).shared_memory_per_multiprocessor // 1024  # fmt: skip
    try:
        percent = carveout_percent(compiled.metadata.shared, ctas, total_kb)
    except ValueError:
        return
    # after a warmup the module is not loaded yet: reading ``run`` loads it, and ``function``
    function = compiled.function or (compiled.run and compiled.function)
    try:
        status = set_carveout(function, percent)
    except OSError as exc:  # no libcuda to ask: a hint, so the kernel runs uncapped
        status = exc
    if status != 0:
        warnings.warn(f"ragged: the carveout of {percent}% was refused ({status}); the kernel "
                      f"runs uncapped", RuntimeWarning, stacklevel=2)  # fmt: skip
