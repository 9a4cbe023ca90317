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
from ragbench.github import MARKER
from ragbench.store import Store
from ragbench.verdicts import JSON_SCHEMA
from scripts import rehearse
from scripts import workflow_expressions as expressions
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
    assert set(flows) == {"cpu-tests", "bench-main", "bench-pr", "bench-pr-verdict",
                          "bench-accept", "bench-versions", "store-maintain"}  # fmt: skip
    for name, flow in flows.items():
        assert "secrets" not in json.dumps(flow["on"])
        assert all(job.get("timeout-minutes") for job in flow["jobs"].values())
        if name == "cpu-tests":
            continue
        (job,) = flow["jobs"].values()
        assert job["runs-on"] == ["self-hosted", "linux", "gpu"]
        (checkout,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")]
        assert checkout["with"]["persist-credentials"] is False, name  # no token in .git/config
    groups = [f["concurrency"]["group"] for f in flows.values() if "concurrency" in f]
    assert len(groups) == len(set(groups)), "a shared group cancels another workflow's runs"
    assert flows["bench-main"]["on"] == {"push": {"branches": ["main"]}}
    assert flows["bench-main"]["concurrency"] == {"group": "bench-main",
                                                  "cancel-in-progress": False}  # fmt: skip

    # the pull request's code: no token, no persistent store, no label runs, no forks
    pr = flows["bench-pr"]
    text = (REPO / ".github" / "workflows" / "bench-pr.yml").read_text()
    assert "secrets." not in text and "RAGBENCH_STORE" not in text and "STORE:" not in text
    assert pr["permissions"] == {"contents": "read"}
    assert pr["on"] == {"pull_request": {"types": ["opened", "synchronize", "reopened"]}}
    (gate,) = pr["jobs"].values()
    assert gate["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    runs = [s.get("run") for s in gate["steps"]]
    assert runs[-2] == "make gate-pr" and gate["steps"][-1]["if"] == "always()"

    # the trusted jobs: the base branch's code, checked out without a ref
    verdict = flows["bench-pr-verdict"]
    assert verdict["on"] == {"workflow_run": {"workflows": ["bench-pr"], "types": ["completed"]}}
    accept = flows["bench-accept"]
    assert accept["on"] == {"pull_request_target": {"types": ["labeled", "unlabeled"]}}
    assert "perf-regression-accepted" in accept["jobs"]["accept"]["if"]
    for flow, target in ((verdict, "make gate-verdict"), (accept, "make gate-accept")):
        (job,) = flow["jobs"].values()
        checkout = job["steps"][0]
        assert checkout["uses"].startswith("actions/checkout") and "ref" not in checkout["with"]
        assert job["steps"][-1]["run"] == target
        assert job["steps"][-1]["env"] == {"GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}"}
        assert "head.repo.full_name == github.repository" in job["if"].replace(
            "head_repository", "head.repo"
        )
    # the weekly upgrade report: main's code on a schedule, no store, no token
    versions = flows["bench-versions"]
    assert set(versions["on"]) == {"schedule", "workflow_dispatch"}
    text = (REPO / ".github" / "workflows" / "bench-versions.yml").read_text()
    assert "secrets." not in text and "RAGBENCH_STORE" not in text
    assert versions["permissions"] == {"contents": "read"}
    assert [s.get("run") for s in versions["jobs"]["upgrade"]["steps"] if "run" in s] == [
        "make setup", "make bench-versions"]  # fmt: skip
    # the weekly maintenance of main's store: main's code on a schedule, no token
    maintain = flows["store-maintain"]
    assert set(maintain["on"]) == {"schedule", "workflow_dispatch"}
    assert maintain["permissions"] == {"contents": "read"}
    assert "secrets." not in (REPO / ".github" / "workflows" / "store-maintain.yml").read_text()
    (job,) = maintain["jobs"].values()
    assert [s.get("run") for s in job["steps"] if "run" in s] == ["make setup",
                                                                 "make store-maintain"]  # fmt: skip
    (test,) = flows["cpu-tests"]["jobs"].values()
    assert test["runs-on"] == "ubuntu-latest"
    assert test["steps"][-1]["run"] == "make browser postgres test"


def test_the_rehearsal_reads_every_expression_in_the_workflows(tmp_path):
    runner = rehearse.Runner(tmp_path, origin=tmp_path, api_url="", bench=[], verbose=False)
    runner.workspace = REPO  # for hashFiles
    scene = rehearse.Scenario(tmp_path, ["a" * 40] * 4, FakeGitHub("t"))
    pr = scene.pr("opened", "t", 3, "h" * 40)
    label = scene.pr("labeled", "t", 3, "h" * 40, label=rehearse.LABEL, sender="maintainer")
    failed = [rehearse.JobResult("bench-pr", "gate", "failure")]
    done = rehearse.workflow_run_event("bench-pr", 7, pr, failed, "m")
    push = scene.push("push", "b" * 40, "c" * 40, "success")
    events = {"bench-pr": pr, "bench-accept": label, "bench-pr-verdict": done,
              "bench-main": push, "cpu-tests": push, "bench-versions": push,
              "store-maintain": push}  # fmt: skip
    for path in WORKFLOWS:
        ctx, fns = runner.contexts(events[path.stem]), runner.functions({"failed": False})
        for expr in re.findall(r"\$\{\{(.*?)\}\}", path.read_text()):
            expressions.Expression(expr, ctx, fns).value()
        for job in rehearse.load_workflow(path)["jobs"].values():
            if "if" in job:
                expressions.condition(job["if"], ctx, fns)
    ctx, fns = runner.contexts(done), runner.functions({"failed": False})
    assert expressions.interpolate("${{ github.event.workflow_run.pull_requests[0].number }}", ctx,
                                fns) == "3"  # fmt: skip
    (job,) = rehearse.load_workflow(REPO / ".github/workflows/bench-pr-verdict.yml")[
        "jobs"
    ].values()
    assert expressions.condition(job["if"], ctx, fns)
    ctx["github"]["event"]["workflow_run"]["conclusion"] = "cancelled"
    assert not expressions.condition(job["if"], ctx, fns)
    ctx = runner.contexts(scene.pr("opened", "t", 4, "h" * 40, fork=True))
    (gate,) = rehearse.load_workflow(REPO / ".github/workflows/bench-pr.yml")["jobs"].values()
    assert not expressions.condition(gate["if"], ctx, fns)
    digest = hashlib.sha256(hashlib.sha256((REPO / "pyproject.toml").read_bytes()).digest())
    assert expressions.interpolate("${{ hashFiles('pyproject.toml') }}", ctx, fns) == (
        digest.hexdigest()
    )


def test_the_pr_comment_is_posted_once_then_updated_across_pages():
    with FakeGitHub(token="t0ken") as gh:
        for i in range(120):
            gh.add(7, f"someone else {i}")
        client = github.Client("o/r", "t0ken", gh.url)
        assert client.comment(7, "report 1") == "posted comment 121"
        assert client.comment(7, f"{MARKER}\nreport 2") == "updated comment 121"
        mine = [c for c in gh.comments[7] if MARKER in c["body"]]
        assert len(mine) == 1 and "report 2" in mine[0]["body"] and len(gh.comments[7]) == 121
        with pytest.raises(github.GitHubError, match="401"):
            github.Client("o/r", "wrong", gh.url).comment(7, "report 3")


def test_the_verdict_offline_fails_unless_accepted(tmp_path):
    head = "h" * 40
    gate_json = tmp_path / "gate.json"
    failure = {"benchmark": "kernel.KernelLatency", "metric": "gpu_us",
               "param_key": "backend=triton", "status": "regression", "change": 0.1,
               "note": ""}  # fmt: skip
    doc = {"schema": JSON_SCHEMA, "base": "b" * 40, "head": head, "machine": "m", "verdict": "pass",
           "failures": []}  # fmt: skip
    gate_json.write_text(json.dumps(doc))
    store = tmp_path / "s.duckdb"
    cmd = [sys.executable, "-m", "ragbench", "verdict", "--gate-json", str(gate_json),
           "--store", str(store), "--pr", "5", "--head", head]  # fmt: skip
    assert subprocess.run(cmd, cwd=REPO).returncode == 0
    gate_json.write_text(json.dumps({**doc, "verdict": "fail", "failures": [failure]}))
    assert subprocess.run(cmd, cwd=REPO).returncode == 1
    cell = ("kernel.KernelLatency", "gpu_us", "backend=triton")
    Store(store).accept(head, *cell, "label", "me", pr=4)  # another PR with the same head
    assert subprocess.run(cmd, cwd=REPO).returncode == 1
    Store(store).accept(head, *cell, "label", "me", pr=5)
    assert subprocess.run(cmd, cwd=REPO).returncode == 0
    assert Store(store, read_only=True).gate(5, head)["failures"] == [failure]
    for broken in ({**doc, "verdict": "pass", "failures": [failure]}, {**doc, "schema": 9},
                   {**doc, "failures": [{"status": "regression"}]}):  # fmt: skip
        gate_json.write_text(json.dumps(broken))
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
