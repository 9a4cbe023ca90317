"""The workflows' fault cases, read from one rehearsal (scripts/rehearse.py, from a fresh copy
of this working tree): a NaN kernel on a pull request through asv, acceptance by label, a later
push, a fork that rewrites bench-pr.yml and plants files for the trusted jobs, a push GitHub
cancelled while it waited, and what the pull request's code could reach. Its own file: make
test's workers take whole files, and this one's ~6 minutes run beside the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fresh_copy
from test_faults import KERNEL_ERROR

from ragbench.store import Store
from scripts.rehearse import PLANTED
from scripts.workflow_runner import TOKEN


class Rehearsal:
    def __init__(self, work: Path, stdout: str):
        self.work, self.stdout = work, stdout
        self.store = work / "runner" / "perf.duckdb"
        self.github = json.loads((work / "github.json").read_text())
        self.shas = json.loads((work / "shas.json").read_text())

    def sha(self, key: str) -> str:
        return self.shas[key]

    def row(self, event: str, job: str) -> str:
        rows = [ln for ln in self.stdout.splitlines() if ln.startswith(f"| {event} |")]
        return "\n".join(r for r in rows if job in r)

    def cell(self, event: str, job: str) -> str:
        """The conclusion of ``job`` (``workflow / job``, as the table names it) in ``event``."""
        (row,) = [r for r in self.row(event, f"| {job} |").splitlines()]
        return row.split(" | ")[2]

    def gate_json(self, key: str) -> dict:
        for path in self.work.glob("artifacts/*/ragbench-gate/gate.json"):
            doc = json.loads(path.read_text())
            if doc["head"] == self.sha(key):
                return doc
        raise AssertionError(f"no gate artifact for the {key} head")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> Rehearsal:
    """scripts/rehearse.py on a fresh copy of this working tree: about 7 minutes on 2 cores,
    most of it three gates and three main commits through asv. The runner's .venv cache starts
    from this .venv (hard links): a second CUDA torch set-up is 6 GB of disk."""
    tmp = tmp_path_factory.mktemp("rehearsal")
    repo = fresh_copy(tmp / "repo")
    work = tmp / "work"
    out = subprocess.run(
        [sys.executable, "-m", "scripts.rehearse", "--bench", KERNEL_ERROR, "--workdir",
         str(work), "--warm-venv", sys.prefix],
        capture_output=True, text=True, cwd=repo, timeout=2400,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr[-5000:]
    assert "All as expected" in out.stdout
    return Rehearsal(work, out.stdout)


def test_the_rehearsal_ended_as_expected(rehearsal):
    """Every event's jobs ended as expected and the rehearsal's own checks held (the store,
    the one comment, the statuses, the artifacts, the summary)."""
    assert "make bench-main: success" in rehearsal.row("push", "bench-main / bench")
    assert rehearsal.cell("pr-fork", "bench-pr / gate") == "skipped"
    assert rehearsal.cell("pr-fork", "bench-pr / verdict") == "skipped"


def test_a_push_github_dropped_is_measured_by_the_next(rehearsal):
    s = Store(rehearsal.store, read_only=True)
    main = {r["commit_hash"] for r in s.runs()}
    assert rehearsal.sha("dropped") in main and len(main) == 3


def test_the_nan_kernel_fails_the_gate_through_asv_and_the_workflows(rehearsal):
    """PR 1's NaN commit, measured by bench-pr's gate through asv: its kernel-error cells are
    NaN on head (missing), the gate fails, the trusted verdict fails the status."""
    gate = rehearsal.gate_json("nan")
    assert gate["verdict"] == "fail"
    missing = {(f["metric"], f["param_key"]) for f in gate["failures"] if f["status"] == "missing"}
    assert missing == {(metric, f"backend=triton,dtype={dtype}")
                       for metric in ("error_ratio", "max_abs_error")
                       for dtype in ("float32", "float16")}  # fmt: skip
    assert "make gate-sandbox: success" in rehearsal.row("pr-nan", "| bench-pr / gate |")
    assert rehearsal.cell("pr-nan", "bench-pr / verdict") == "failure"
    assert rehearsal.github["statuses"][rehearsal.sha("nan")][0]["state"] == "failure"


def test_pull_request_code_never_reaches_the_store_or_the_token(rehearsal):
    """The gate job ran the PR's code with neither the token nor the store path in any step's
    environment (the rehearsal checks every step), and the persistent store holds main's runs
    only: every gate measured into its scratch store."""
    assert "the PR's gate job saw" not in rehearsal.stdout
    s = Store(rehearsal.store, read_only=True)
    runs = s.runs(any_branch=True, gate_runs=True)
    assert runs and {r["branch"] for r in runs} == {"main"} and not any(r["label"] for r in runs)
    assert {g["head"] for g in (s.gate(1, rehearsal.sha(k)) for k in ("clean", "nan", "later"))}


def test_acceptance_needs_write_access_and_holds_for_its_commit_only(rehearsal):
    s = Store(rehearsal.store, read_only=True)
    nan, later = rehearsal.sha("nan"), rehearsal.sha("later")
    assert {a["accepted_by"] for a in s.acceptances(nan)} == {"maintainer"}
    assert not s.acceptances(later)  # the later push needs a new acceptance
    assert "| failure |" in rehearsal.row("pr-label-outsider", "bench-accept / accept")
    assert "| skipped |" in rehearsal.row("pr-label-other", "bench-accept / accept")
    for job in ("approve", "gate", "verdict"):  # no gate on another label
        assert rehearsal.cell("pr-label-other", f"bench-pr / {job}") == "skipped"
    states = [st["state"] for st in rehearsal.github["statuses"][nan]]
    assert states == ["failure", "failure", "success", "failure", "success"]
    assert "perf-regression-accepted" not in rehearsal.github["labels"]["1"]  # stale: taken off


def test_the_warm_venv_runs_the_workspace_code_and_leaves_ours_alone(rehearsal):
    """--warm-venv: the runner's .venv imports ragged from the runner's checkout, and this
    .venv's files (hard-linked into it) still name this repository."""
    venv = rehearsal.work / "runner" / "work" / "ragged" / ".venv"
    workspace = str(venv.parent)
    finder = next(venv.glob("lib/python*/site-packages/__editable___ragged_*_finder.py"))
    ours = Path(sys.prefix) / finder.relative_to(venv)
    assert workspace in finder.read_text() and workspace not in ours.read_text()
    where = "import ragged; print(ragged.__file__)"  # from outside both checkouts
    out = subprocess.run([venv / "bin" / "python", "-c", where], capture_output=True, text=True,
                         check=True, cwd=rehearsal.work)  # fmt: skip
    assert out.stdout.startswith(workspace + "/")
    assert (venv / "bin" / "ragbench").read_text().startswith(f"#!{venv}/bin/python")


