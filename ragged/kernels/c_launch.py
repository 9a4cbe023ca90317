"""A minimal C launcher for a compiled Triton kernel: its parameters as Python ints and floats
in, one ``cuLaunchKernel`` out.

Triton's own launcher entry point parses a format string over every argument and the kernel's
metadata tuple, and launches through ``cuLaunchKernelEx`` with launch attributes; for a kernel
that needs none of that (one CTA per cluster, no cooperative grid, no scratch memory; a
programmatic dependent launch goes to ``cuLaunchKernelEx`` with its one attribute) this one
takes the parameters as a vectorcall (``METH_FASTCALL``) and calls ``cuLaunchKernel``.
Measured on the H100 (torch 2.11, triton 3.6), host µs per launch of the attention kernel in
a hot loop: Triton's C entry point 6.7, this 5.2 (5.2 with
the GIL held during the launch: it is released, as Triton does).

The module is built once per parameter signature with Triton's own C build
(``triton.runtime.build.compile_module_from_src``, cached on disk by Triton: 0.3 s the first
time), with the CUDA header and ``libcuda`` Triton's NVIDIA backend uses. Where that is not
possible (another backend, a signature with a type not listed in ``_C_TYPES``), ``direct``
returns None and the caller keeps Triton's entry point.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

# Triton parameter type -> (C type, the Python object read as: C type and function, the
# values out of the parameter's range, or "").
_C_TYPES = {
    "i32": ("int32_t", "long long", "PyLong_AsLongLong", "v < INT32_MIN || v > INT32_MAX"),
    "i64": ("int64_t", "long long", "PyLong_AsLongLong", ""),
    "u32": ("uint32_t", "unsigned long long", "PyLong_AsUnsignedLongLong", "v > UINT32_MAX"),
    "u64": ("uint64_t", "unsigned long long", "PyLong_AsUnsignedLongLong", ""),
    "fp32": ("float", "double", "PyFloat_AsDouble", ""),
    "fp64": ("double", "double", "PyFloat_AsDouble", ""),
}
# Fixed arguments before the kernel's: function handle, threads per block, dynamic shared
# memory bytes (bound by functools.partial), then grid x, y, z and the stream.
_HEAD = 7


def param_types(signature: dict[str, str]) -> tuple[str, ...] | None:
    """The kernel's runtime parameter types, from ``compiled.src.signature`` (name -> Triton
    type, constexprs marked ``"constexpr"``), or None when one has no C type here."""
    types = tuple(t for t in signature.values() if t != "constexpr")
    if any(not t.startswith("*") and t not in _C_TYPES for t in types):
        return None
    return types


def module_name(types: Sequence[str], pdl: bool = False) -> str:
    what = ",".join(types) + (",pdl" if pdl else "")
    return "ragged_launch_" + hashlib.sha256(what.encode()).hexdigest()[:16]


def launch_source(types: Sequence[str], pdl: bool = False) -> str:
    """C source of a Python module ``module_name(types)`` with one function
    ``launch(function, block_x, shared, grid_x, grid_y, grid_z, stream, *params)``: params in
    ``types`` order, pointers as ints; two null scratch pointers follow them, as Triton passes
    its global and profile scratch (a kernel that declares fewer reads fewer). ``pdl``: launched
    through ``cuLaunchKernelEx`` with the programmatic-stream-serialisation attribute (a
    programmatic dependent launch, as Triton's ``launch_pdl=True``)."""
    lines = []
    for i, t in enumerate(types):
        arg = f"args[{_HEAD + i}]"
        if t.startswith("*"):
            lines.append(f"  CUdeviceptr p{i} = (CUdeviceptr)PyLong_AsUnsignedLongLong({arg});")
            continue
        ctype, read_type, read, out_of_range = _C_TYPES[t]
        lines.append(f"  {ctype} p{i};")
        lines.append(f"  {{ {read_type} v = {read}({arg});")
        if out_of_range:
            lines.append(f"    if (({out_of_range}) && !PyErr_Occurred()) return range_error({i});")
        lines.append(f"    p{i} = ({ctype})v; }}")
    params = ", ".join([f"&p{i}" for i in range(len(types))] + ["&scratch", "&scratch"])
    name = module_name(types, pdl)
    body = "\n".join(lines)
    entry = "cuLaunchKernelEx" if pdl else "cuLaunchKernel"
    if pdl:
        call = """CUlaunchAttribute attr;
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config = {grid_x, grid_y, grid_z, block_x, 1, 1, shared, stream, &attr, 1};
  err = cuLaunchKernelEx(&config, function, params, NULL);"""
    else:
        call = """err = cuLaunchKernel(function, grid_x, grid_y, grid_z, block_x, 1, 1, shared,
                       stream, params, NULL);"""
    return f"""
#include "cuda.h"
#include <stdint.h>
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *range_error(int i) {{
  PyErr_Format(PyExc_OverflowError, "kernel parameter %d is out of range for its type", i);
  return NULL;
}}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {{
  if (nargs != {_HEAD + len(types)}) {{
    PyErr_Format(PyExc_TypeError, "launch takes {_HEAD + len(types)} arguments, got %zd", nargs);
    return NULL;
  }}
  CUfunction function = (CUfunction)PyLong_AsUnsignedLongLong(args[0]);
  unsigned block_x = (unsigned)PyLong_AsUnsignedLong(args[1]);
  unsigned shared = (unsigned)PyLong_AsUnsignedLong(args[2]);
  unsigned long long gx = PyLong_AsUnsignedLongLong(args[3]);
  unsigned long long gy = PyLong_AsUnsignedLongLong(args[4]);
  unsigned long long gz = PyLong_AsUnsignedLongLong(args[5]);
  if (!PyErr_Occurred() && (gx > 0x7fffffffULL || gy > 65535 || gz > 65535)) {{
    PyErr_Format(PyExc_OverflowError, "grid (%llu, %llu, %llu) is beyond CUDA's limits",
                 gx, gy, gz);
    return NULL;
  }}
  unsigned grid_x = (unsigned)gx, grid_y = (unsigned)gy, grid_z = (unsigned)gz;
  CUstream stream = (CUstream)PyLong_AsUnsignedLongLong(args[6]);
{body}
  if (PyErr_Occurred()) return NULL;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0) Py_RETURN_NONE;
  CUdeviceptr scratch = 0;
  void *params[] = {{{params}}};
  CUresult err;
  Py_BEGIN_ALLOW_THREADS
  {call}
  Py_END_ALLOW_THREADS
  if (err != CUDA_SUCCESS) {{
    const char *what = NULL;
    cuGetErrorString(err, &what);
    PyErr_Format(PyExc_RuntimeError, "{entry} failed: %s (%d)",
                 what ? what : "unknown error", (int)err);
    return NULL;
  }}
  Py_RETURN_NONE;
}}

static PyMethodDef methods[] = {{
    {{"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch a kernel"}},
    {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, methods}};
PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&module); }}
"""


@functools.cache
def _module(types: tuple[str, ...], pdl: bool = False) -> Any:
    """The built module for ``types`` (and ``pdl``), or None where it cannot be built here."""
    try:
        from triton.backends.nvidia import driver as nvidia
        from triton.runtime.build import compile_module_from_src

        return compile_module_from_src(
            src=launch_source(types, pdl), name=module_name(types, pdl),
            library_dirs=nvidia.library_dirs(), include_dirs=nvidia.include_dirs,
            libraries=nvidia.libraries,
        )  # fmt: skip
    except Exception as exc:  # any failure to build: Triton's launcher stays, and says so
        warnings.warn(f"ragged: the C launcher could not be built ({exc!r}); kernels launch "
                      "through Triton's launcher", RuntimeWarning, stacklevel=2)  # fmt: skip
        return None


def direct(compiled: Any) -> Callable[..., None] | None:
    """``launch(grid_x, grid_y, grid_z, stream, *params)`` for a CompiledKernel whose launch
    needs nothing but ``cuLaunchKernel``, or None (the caller uses Triton's launcher)."""
    md = compiled.metadata
    run = compiled.run
    if (
        getattr(md, "num_ctas", 1) != 1
        or getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0)
        or getattr(run, "launch_cooperative_grid", False)
        or md.shared > 228 * 1024  # Triton adds a launch attribute for oversized shared memory
    ):  # fmt: skip
        return None
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    types = param_types(signature) if isinstance(signature, dict) else None
    pdl = bool(getattr(run, "launch_pdl", False))
    module = _module(types, pdl) if types is not None else None
    if module is None:
        return None
    launch = functools.partial(module.launch, compiled.function, 32 * md.num_warps, md.shared)
    launch.types = types  # its parameter types, for fastpath (kernels.attention.launch_spec)
    launch.pdl = pdl  # launched as a programmatic dependent launch (cuLaunchKernelEx)
    return launch
