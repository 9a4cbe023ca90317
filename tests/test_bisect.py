"""Version bisect: the candidates between two stacks, the binary search (with a release that
cannot be built skipped), and the command's input checks and its real measurement path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ragbench import envs, follow_up
from ragbench import version_bisect as bisect

REPO = Path(__file__).resolve().parent.parent

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
    b, _ = _search("2.14.1", broken=("2.13.0",))
    assert b.first == "torch==2.14.1"  # 2.14.0 does not show it: the skip leaves nothing open
    text = bisect.markdown(b, "kernel.KernelLatency.gpu_us backend=triton", "torch==2.12.1",
                           "torch==2.15.0")  # fmt: skip
    assert "First release that shows it: `torch==2.14.1`" in text
    b, _ = _search("2.14.1", broken=("2.14.0",))
    skipped = [s for s in b.steps if s.shows is None]
    assert [s.spec for s in skipped] == ["torch==2.14.0"]
    # 2.13.0 does not show it, 2.14.1 does, 2.14.0 could not be built: either may be the first
    # (before, 2.14.0 was dropped from the candidates and 2.14.1 named)
    assert b.first is None and b.possible == ["torch==2.14.0", "torch==2.14.1"]
    text = bisect.markdown(b, "kernel.KernelLatency.gpu_us backend=triton", "torch==2.12.1",
                           "torch==2.15.0")  # fmt: skip
    assert "| `torch==2.14.0` | skipped |" in text
    assert "any of `torch==2.14.0`, `torch==2.14.1`" in text


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


# --- commit bisection: a throwaway repository, the measurement faked --------------------------

CELL = "kernel.KernelLatency.gpu_us backend=triton,batch=1"
KEY = ("kernel.KernelLatency", "gpu_us", "backend=triton,batch=1")
OTHER = ("kernel.KernelLatency", "gpu_us", "backend=triton,batch=64")
SUITE = {  # asv's discovery of the suite, as discovery.discover lists it
    "kernel.KernelLatency.track_gpu_us": {"params": [["'triton'", "'fa2'"], ["1", "64"]],
                                          "param_names": ["backend", "batch"]},
    "kernel.KernelLatency.track_host_us": {"params": [["'triton'", "'fa2'"], ["1", "64"]],
                                           "param_names": ["backend", "batch"]},
}  # fmt: skip
HOST = "kernel.KernelLatency.host_us backend=triton,batch=1"


def _git(repo, *args) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    return subprocess.run(["git", *ident, *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def _commit(repo, subject: str) -> str:
    _git(repo, "commit", "-q", "--allow-empty", "-m", subject)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository the bisection's git runs in: ``commit(subject)``, ``git(*args)``."""
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    monkeypatch.setattr("ragbench.git.REPO", path)
    return path


def _merge(repo, main: int, branch: int) -> dict:
    """main's root, ``main`` commits on it, a branch of ``branch`` commits from the root, and
    the branch merged with --no-ff: {"root", "main": [...], "branch": [...], "merge"}."""
    root = _commit(repo, "root")
    _git(repo, "checkout", "-q", "-b", "side")
    side = [_commit(repo, f"branch {i + 1}") for i in range(branch)]
    _git(repo, "checkout", "-q", "main")
    main_commits = [_commit(repo, f"main {i + 1}") for i in range(main)]
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    return {"root": root, "main": main_commits, "branch": side,
            "merge": _git(repo, "rev-parse", "HEAD")}  # fmt: skip


def _cells(scale: float, seed: int, raises: bool = False) -> dict:
    """One asv run's cells: the bisected one (``scale`` x 10 us, or raised) and another."""
    import numpy as np

    from ragbench.verdicts.comparison import Cell

    rng = np.random.default_rng(seed)
    out = {}
    for key in (KEY, OTHER):
        params = dict(p.split("=") for p in key[2].split(","))
        samples = [] if raises else list(rng.normal(10, 0.05, 40) * scale)
        out[key] = Cell(*key, params, "us", samples, failures=int(raises))
    return out