def test_a_forks_workflow_and_code_never_reach_the_trusted_runner(rehearsal):
    """PR 2, from a fork, rewrites bench-pr.yml (on its own pull request, no approval, a job on
    the trusted labels) and makes its gate plant ~/.gitconfig, ~/.config/pip/pip.conf and a
    ragged build module. Its own file finds no runner (the runner groups take main's files
    only) and main's bench-pr does not run its code for a reader's push. Once a maintainer adds
    bench-gpu, its code runs in the sandbox: with no token, no store and nothing of GitHub's in
    its environment, and what it planted is gone with the sandbox's home. The trusted jobs
    after it (the verdict, store maintenance) pass their trust check, neither runner's home
    holds a planted file, and the check refuses once the files are put in the trusted home."""
    assert rehearsal.cell("pr-fork", "bench-pr / gate (the PR's file)") == "no runner"
    assert rehearsal.cell("pr-fork", "bench-pr / own (the PR's file)") == "no runner"
    assert rehearsal.cell("pr-fork", "bench-pr / approve") == "failure"
    assert rehearsal.cell("pr-fork-approved", "bench-pr / approve") == "success"
    assert "make gate-sandbox: failure" in rehearsal.row("pr-fork-approved", "| bench-pr / gate |")
    assert rehearsal.cell("pr-fork-approved", "bench-pr / verdict") == "failure"
    assert rehearsal.github["statuses"][rehearsal.sha("fork")][0]["state"] == "error"
    (report,) = [p.read_text() for p in rehearsal.work.glob("artifacts/*/ragbench-gate/gate.md")
                 if "\nHOME=" in p.read_text()]  # fmt: skip
    env = dict(line.split("=", 1) for line in report.splitlines() if "=" in line)
    assert not [k for k, v in env.items() if TOKEN in v or "perf.duckdb" in v]
    assert not [k for k in env if k.startswith(("GITHUB_", "ACTIONS_", "RUNNER_"))]
    # the runner's machine settings do go in (tests/conftest.py sets this one)
    assert env["OMP_NUM_THREADS"] == os.environ["OMP_NUM_THREADS"]
    assert not Path(env["HOME"]).exists()  # the sandbox's home, with what was planted in it
    for folder in ("runner", "sandbox-runner"):
        assert not [rel for rel in PLANTED if (rehearsal.work / folder / "home" / rel).exists()]
    assert "make store-maintain: success" in rehearsal.row("maintain", "store-maintain")
    assert (
        "`make trust` exits 2: ragbench trust: error: not running a trusted step: "
        "~/.gitconfig" in rehearsal.stdout
    )
