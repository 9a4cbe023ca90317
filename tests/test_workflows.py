"""The GitHub workflows: linted (GitHub's workflow schema, actionlint), every step a Makefile
target that exists, the rules they must keep; the PR comment and verdict commands; and the
whole chain rehearsed here from a fresh clone (scripts/rehearse.py)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragbench import github
from ragbench.report import MARKER
from ragbench.store import Store
from scripts import rehearse
from scripts.fake_github import FakeGitHub

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent


def test_workflows_match_githubs_schema():
    out = subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows", *WORKFLOWS],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_with_the_runner_labels():
    out = subprocess.run([BIN / "actionlint"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_step_is_a_make_target_that_exists():
    for path in WORKFLOWS:
        for job in rehearse.load_workflow(path)["jobs"].values():
            for step in job["steps"]:
                if "run" not in step:
                    assert step["uses"].startswith("actions/"), (path.name, step)
                    continue
                words = step["run"].split()
                assert words[0] == "make", (path.name, step["run"])
                env = {"PATH": "/usr/bin:/bin", "PR": "1"}
                out = subprocess.run(["make", "-n", *words[1:]], capture_output=True,
                                     text=True, cwd=REPO, env=env)  # fmt: skip
                assert out.returncode == 0, (path.name, step["run"], out.stderr)


def test_the_rules_the_workflows_keep():
    flows = {p.stem: rehearse.load_workflow(p) for p in WORKFLOWS}
    assert set(flows) == {"cpu-tests", "bench-main", "bench-pr"}
    for name in ("bench-main", "bench-pr"):
        flow = flows[name]
        assert flow["concurrency"] == {"group": "gpu-runner", "cancel-in-progress": False}
        (job,) = flow["jobs"].values()
        assert job["runs-on"] == ["self-hosted", "linux", "gpu"] and job["timeout-minutes"]
    assert flows["bench-main"]["on"] == {"push": {"branches": ["main"]}}
    (gate,) = flows["bench-pr"]["jobs"].values()
    assert gate["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    steps = [s.get("run") for s in gate["steps"]]
    assert steps[-3:] == ["make gate", "make gate-comment", "make gate-verdict"]
    assert "perf-regression-accepted" in gate["steps"][-1]["env"]["ACCEPTED_BY"]
    (test,) = flows["cpu-tests"]["jobs"].values()
    assert test["runs-on"] == "ubuntu-latest" and test["steps"][-1]["run"] == "make browser test"
    for flow in flows.values():
        assert "secrets" not in json.dumps(flow["on"])
        assert all(job.get("timeout-minutes") for job in flow["jobs"].values())


def test_the_pr_comment_is_posted_once_then_updated():
    with FakeGitHub(token="t0ken") as gh:
        for i in range(120):
            gh.add(7, f"someone else {i}")
        assert github.comment("report 1", "o/r", 7, "t0ken", gh.url) == "posted comment 121"
        assert (github.comment(f"{MARKER}\nreport 2", "o/r", 7, "t0ken", gh.url)
                == "updated comment 121")  # fmt: skip
        mine = [c for c in gh.comments[7] if MARKER in c["body"]]
        assert len(mine) == 1 and "report 2" in mine[0]["body"] and len(gh.comments[7]) == 121
        with pytest.raises(github.GitHubError, match="401"):
            github.comment("report 3", "o/r", 7, "wrong", gh.url)


def test_verdict_fails_on_a_regression_unless_accepted(tmp_path):
    gate_json = tmp_path / "gate.json"
    regression = {"benchmark": "kernel.KernelLatency", "metric": "gpu_us",
                  "param_key": "backend=triton", "status": "regression", "change": 0.1}  # fmt: skip
    gate_json.write_text(json.dumps({"base": "b" * 40, "head": "h" * 40, "regressions": []}))
    cmd = [sys.executable, "-m", "ragbench", "verdict", "--gate-json", str(gate_json),
           "--store", str(tmp_path / "s.duckdb")]  # fmt: skip
    assert subprocess.run(cmd, cwd=REPO).returncode == 0
    gate_json.write_text(json.dumps({"base": "b" * 40, "head": "h" * 40,
                                     "regressions": [regression]}))  # fmt: skip
    assert subprocess.run(cmd, cwd=REPO).returncode == 1
    assert subprocess.run([*cmd, "--accepted-by", "maintainer"], cwd=REPO).returncode == 0
    with Store(tmp_path / "s.duckdb", read_only=True) as store:
        (row,) = store.acceptances("h" * 40)
        assert row["accepted_by"] == "maintainer" and row["metric"] == "gpu_us"


def test_the_rehearsal_reads_every_expression_in_the_workflows(tmp_path):
    event = rehearse.pr_event("labeled", "t", 3, "b" * 40, "h" * 40, labels=["x", rehearse.LABEL],
                              actor="maintainer")  # fmt: skip
    runner = rehearse.Runner(tmp_path, origin=tmp_path, api_url="", bench=[], verbose=False)
    runner.workspace = REPO  # for hashFiles
    ctx, fns = runner.contexts(event), runner.functions({"failed": False})
    for path in WORKFLOWS:
        text = path.read_text()
        for expr in re.findall(r"\$\{\{(.*?)\}\}", text):
            rehearse.Expression(expr, ctx, fns).value()
    flow = rehearse.load_workflow(REPO / ".github" / "workflows" / "bench-pr.yml")
    (gate,) = flow["jobs"].values()
    accepted = gate["steps"][-1]["env"]["ACCEPTED_BY"]
    assert rehearse.interpolate(accepted, ctx, fns) == "maintainer"
    ctx["github"]["event"]["pull_request"]["labels"] = []
    assert rehearse.interpolate(accepted, ctx, fns) == ""
    assert rehearse.condition(gate["if"], ctx, fns)
    ctx["github"]["event"]["pull_request"]["head"]["repo"]["full_name"] = "fork/ragged"
    assert not rehearse.condition(gate["if"], ctx, fns)
    digest = hashlib.sha256(hashlib.sha256((REPO / "pyproject.toml").read_bytes()).digest())
    assert rehearse.interpolate("${{ hashFiles('pyproject.toml') }}", ctx, fns) == (
        digest.hexdigest()
    )


def test_the_workflows_rehearsed_from_a_fresh_clone(tmp_path):
    """scripts/rehearse.py: bench-main on a push, then bench-pr on a clean commit, a commit
    that breaks the triton backend's numerics, the acceptance label, and a fork; the gate
    measures base and head through asv, alternating (the kernel-error table, to stay short).
    About 5 minutes on 2 cores, most of it the fresh clone's set-up and three gates."""
    work = tmp_path / "rehearsal"
    out = subprocess.run(
        [sys.executable, "-m", "scripts.rehearse", "--bench", r"^cpu\.KernelError",
         "--workdir", str(work)], capture_output=True, text=True, cwd=REPO, timeout=1800,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr[-5000:]
    assert "All as expected" in out.stdout
    rows = {line.split(" | ")[0].strip("| "): line for line in out.stdout.splitlines()
            if line.startswith("| pr-") or line.startswith("| push")}  # fmt: skip
    assert "make gate-verdict: failure" in rows["pr-regression"]
    assert "make gate-verdict: success" in rows["pr-accepted"]
    assert "| skipped |" in rows["pr-fork"]
    with Store(work / "runner" / "perf.duckdb", read_only=True) as store:
        runs = store.runs(gate_runs=True, label="gate:%")
        gates = {r["label"].rsplit(":", 2)[0] for r in runs}
        assert len(gates) == 3  # opened, synchronize, labeled
        for g in gates:  # each gate measured base and head in alternating rounds
            sides = sorted(r["label"].rsplit(":", 2)[1:] for r in runs if r["label"].startswith(g))
            assert sides == [["base", "0"], ["base", "1"], ["head", "0"], ["head", "1"]]
        accepted = store.acceptances()
        assert {a["accepted_by"] for a in accepted} == {"maintainer"}
        assert {a["metric"] for a in accepted} == {"error_ratio"}