def _bisect(repo, good, bad, slow=(), raising=(), cell=CELL, listing=SUITE, **kw):
    """bisect_commits.commit_bisect with asv faked: the ``slow`` commits 10% slower, the
    ``raising`` ones raising in the benchmark -> (the bisection, the commits measured)."""
    from ragbench import bisect_commits
    from ragbench.policies import load_policies

    measured = []

    def run_asv(sha):
        measured.append(sha)
        return _cells(1.1 if sha in slow else 1.0, len(measured), raises=sha in raising)

    b = bisect_commits.commit_bisect(None, cell, good, bad, policies=load_policies(),
                                     machine="m1", benchmarks=listing, run_asv=run_asv,
                                     run_paired=None, log=lambda m: None, **kw)  # fmt: skip
    return b, measured


def test_a_commit_whose_benchmark_raises_is_skipped_not_named(repo):
    """Of 8 commits, the 6th brings the step and the 4th (the search's first step) raises:
    it is skipped, as git bisect skip, and the 6th named (before, a raise read as "shows it"
    and the 4th was named)."""
    root = _commit(repo, "root")
    commits = [_commit(repo, f"c{i + 1}") for i in range(8)]
    b, _ = _bisect(repo, root, commits[-1], slow=set(commits[5:]), raising={commits[3]})
    assert b.first == commits[5] and b.possible == [commits[5]]
    assert [s.spec for s in b.steps if s.shows is None] == [commits[3]]
    (raised,) = [s for s in b.steps if s.spec == commits[3]]
    assert raised.note.startswith("failed")
    text = bisect_commits_markdown(b)
    assert f"First bad commit: `{commits[5]}`" in text and "| skipped |" in text


def bisect_commits_markdown(b) -> str:
    from ragbench import bisect_commits

    return bisect_commits.markdown(b)


def test_skips_that_leave_the_answer_open_name_every_commit_it_may_be(repo):
    """The step at the 6th commit, the 5th raising: git bisect's "only skipped commits left
    to test": either may be the first bad one, and none is named."""
    root = _commit(repo, "root")
    commits = [_commit(repo, f"c{i + 1}") for i in range(8)]
    b, _ = _bisect(repo, root, commits[-1], slow=set(commits[5:]), raising={commits[4]})
    assert b.first is None and b.possible == [commits[4], commits[5]]
    assert "it is one of" in bisect_commits_markdown(b)


def test_a_step_on_the_branch_of_a_merge_is_found_against_its_merge_base(repo):
    """The alert's --good is the merge's first parent (follow_up.bisect_command): the merge is
    the one first-parent commit; its branch of 6 is searched, each against the merge-base,
    and the 2nd (the step) is named. Before, each branch commit was gated against --good,
    which holds main's commits the branch lacks: main's 10% speed-up there made the first
    branch commit read as a slowdown, and it was named."""
    c = _merge(repo, main=3, branch=6)
    step = c["branch"][1]
    slow = {*c["branch"][1:], c["merge"]}
    fast_main = set(c["main"])  # main's side is 10% faster than the root: the branch lacks it

    from ragbench import bisect_commits
    from ragbench.policies import load_policies

    measured = []

    def run_asv(sha):
        measured.append(sha)
        scale = (1.1 if sha in slow else 1.0) / (1.1 if sha in fast_main | {c["merge"]} else 1.0)
        return _cells(scale, len(measured))

    good = c["main"][-1]  # the merge's first parent, as the alert prints it
    b = bisect_commits.commit_bisect(None, CELL, good, c["merge"], policies=load_policies(),
                                     machine="m1", benchmarks=SUITE, run_asv=run_asv,
                                     run_paired=None, log=lambda m: None)  # fmt: skip
    assert b.line == [c["merge"]]
    assert b.first == step, [(s.spec[:8], s.shows, s.base[:8]) for s in b.steps]
    (branch,) = b.branches
    assert (branch.merge, branch.base, branch.candidates) == (c["merge"], c["root"], c["branch"])
    assert all(s.base == c["root"] for s in b.steps if s.spec in c["branch"])
    assert measured.count(good) == 1 and measured.count(c["root"]) == 1  # each base once


