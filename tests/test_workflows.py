"""The GitHub workflows: linted (GitHub's workflow schema, actionlint), every step a Makefile
target that exists, the rules they must keep; the PR comment and verdict commands; and the
whole chain rehearsed here from a fresh clone (scripts/rehearse.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragbench import github, pr, trust
from ragbench.github import MARKER
from ragbench.store import Store
from ragbench.verdicts.status import JSON_SCHEMA
from scripts import rehearse, workflow_runner
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


TRUSTED = ["self-hosted", "linux", "gpu", "trusted"]
SANDBOX = ["self-hosted", "linux", "gpu", "sandbox"]


def test_the_rules_the_workflows_keep():
    flows = {p.stem: rehearse.load_workflow(p) for p in WORKFLOWS}
    assert set(flows) == {"cpu-tests", "bench-main", "bench-pr", "bench-accept",
                          "bench-versions", "store-maintain"}  # fmt: skip
    for name, flow in flows.items():
        assert "secrets" not in json.dumps(flow["on"])
        assert all(job.get("timeout-minutes") for job in flow["jobs"].values())
        if name == "cpu-tests":
            continue
        for job in flow["jobs"].values():
            assert job["runs-on"] in (TRUSTED, SANDBOX), name
            (checkout,) = [
                s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")
            ]
            assert checkout["with"]["persist-credentials"] is False, name  # no token in .git/config
            # the base branch's code only: what a trusted step runs is main's
            assert not {"ref", "repository"} & set(checkout["with"]), name
    groups = [f["concurrency"]["group"] for f in flows.values() if "concurrency" in f]
    assert len(groups) == len(set(groups)), "a shared group cancels another workflow's runs"
    assert flows["bench-main"]["on"] == {"push": {"branches": ["main"]}}
    assert flows["bench-main"]["concurrency"] == {"group": "bench-main",
                                                  "cancel-in-progress": False}  # fmt: skip

    # pull requests: main's file (pull_request_target), three jobs; the PR's code runs only in
    # the sandbox job, which holds no token and no store
    pr = flows["bench-pr"]
    assert pr["on"] == {"pull_request_target": {
        "types": ["opened", "synchronize", "reopened", "labeled"]}}  # fmt: skip
    assert pr["permissions"] == {}
    approve, gate, verdict = (pr["jobs"][k] for k in ("approve", "gate", "verdict"))
    assert approve["runs-on"] == TRUSTED and verdict["runs-on"] == TRUSTED
    assert gate["runs-on"] == SANDBOX and gate["needs"] == "approve"
    assert gate["permissions"] == {"contents": "read"}
    assert "secrets." not in json.dumps(gate) and "STORE" not in json.dumps(gate)
    assert [s.get("run") for s in gate["steps"] if "run" in s] == ["make gate-sandbox"]
    assert gate["steps"][-1]["if"] == "always()"  # the artifact, whatever happened
    assert [s.get("run") for s in approve["steps"] if "run" in s] == ["make gate-approve"]
    assert "bench-gpu" in approve["if"]
    assert verdict["needs"] == ["approve", "gate"]
    assert "needs.approve.result == 'success'" in verdict["if"]
    assert verdict["steps"][-1] == {
        "run": "make gate-verdict",
        "env": {"GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}"},
    }
    # the sandbox's .venv cache is never one a trusted job restores
    keys = {json.dumps(job["runs-on"]): {s["with"]["key"].split("${{")[0] for s in job["steps"]
                                         if s.get("uses", "").startswith("actions/cache")}
            for flow in flows.values() for job in flow["jobs"].values()}  # fmt: skip
    assert not keys[json.dumps(SANDBOX)] & keys[json.dumps(TRUSTED)]

    # the acceptance: the base branch's code, checked out without a ref
    accept = flows["bench-accept"]
    assert accept["on"] == {"pull_request_target": {"types": ["labeled", "unlabeled"]}}
    assert "perf-regression-accepted" in accept["jobs"]["accept"]["if"]
    (job,) = accept["jobs"].values()
    assert job["steps"][-1]["run"] == "make gate-accept"
    assert job["steps"][-1]["env"] == {"GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}"}
    # the weekly upgrade report: main's code on a schedule, no store, no token
    versions = flows["bench-versions"]
    assert set(versions["on"]) == {"schedule", "workflow_dispatch"}
    text = (REPO / ".github" / "workflows" / "bench-versions.yml").read_text()
    assert "secrets." not in text and "RAGBENCH_STORE" not in text
    assert versions["permissions"] == {"contents": "read"}
    assert [s.get("run") for s in versions["jobs"]["upgrade"]["steps"] if "run" in s] == [
        "make bench-versions"]  # fmt: skip
    # the weekly maintenance of main's store: main's code on a schedule, no token
    maintain = flows["store-maintain"]
    assert set(maintain["on"]) == {"schedule", "workflow_dispatch"}
    assert maintain["permissions"] == {"contents": "read"}
    assert "secrets." not in (REPO / ".github" / "workflows" / "store-maintain.yml").read_text()
    (job,) = maintain["jobs"].values()
    assert [s.get("run") for s in job["steps"] if "run" in s] == ["make store-maintain"]
    (test,) = flows["cpu-tests"]["jobs"].values()
    assert test["runs-on"] == "ubuntu-latest"
    assert test["steps"][-1]["run"] == "make browser postgres test"


def test_pull_request_code_reaches_the_gpu_only_through_mains_files(tmp_path):
    """What GitHub runs for a pull request is its own copy of the workflow files (pull_request:
    the merge commit's): none of ours may run on a self-hosted runner from there, and the
    runner groups (docs/runner.md, modelled by the rehearsal's runner) take a job only from
    main's files: a fork's job on the GPU labels finds no runner, main's bench-pr jobs each
    find exactly the runner their labels name."""
    pull_request_events = {"pull_request", "pull_request_review", "pull_request_review_comment"}
    for path in WORKFLOWS:
        flow = rehearse.load_workflow(path)
        on = flow["on"] if isinstance(flow["on"], dict) else dict.fromkeys(flow["on"])
        if pull_request_events & set(on):
            assert all("self-hosted" not in job["runs-on"] for job in flow["jobs"].values())
    runner = rehearse.Runner(tmp_path, origin=tmp_path, api_url="", bench=[], verbose=False)
    event = rehearse.Event("pull_request", "t", {}, "h" * 40, "refs/pull/2/merge")
    fork = {"runs-on": ["self-hosted", "linux", "gpu"], "steps": [{"run": "make plant"}]}
    for labels in (["self-hosted", "linux", "gpu"], TRUSTED, SANDBOX):
        job = {**fork, "runs-on": labels}
        for stem in ("bench-pr", "own"):  # main's name, a file of its own
            got = runner.run_job(stem, "own", job, event, ref="refs/pull/2/merge", source="pr")
            assert got.conclusion == "no runner", (stem, labels)
        got = runner.run_job("own", "own", job, event, ref=rehearse.MAIN)  # not selected
        assert got.conclusion == "no runner"
    for path in WORKFLOWS:
        for job in rehearse.load_workflow(path)["jobs"].values():
            if "self-hosted" in job["runs-on"]:
                ref = workflow_runner.workflow_ref(path.stem, rehearse.MAIN)
                takers = [s.name for s in runner.services if s.takes(job["runs-on"], ref)]
                assert takers == [job["runs-on"][-1]], (path.name, takers)
    # docs/runner.md names each group's selected workflows as the rehearsal's runner has them
    doc = (REPO / "docs" / "runner.md").read_text()
    for _labels, stems in workflow_runner.GROUPS.values():
        for stem in stems:
            assert f"OWNER/REPO/.github/workflows/{stem}.yml@refs/heads/main" in doc


def test_every_trusted_target_checks_the_runner_first():
    """In a GitHub job, each Makefile target a trusted job calls runs `make trust` before
    anything else (before the .venv: pip would read a planted pip.conf)."""
    for target in ("bench-main", "bench-summary", "gate-verdict", "gate-accept",
                   "store-maintain", "bench-versions", "gate-approve"):  # fmt: skip
        # --no-print-directory: under `make test` make says "Entering directory" first
        out = subprocess.run(["make", "--no-print-directory", "-n", target,
                              "GITHUB_ACTIONS=true", "PR=1"],
                             capture_output=True, text=True, cwd=REPO)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[0] == (
            "python3 -s -E -m ragbench.trust check --list --workspace ."
        ), target
    out = subprocess.run(["make", "-n", "gate-sandbox", "GITHUB_ACTIONS=true", "PR=1"],
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert "ragbench.trust" not in out.stdout  # the sandbox runner holds nothing to check


def test_the_rehearsal_reads_every_expression_in_the_workflows(tmp_path):
    runner = rehearse.Runner(tmp_path, origin=tmp_path, api_url="", bench=[], verbose=False)
    runner.workspace, runner.run_id = REPO, 7  # for hashFiles; GitHub's run ids are never 0
    scene = rehearse.Scenario(tmp_path, ["a" * 40] * 4, FakeGitHub("t"))
    pr = scene.pr("opened", "t", 3, "h" * 40)
    label = scene.pr("labeled", "t", 3, "h" * 40, label=rehearse.LABEL, sender="maintainer")
    push = scene.push("push", "b" * 40, "c" * 40, "success")
    events = {"bench-pr": pr, "bench-accept": label, "bench-main": push, "cpu-tests": push,
              "bench-versions": push, "store-maintain": push}  # fmt: skip
    needs = {"approve": {"result": "success"}, "gate": {"result": "failure"}}
    for path in WORKFLOWS:
        ctx, fns = runner.contexts(events[path.stem]), runner.functions({"failed": False})
        ctx["needs"] = needs
        for expr in re.findall(r"\$\{\{(.*?)\}\}", path.read_text(), re.S):
            expressions.Expression(expr, ctx, fns).value()
        for job in rehearse.load_workflow(path)["jobs"].values():
            if "if" in job:
                expressions.condition(job["if"], ctx, fns)
    # bench-pr: the approval runs for pushes and the bench-gpu label only; the verdict after a
    # failed gate, not after a refused approval; other labels never cancel a gate
    flow = rehearse.load_workflow(REPO / ".github/workflows/bench-pr.yml")
    approve, verdict = flow["jobs"]["approve"], flow["jobs"]["verdict"]
    fns = runner.functions({"failed": False})
    for action, name, runs in (
        ("opened", None, True),
        ("synchronize", None, True),
        ("labeled", "bench-gpu", True),
        ("labeled", rehearse.LABEL, False),
    ):
        event = scene.pr(action, "t", 4, "h" * 40, fork=True, label=name)
        ctx = {**runner.contexts(event), "needs": needs}
        assert expressions.condition(approve["if"], ctx, fns) is runs, (action, name)
        group = expressions.interpolate(flow["concurrency"]["group"], ctx, fns)
        assert group == ("bench-pr-4-gate" if runs else f"bench-pr-4-{runner.run_id}")
    assert expressions.condition(verdict["if"], ctx, fns)
    ctx["needs"] = {"approve": {"result": "failure"}, "gate": {"result": "skipped"}}
    assert not expressions.condition(verdict["if"], ctx, fns)
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


def _git_checkout(path: Path) -> Path:
    path.mkdir()
    for args in (["init", "--quiet"], ["add", "-A"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / ".gitignore").write_text("/results/\n")
    (path / "tracked.txt").write_text("main's\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m",
                    "c"], cwd=path, check=True)  # fmt: skip
    return path


def test_the_trust_check_refuses_what_a_pull_requests_job_could_plant(tmp_path):
    """ragbench.trust.check: nothing in a fresh home and a clean checkout; each file a PR's
    job could have planted for the trusted jobs, each variable that redirects what they run,
    and each cache entry another user could have written, is a finding, and the command
    refuses (exit 2, one line, no traceback) until it is gone."""
    home, ws = tmp_path / "home", _git_checkout(tmp_path / "ws")
    home.mkdir()
    uid = os.geteuid()
    assert trust.check(home, ws, {}, uid) == []

    def found(env=None, as_uid=uid) -> list[str]:
        return [f.what for f in trust.check(home, ws, env or {}, as_uid)]

    planted = [home / ".gitconfig", home / ".config/pip/pip.conf",
               home / ".local/lib/python3.11/site-packages/planted.pth"]  # fmt: skip
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("[core]\n\tfsmonitor = echo planted\n")
        assert found() == ["~/" + str(path.relative_to(home))]
        if uid == 0:  # a read-only file of root's, for a trusted user who is not root
            path.chmod(0o644)
            assert found(as_uid=1000) == []
        path.unlink()
    # the rule itself: root's and read-only, for a trusted user who is not root
    assert trust.the_admins(os.stat_result((0o100644, 0, 0, 1, 0, 0, 9, 0, 0, 0)), 1000)
    for mode, owner, user in ((0o100664, 0, 1000), (0o100644, 1000, 1000), (0o100644, 999, 1000),
                              (0o100644, 0, 0)):  # fmt: skip
        assert not trust.the_admins(os.stat_result((mode, 0, 0, 1, owner, 0, 9, 0, 0, 0)), user)
    env = {"PYTHONPATH": "/x", "PIP_INDEX_URL": "https://pypi.invalid", "GIT_CONFIG_COUNT": "1",
           "LD_PRELOAD": "/x.so", "PIP_NO_CACHE_DIR": "1", "PATH": "/usr/bin",
           "UV_INDEX_URL": "https://pypi.invalid"}  # fmt: skip
    assert found(env) == ["$GIT_CONFIG_COUNT", "$LD_PRELOAD", "$PIP_INDEX_URL", "$PYTHONPATH",
                          "$UV_INDEX_URL"]  # fmt: skip

    # the ragged build cache: the trusted jobs' own files pass; another user's, a file others
    # may write, or a link do not (nor in a tuning directory the environment names)
    build = home / ".cache/ragged/build"
    build.mkdir(parents=True)
    module = build / "ragged_fastpath.so"
    module.write_bytes(b"built")
    module.chmod(0o644)
    assert found() == []
    assert found(as_uid=uid + 1) == ["~/.cache/ragged", "~/.cache/ragged/build"]  # each cache
    module.chmod(0o666)
    assert found() == ["~/.cache/ragged/build/ragged_fastpath.so"]
    module.unlink()
    (build / "ragged_fastpath.so").symlink_to(tmp_path / "elsewhere.so")
    assert found() == ["~/.cache/ragged/build/ragged_fastpath.so"]
    (build / "ragged_fastpath.so").unlink()
    tuning = tmp_path / "tuning"
    tuning.mkdir()
    (tuning / "H100-triton3.6.json").write_text("{}")
    (tuning / "H100-triton3.6.json").chmod(0o662)
    assert found({"RAGGED_TUNING_DIR": str(tuning)}) == [str(tuning / "H100-triton3.6.json")]

    # the workspace: its ignored outputs pass; a changed or an added file does not
    (ws / "results").mkdir()
    (ws / "results" / "gate.json").write_text("{}")
    assert found() == []
    (ws / "tracked.txt").write_text("changed\n")
    (ws / "new.py").write_text("")
    assert found() == [f"tracked.txt and 1 more in {ws}"]

    # the command: the system's python3, as `make trust` runs it
    (home / ".gitconfig").write_text("[core]\n\tfsmonitor = echo planted\n")
    cmd = ["python3", "-s", "-E", "-m", "ragbench.trust", "check", "--home", str(home)]
    clean = {"PATH": os.environ["PATH"], "HOME": str(home)}
    out = subprocess.run(cmd, cwd=REPO, env=clean, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("ragbench trust: error: not running a trusted step: ~/.gitconfig")
    assert len(out.stderr.strip().splitlines()) == 1
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "trust", "check", "--home", str(home)],
        cwd=REPO,
        env={**clean, "PIP_INDEX_URL": "x"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "(1 more, ragbench trust check --list shows them)" in out.stderr
    (home / ".gitconfig").unlink()
    out = subprocess.run(cmd, cwd=REPO, env=clean, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_a_pull_requests_code_runs_for_writers_and_the_bench_gpu_label():
    """ragbench.trust.approve: a push by a user with write access, or the bench-gpu label
    added by one, runs the PR's code; a push by anyone else does not, and takes a bench-gpu
    label given on an earlier head off; other labels and actions run nothing."""
    assert trust.WRITERS == pr.WRITERS
    with FakeGitHub(token="t0ken") as gh:
        gh.permissions.update({"dev": "write", "maintainer": "admin", "forker": "read"})
        gh.labels[5] = {trust.LABEL}
        client = github.Client("o/r", "t0ken", gh.url)

        def approve(user, action, label=None):
            return trust.approve(client, pr=5, user=user, action=action, label=label,
                                 log=lambda m: None)  # fmt: skip

        assert approve("dev", "synchronize") and approve("dev", "opened")
        assert approve("maintainer", "labeled", trust.LABEL)
        assert not approve("forker", "labeled", trust.LABEL)  # a reader cannot approve
        assert gh.labels[5] == {trust.LABEL}
        assert not approve("forker", "synchronize")  # a fork's new head: approval is stale
        assert gh.labels[5] == set()
        assert not approve("maintainer", "labeled", rehearse.LABEL)
        assert not approve("maintainer", "closed")
        cmd = [sys.executable, "-m", "ragbench", "trust", "approve", "--pr", "5", "--action",
               "opened", "--repo", "o/r", "--user"]  # fmt: skip
        env = {**os.environ, "GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": gh.url}
        assert subprocess.run([*cmd, "dev"], env=env, cwd=REPO).returncode == 0
        assert subprocess.run([*cmd, "forker"], env=env, cwd=REPO).returncode == 1
        env.pop("GITHUB_TOKEN")
        out = subprocess.run([*cmd, "dev"], env=env, cwd=REPO, capture_output=True, text=True)
        assert out.returncode == 2 and "Traceback" not in out.stderr


def test_the_sandbox_refuses_to_run_without_a_throwaway_environment(tmp_path):
    """scripts/sandbox.py (make gate-sandbox): RAGBENCH_SANDBOX unset, unknown, a user that
    does not exist, or the rehearsal's same-user home outside a rehearsal: exit 2, one line,
    before anything of the pull request's is fetched."""
    cmd = [sys.executable, "-m", "scripts.sandbox", "--pr", "1", "--base", "b" * 40, "--head",
           "h" * 40, "--venv", sys.prefix, "--out", str(tmp_path / "out"), "--backend"]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    for backend, says in (("", "expected user:NAME"), ("docker:x", "expected user:NAME"),
                          ("user:ragbench-no-such-user", "no user"),
                          ("rehearsal", "RAGBENCH_REHEARSAL=1")):  # fmt: skip
        out = subprocess.run([*cmd, backend], cwd=REPO, env=env, capture_output=True, text=True)
        assert out.returncode == 2 and says in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
