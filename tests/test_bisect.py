"""Version bisect: the candidates between two stacks, the binary search (with a release that
cannot be built skipped), and the command's input checks and its real measurement path."""

from __future__ import annotations

import pytest

from ragbench import bisect, envs

LISTING = """torch (2.15.0)
Available versions: 2.15.0, 2.14.1, 2.14.0, 2.13.0+cpu, 2.13.0, 2.12.1, 2.12.0, 2.15.0rc1
"""


def test_the_candidates_are_the_final_releases_strictly_between():
    name, low, high = bisect.differing("torch==2.12.1,numpy==2.2.6", "numpy==2.2.6,torch==2.15.0")
    assert name == "torch"
    assert bisect.releases(name, low, high, LISTING) == ["2.13.0", "2.14.0", "2.14.1"]
    assert bisect.candidate_spec("torch==2.12.1,numpy==2.2.6", name, "2.14.0") == (
        "numpy==2.2.6,torch==2.14.0"
    )


@pytest.mark.parametrize(
    ("first", "last", "why"),
    [
        ("torch==2.12.1", "torch==2.15.0,triton==3.9.0", "must pin the same packages"),
        ("torch==2.12.1,triton==3.7.1", "torch==2.15.0,triton==3.9.0", "differ in torch, triton"),
        ("torch>=2.12", "torch==2.15.0", "pin torch with =="),
        (
            "torch==2.15.0",
            "torch==2.12.1",
            r"is not older than 2\.12\.1: pass the older stack "
            r"first \(--between torch==2\.12\.1 torch==2\.15\.0\)",
        ),
        ("torch==2.12.1,numpy==2.2.6", "numpy==2.2.6,torch==2.12.1", "are the same stack"),
        ("torch==2.12", "torch==2.12.0", "are the same release"),
    ],
)
def test_specs_that_cannot_be_bisected_are_refused(first, last, why):
    with pytest.raises(bisect.BisectError, match=why):
        bisect.differing(first, last)


def _search(showing_from: str, broken=(), listing=LISTING):
    """bisect.bisect with a measurement that shows the change from torch ``showing_from`` on,
    and cannot build the ``broken`` releases."""
    from packaging.version import Version

    measured = []

    def shows(spec):
        version = spec.split("==")[1]
        measured.append(version)
        if version in broken:
            raise envs.EnvError(f"--env {spec}: pip could not install it")
        return Version(version) >= Version(showing_from), "regression +12%"

    b = bisect.bisect("torch==2.12.1", "torch==2.15.0", shows, listing=listing, log=lambda m: None)
    return b, measured


@pytest.mark.parametrize("first", ["2.13.0", "2.14.0", "2.14.1", "2.15.0"])
def test_the_search_names_the_first_release_that_shows_it(first):
    b, measured = _search(first)
    assert b.first == f"torch=={first}"
    assert measured[0] == "2.15.0" and len(measured) <= 3  # the last stack, then log2(4) steps


def test_a_release_that_cannot_be_built_is_skipped_and_reported():
    b, _ = _search("2.14.1", broken=("2.14.0",))
    assert b.first == "torch==2.14.1"
    skipped = [s for s in b.steps if s.shows is None]
    assert [s.spec for s in skipped] == ["torch==2.14.0"]
    text = bisect.markdown(b, "kernel.KernelLatency.gpu_us backend=triton", "torch==2.12.1",
                           "torch==2.15.0")  # fmt: skip
    assert "| `torch==2.14.0` | skipped |" in text
    assert "First release that shows it: `torch==2.14.1`" in text


def test_nothing_to_look_for_when_the_last_stack_does_not_show_it():
    b, measured = _search("9.0")
    assert b.first is None and measured == ["2.15.0"]
    assert "nothing to bisect" in bisect.markdown(b, "c.M.m p", "torch==2.12.1", "torch==2.15.0")


def test_a_cell_is_named_as_the_report_names_it():
    assert bisect.parse_cell("cpu.KernelError.max_abs_err dtype=float16,head_dim=64") == (
        "cpu.KernelError", "max_abs_err", "dtype=float16,head_dim=64"
    )  # fmt: skip
    with pytest.raises(bisect.BisectError, match=r"expected 'benchmark\.metric params'"):
        bisect.parse_cell("max_abs_err")


def test_the_weekly_report_s_stacks_pinned_and_newest():
    assert bisect.newest("torch", LISTING) == "torch==2.15.0"  # not 2.15.0rc1, not a +cpu build
    pinned = envs.pinned()
    assert pinned.startswith("torch==") and ",triton==" in pinned and "+" not in pinned