def test_a_step_on_main_s_side_of_a_merge_names_main_s_commit(repo):
    """--good before both sides: the first-parent line is main's commits and the merge; the
    step in main's 2nd commit is named, not the merge (before: the branch's commits, which
    lack main's step, were searched among main's and the merge was named)."""
    c = _merge(repo, main=3, branch=6)
    step = c["main"][1]
    b, measured = _bisect(repo, c["root"], c["merge"], slow={*c["main"][1:], c["merge"]})
    assert b.line == [*c["main"], c["merge"]]
    assert b.first == step
    assert not set(measured) & set(c["branch"])  # the branch is never searched


def test_no_branch_commit_shows_it_so_the_merge_itself_is_named(repo):
    c = _merge(repo, main=2, branch=4)
    b, _ = _bisect(repo, c["main"][-1], c["merge"], slow={c["merge"]})
    assert b.first == c["merge"]
    assert "the merge itself brings it" in bisect_commits_markdown(b)


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        ("kernel.KernelLatency.gpu_us backend=triton,batch=2", r"batch=2 is not in the quick grid"),
        ("kernel.KernelLatency.gpu_us backend=triton", "takes the params backend, batch"),
        ("kernel.KernelLatency.gpu_uss backend=triton,batch=1", "has no metric 'gpu_uss'"),
        ("kernel.KernelLatencyy.gpu_us backend=triton,batch=1", "no benchmark"),
    ],
)
def test_a_cell_the_suite_does_not_have_is_refused_before_any_measurement(repo, cell, why):
    from ragbench import bisect_commits

    root = _commit(repo, "root")
    commits = [_commit(repo, f"c{i + 1}") for i in range(4)]
    with pytest.raises(bisect_commits.BisectError, match=why) as exc:
        _bisect(repo, root, commits[-1], cell=cell)
    assert "\n" not in str(exc.value)


def test_a_cell_typo_is_refused_by_the_cli_before_any_measurement(tmp_path):
    """asv's own discovery of the suite: one line, exit 2, and no run was made (the store
    was never written)."""
    store = tmp_path / "b.duckdb"
    out = subprocess.run([sys.executable, "-m", "ragbench", "bisect", "--store", str(store),
                          "--cell", "kernel.KernelLatency.gpu_us backend=triton,batch=3,"
                          "geometry=deit_b,lengths=uniform,prune=0.8", "--good", "HEAD~2",
                          "--bad", "HEAD"], capture_output=True, text=True,
                         cwd=REPO)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "batch=3 is not in the quick grid" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    from ragbench.store import Store

    with Store(store) as s:
        assert s.runs(label="%") == []


@pytest.mark.parametrize(
    ("good", "bad", "why"),
    [
        ("HEAD", "HEAD", "are the same commit"),  # was: not enough values to unpack
        ("HEAD", "HEAD~1", "must be an ancestor"),
        ("HEAD~1", "HEAD", "no commits between"),
        ("no-such-commit", "HEAD", "is not a commit of this clone"),
        ("HEAD~1", "HEAD^!", "is a range"),  # was: "not a commit", as the gate had it apart
        ("HEAD~1...HEAD", "HEAD", "is a range"),
    ],
)
def test_commits_that_cannot_be_bisected_are_one_line_exit_2(repo, good, bad, why):
    from ragbench import bisect_commits

    _commit(repo, "root")
    _commit(repo, "c1")
    with pytest.raises(bisect_commits.BisectError, match=why) as exc:
        bisect_commits.commits_between(good, bad)
    assert "\n" not in str(exc.value)


