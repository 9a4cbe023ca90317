"""``ragged.kernels.c_launch``: the C launcher's source and when it is (not) used.

tests/test_gpu.py builds and launches it on a GPU; here the generated C is checked by the
compiler against the CUDA header Triton ships and this Python's headers."""

import shutil
import subprocess
import sysconfig
from types import SimpleNamespace

import pytest

from ragged.kernels import c_launch

# The attention kernel's signature as Triton 3.6 reports it (compiled.src.signature).
ATTENTION = {
    **{n: "*fp16" for n in ("Q", "K", "V", "O")}, "cu_seqlens": "*i32", "qk_scale": "fp32",
    **{f"stride_{n}": "i32" for n in ("qt", "qh", "kt", "kh", "vt", "vh", "ot", "oh")},
    "num_heads": "i32", "num_m_blocks": "i32", "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
}  # fmt: skip


def test_param_types_drop_constexprs_and_refuse_types_without_a_c_type():
    types = c_launch.param_types(ATTENTION)
    assert types == ("*fp16",) * 4 + ("*i32", "fp32") + ("i32",) * 10
    assert c_launch.param_types({"desc": "nvTmaDesc", "n": "i32"}) is None
    assert c_launch.param_types({"flag": "u1"}) is None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize(
    "types", [c_launch.param_types(ATTENTION), ("*fp32", "i64", "u32", "u64", "fp64"), ()]
)
def test_the_generated_source_compiles_cleanly(tmp_path, types, pdl):
    from triton.backends.nvidia import driver as nvidia

    src = tmp_path / "launch.c"
    src.write_text(c_launch.launch_source(types, pdl))
    cmd = ["gcc", "-fsyntax-only", "-Wall", "-Werror", f"-I{sysconfig.get_paths()['include']}",
           *(f"-I{d}" for d in nvidia.include_dirs), str(src)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"PyInit_{c_launch.module_name(types, pdl)}" in src.read_text()
    # a programmatic dependent launch: cuLaunchKernelEx with its attribute, else cuLaunchKernel
    assert ("PROGRAMMATIC_STREAM_SERIALIZATION" in src.read_text()) == pdl
    assert ("cuLaunchKernelEx(" in src.read_text()) == pdl
    # one parameter read per type, plus the two scratch pointers Triton appends
    assert src.read_text().count("&p") == len(types)


def test_module_names_differ_by_signature():
    assert c_launch.module_name(("i32",)) != c_launch.module_name(("i64",))
    assert c_launch.module_name(("i32", "i32")) != c_launch.module_name(("i32",))
    assert c_launch.module_name(("i32",), True) != c_launch.module_name(("i32",))


def _compiled(**metadata):
    md = {"num_ctas": 1, "global_scratch_size": 0, "profile_scratch_size": 0, "shared": 1024,
          "num_warps": 4, **metadata}  # fmt: skip
    run = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False)
    return SimpleNamespace(metadata=SimpleNamespace(**md), run=run, function=1,
                           src=SimpleNamespace(signature=ATTENTION))  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        {"num_ctas": 2},
        {"global_scratch_size": 256},
        {"profile_scratch_size": 64},
        {"shared": 229 * 1024},
    ],
)
def test_a_kernel_that_needs_launch_attributes_keeps_tritons_launcher(monkeypatch, change):
    built = []
    monkeypatch.setattr(c_launch, "_module", lambda types, pdl=False: built.append(types))
    assert c_launch.direct(_compiled(**change)) is None
    assert built == [], "nothing is built for a kernel the C launcher cannot launch"


def test_a_cooperative_launch_keeps_tritons_launcher():
    compiled = _compiled()
    compiled.run.launch_cooperative_grid = True
    assert c_launch.direct(compiled) is None


def test_a_pdl_kernel_gets_the_module_built_for_programmatic_dependent_launch(monkeypatch):
    built = []
    module = SimpleNamespace(launch=lambda *args: args)
    monkeypatch.setattr(c_launch, "_module", lambda types, pdl=False: built.append(pdl) or module)
    compiled = _compiled()
    compiled.run.launch_pdl = True
    launch = c_launch.direct(compiled)
    assert built == [True] and launch.pdl
    assert not c_launch.direct(_compiled()).pdl and built == [True, False]


def test_a_plain_kernel_gets_the_module_launch_bound_to_its_function(monkeypatch):
    module = SimpleNamespace(launch=lambda *args: args)
    monkeypatch.setattr(c_launch, "_module", lambda types, pdl=False: module)
    launch = c_launch.direct(_compiled(shared=2048, num_warps=8))
    assert launch(3, 1, 1, 77, 10, 20) == (1, 256, 2048, 3, 1, 1, 77, 10, 20)


def test_where_the_module_cannot_be_built_tritons_launcher_stays(monkeypatch):
    monkeypatch.setattr(c_launch, "_module", lambda types, pdl=False: None)
    assert c_launch.direct(_compiled()) is None


def test_a_failed_build_warns_and_leaves_tritons_launcher(monkeypatch):
    import triton.runtime.build as build

    def fail(**kwargs):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(build, "compile_module_from_src", fail)
    c_launch._module.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not be built"):
            assert c_launch._module(("i32",)) is None
    finally:
        c_launch._module.cache_clear()