def test_the_cli_refuses_good_equal_to_bad_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ragbench", "bisect", "--store",
                          str(tmp_path / "b.duckdb"), "--cell", CELL, "--good", "HEAD",
                          "--bad", "HEAD"], capture_output=True, text=True,
                         cwd=REPO)  # fmt: skip
    assert out.returncode == 2 and "are the same commit" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_each_step_measures_the_cell_alone_and_good_once(repo, monkeypatch, tmp_path):
    """asv's --bench of the cell's benchmark and params (asv's own filter picks that one
    cell), each base measured once for the whole search: for 8 commits, good once, bad once
    and 3 candidates: 5 asv runs."""
    from types import SimpleNamespace

    from asv.benchmarks import Benchmarks

    from ragbench import asv_run, bisect_commits, discovery
    from ragbench import result_files as ingest
    from ragbench.policies import load_policies
    from ragbench.store import Measurement, Run, Store

    root = _commit(repo, "root")
    commits = [_commit(repo, f"c{i + 1}") for i in range(8)]
    slow = set(commits[4:])
    runs = []

    def fake_run(shas, *, mode, results_dir, machine, bench, log, **kw):
        runs.append((shas[0], list(bench)))
        return [{"commit": shas[0]}]

    def fake_ingest(store, paths, *, label, log):
        sha = runs[-1][0]
        run = Run("asv", sha, "m1", started_at=float(1_800_000_000 + len(runs)), label=label)
        cells = _cells(1.1 if sha in slow else 1.0, len(runs))
        store.add_run(run, [Measurement(c.benchmark, c.metric, c.params, "us", 10.0,
                                        samples=c.samples) for c in cells.values()])  # fmt: skip
        return SimpleNamespace(failed=[])

    monkeypatch.setattr(asv_run, "run", fake_run)
    monkeypatch.setattr(ingest, "ingest", fake_ingest)
    with Store(tmp_path / "p.duckdb") as store:
        b = bisect_commits.commit_bisect(store, CELL, root, commits[-1],
                                         policies=load_policies(), machine="m1",
                                         benchmarks=SUITE, log=lambda m: None)  # fmt: skip
    assert b.first == commits[4]
    measured = [sha for sha, _ in runs]
    assert measured.count(root) == 1 and len(measured) == 5 == len(b.measured)
    assert measured[:2] == [root, commits[-1]]  # good, then bad: does it show the step at all
    bench = discovery.bench_regex([KEY])
    assert all(b_ == bench for _, b_ in runs)
    found = [{"name": n, "params": v["params"], "param_names": v["param_names"], "version": "1"}
             for n, v in SUITE.items()]  # fmt: skip
    picked = Benchmarks(SimpleNamespace(benchmark_dir="benchmarks"), found, regex=bench)
    assert picked._benchmark_selection["kernel.KernelLatency.track_gpu_us"] == [0]  # ('triton', 1)
    assert picked._benchmark_selection["kernel.KernelLatency.track_host_us"] == []


def test_a_paired_cell_is_measured_by_the_paired_runner_on_that_cell_alone(repo):
    """host_us (paired): each step runs the paired runner with --only of the cell, base
    loaded beside the candidate; no asv run at all."""
    import numpy as np

    from ragbench import bisect_commits
    from ragbench.policies import load_policies

    c = _merge(repo, main=2, branch=6)
    slow = {*c["branch"][1:], c["merge"]}
    calls = []

    def run_paired(base, sha, only):
        calls.append((base, sha, only))
        rng = np.random.default_rng(len(calls))
        docs = []
        for _ in range(3):
            values = {arm: list(rng.normal(10, 0.02, 40) * (1.1 if arm == "head" and sha in slow
                                                            else 1.0))
                      for arm in ("base", "aa", "head")}  # fmt: skip
            docs.append({"errors": {}, "cells": [{
                "benchmark": KEY[0], "metric": "host_us", "params": {"backend": "triton",
                "batch": 1}, "unit": "us", "values": values, "errors": {}}]})  # fmt: skip
        return "paired", docs

    def run_asv(sha):
        raise AssertionError("a paired cell is never measured by asv")

    b = bisect_commits.commit_bisect(None, HOST, c["main"][-1], c["merge"],
                                     policies=load_policies(), machine="m1",
                                     benchmarks=SUITE, run_asv=run_asv, run_paired=run_paired,
                                     log=lambda m: None)  # fmt: skip
    assert b.first == c["branch"][1]
    assert {only for _, _, only in calls} == {r"^kernel\.KernelLatency backend=triton,batch=1$"}
    assert calls[0][:2] == (c["main"][-1], c["merge"])
    assert all(base == c["root"] for base, _, _ in calls[1:])
    assert len(calls) <= 1 + 3  # the merge, then log2 of its branch of 6 and the merge


@pytest.mark.parametrize("planted", ["middle", "last", "none"])
def test_the_search_names_the_first_commit_that_shows_the_step(repo, planted):
    """8 commits after good, 10% slower from one of them on: the bad end first (does it show
    the step at all), then the search names the first slow commit in log2(8) more steps, or
    says the bad end does not show it."""
    root = _commit(repo, "root")
    commits = [_commit(repo, f"c{i + 1}") for i in range(8)]
    first = {"middle": 4, "last": 7, "none": 8}[planted]
    b, measured = _bisect(repo, root, commits[-1], slow=set(commits[first:]))
    assert b.line == commits
    assert b.first == (commits[first] if planted != "none" else None)
    assert b.steps[0].spec == commits[-1]
    assert len(b.steps) <= 1 + 3 and measured.count(root) == 1
    text = bisect_commits_markdown(b)
    assert (f"First bad commit: `{b.first}`" in text) if b.first else ("nothing to bisect" in text)


def test_the_cli_refuses_what_it_cannot_bisect(tmp_path):
    """One line, exit 2, before anything is measured: a cell named wrong, a metric that is
    shown and never judged, a good commit that is no ancestor of the bad one."""
    for args, why in ((["--cell", "nonsense", "--good", "HEAD~1", "--bad", "HEAD"],
                       "expected 'benchmark.metric params'"),
                      (["--cell", "cpu.Pipeline.img_per_s method=threshold_l2,pipeline=triton",
                        "--good", "HEAD~2", "--bad", "HEAD"], "shown, not judged"),
                      (["--cell", CELL, "--good", "HEAD", "--bad", "HEAD~1"],
                       "must be an ancestor")):  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "ragbench", "bisect", "--store",
                              str(tmp_path / "b.duckdb"), *args], capture_output=True,
                             text=True, cwd=REPO)  # fmt: skip
        assert out.returncode == 2 and why in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_alert_s_bisect_command_searches_a_merge_from_its_first_parent(repo):
    """The alert of a merge names its first parent as the previous measured commit: the
    printed command bisects it (the first-parent line is the merge; its branch is searched
    against the merge-base). A range of one commit, no merge, has nothing to bisect."""
    import shlex

    c = _merge(repo, main=2, branch=6)
    cells = [{"benchmark": KEY[0], "metric": KEY[1], "param_key": KEY[2]}]
    alert = {"prev_commit_hash": c["main"][-1], "commit_hash": c["merge"], "cells": cells,
             "machine": "gpu 1"}  # fmt: skip
    command = follow_up.bisect_command(alert)
    args = shlex.split(command)
    assert args[:2] == ["ragbench", "bisect"] and args[args.index("--cell") + 1] == CELL
    good, bad = args[args.index("--good") + 1], args[args.index("--bad") + 1]
    assert args[args.index("--machine") + 1] == "gpu 1"
    slow = {*c["branch"][2:], c["merge"]}
    b, _ = _bisect(repo, good, bad, slow=slow)
    assert b.first == c["branch"][2]
    one = {**alert, "prev_commit_hash": c["main"][0], "commit_hash": c["main"][1]}
    assert follow_up.bisect_command(one) is None


def test_the_paired_runner_builds_no_model_for_a_kernel_cell():
    """A bisection step of a kernel cell runs the paired runner with --only of that cell: it
    builds no pipeline model for each arm (before: every model of the grid, in every process;
    12.4 s against 25.4 s a process on this CPU)."""
    import random
    import re

    from benchmarks.support import paired as _paired

    built = []

    class Arm:
        def build(self, name, **kw):
            built.append(name)
            raise RuntimeError("not here")

    out = []
    only = re.compile(r"^kernel\.KernelLatency backend=triton,batch=1$")
    _paired._pipelines({"base": Arm(), "head": Arm()}, {}, 1, random.Random(0), out, {}, True,
                       only)  # fmt: skip
    assert built == [] and out == []
    _paired._pipelines({"base": Arm()}, {}, 1, random.Random(0), out, {}, True,
                       re.compile(r"^cpu\.Pipeline "))  # fmt: skip
    assert built and out  # a pipeline cell selected: its model is built (here it raised)


def test_an_inconclusive_step_is_measured_again_then_skipped(repo):
    """The 4th of 8 commits gives samples too spread to judge (half at 5 us, half at 15.3):
    it and the base are measured once more, and, still inconclusive, it is skipped (before,
    inconclusive read as "does not show it")."""
    from ragbench import bisect_commits
    from ragbench.policies import load_policies
    from ragbench.verdicts.comparison import Cell

    root = _commit(repo, "root")
    commits = [_commit(repo, f"c{i + 1}") for i in range(8)]
    measured = []

    def run_asv(sha):
        measured.append(sha)
        if sha == commits[3]:
            params = {"backend": "triton", "batch": "1"}
            return {KEY: Cell(*KEY, params, "us", [5.0] * 20 + [15.3] * 20)}
        return _cells(1.1 if sha in commits[5:] else 1.0, len(measured))

    b = bisect_commits.commit_bisect(None, CELL, root, commits[-1], policies=load_policies(),
                                     machine="m1", benchmarks=SUITE, run_asv=run_asv,
                                     run_paired=None, log=lambda m: None)  # fmt: skip
    assert b.first == commits[5]
    (skipped,) = [s for s in b.steps if s.shows is None]
    assert skipped.spec == commits[3] and "inconclusive" in skipped.note
    assert measured.count(commits[3]) == 2 and measured.count(root) == 2


def test_a_metric_judged_on_main_s_history_only_is_refused(repo):
    from ragbench import bisect_commits

    suite_ = {"kernel.AnchoredFloor.track_host_ratio": {"params": [["'deit_b'"]],
                                                        "param_names": ["geometry"]}}  # fmt: skip
    root = _commit(repo, "root")
    commits = [_commit(repo, f"c{i + 1}") for i in range(3)]
    with pytest.raises(bisect_commits.BisectError, match="history only"):
        _bisect(repo, root, commits[-1], cell="kernel.AnchoredFloor.host_ratio geometry=deit_b",
                listing=suite_)  # fmt: skip


def test_a_branch_that_merged_main_in_is_not_searched_against_the_merge_base(repo):
    """Found by an attack on bisect (a helper, this session): the side branch brings the step
    in its first commit, then merges main in, and is merged back (--good main's tip, --bad the
    merge, as an alert prints it). Before: its first-parent line from the merge-base skipped
    that first commit, main's commit was gated as the branch's, and the branch's merge of main
    was named the first bad commit, exit 0. Now every commit the merge brings may be it, and
    the report says why (exit 1), as git bisect would then have to search them."""
    root = _commit(repo, "root")
    m1 = _commit(repo, "main 1")
    _git(repo, "checkout", "-q", "-b", "side", root)
    s1 = _commit(repo, "branch 1: the step")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge main into side", "main")
    sm = _git(repo, "rev-parse", "HEAD")
    s2 = _commit(repo, "branch 2")
    _git(repo, "checkout", "-q", "main")
    m2 = _commit(repo, "main 2")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = _git(repo, "rev-parse", "HEAD")
    b, measured = _bisect(repo, m2, merge, slow={s1, sm, s2, merge})
    assert b.first is None and b.possible == [s1, sm, s2, merge], b.possible
    assert m1 not in measured
    text = bisect_commits_markdown(b)
    assert "merged other history in" in text and "leave the first bad commit open" in text


def test_a_good_commit_a_merge_brought_is_refused(repo):
    """--good on a branch merged into --bad's line: the first-parent line from it leaves out
    main's commits before the merge (one of them brought the step), and the answer was the
    merge. Refused in one line, naming the line to pick --good from."""
    c = _merge(repo, main=2, branch=2)
    _commit(repo, "main 3")
    bad = _commit(repo, "main 4")
    for good in c["branch"]:  # its first commit: git's first-parent ancestry path is empty
        with pytest.raises(bisect.BisectError, match="is not on the first-parent line of"):
            _bisect(repo, good, bad, slow={c["main"][0]})
