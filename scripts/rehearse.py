"""Rehearse the GitHub workflows on this machine, with no GitHub: the benchmark workflows'
steps, in order, from a fresh clone, through a scenario of fifteen events.

    python -m scripts.rehearse                                   # make rehearse
    python -m scripts.rehearse --bench '^cpu\\.KernelError' --keep  # the test's short run

The scenario (each event runs every job of every workflow it triggers, as GitHub would, and
a run's completion triggers the ``workflow_run`` workflows):

1. pushes to main: HEAD~3..HEAD~2 (bench-main measures it into the runner's store), then
   HEAD~2..HEAD~1, whose run GitHub cancels while it waits (nothing runs), then HEAD~1..HEAD:
   bench-main catches the dropped commit up; artifacts; the summary;
2. PR 1 opened by a developer with write access, one documentation commit: bench-pr approves
   it, gates it in the sandbox (a new home, scripts/sandbox.py) and its verdict job records
   it, posts the comment, sets ragbench/gate;
3. PR 1 synchronize, a commit that makes the triton backend's output NaN: the gate fails
   closed (the cells base has and head lacks), the comment is updated, the status fails;
4. the perf-regression-accepted label by a user with read access: refused (bench-accept);
   another label: nothing runs; the label taken off, put on by a maintainer (accepted: the
   status passes), taken off (withdrawn: it fails), put on again (accepted);
5. PR 1 synchronize, a later documentation commit: the acceptance does not carry over, the
   status fails and the stale label is taken off;
6. PR 2 from a fork, opened by a user with read access. Its commit rewrites bench-pr.yml (on
   its own pull_request, no approval, a job of its own on the trusted labels) and makes its
   `make gate-pr` plant ~/.gitconfig, ~/.config/pip/pip.conf and a ragged build module, write
   its environment into its report and fail. The fork's file finds no runner (the runner
   groups select main's files only); main's bench-pr does not run its code (read access);
7. a maintainer adds the bench-gpu label to PR 2: its code runs in the sandbox, plants in the
   sandbox's home, and is gone with it; the verdict (trusted) says the gate gave no verdict;
8. store-maintain by hand (workflow_dispatch): the next trusted job, whose trust check passes.
It then checks the store (main's runs only: nothing from a PR's code), the acceptances, the
statuses, the one comment (and that a marked comment by someone else was left alone), that
the gate job's environment and the fork's own held neither the token nor the store, that the
sandbox's home is gone and the trusted runner's home holds nothing the fork planted, that
`ragbench trust check` refuses once those files are put there, and the artifacts.

GitHub's parts, stood in for:
- the repository: a bare clone of this one (committed work only; HEAD as main) as origin, a
  pull request's head also as refs/pull/N/head;
- the runners (scripts/workflow_runner.py): a trusted and a sandbox runner service, each with
  its own home and work folder, reused by every job it takes, as a self-hosted runner's is;
  each takes only jobs with its labels from its runner group's selected workflow files (main's,
  docs/runner.md); the store (vars.RAGBENCH_STORE) beside the trusted one; one job at a time;
- the workflow files: main's, but for pull_request events the pull request's own (GitHub
  takes them from the merge commit; here from its head);
- actions/checkout: a fresh clone of origin at the ref (default: the event's sha, which for
  pull_request_target and workflow_run is main's tip); actions/cache: the paths hard-linked
  into a cache by key after a successful job and back on a hit; actions/upload-artifact and
  download-artifact: copies under artifacts/<run id>/<name>, rooted at the paths' common
  folder; actions/setup-python: this machine's python3, compared with the version asked for;
- ${{ }} expressions: evaluated over github (a pull request's sha is its head, not a merge
  commit), vars, secrets, runner and needs contexts; the REST API: scripts/fake_github.py;
- `run:` steps: bash -eo pipefail in the workspace, with the job's and the step's env and the
  usual GITHUB_* variables; job timeouts and continue-on-error are kept.
cpu-tests is left out: it is `make browser test`, .ci/run's job.

Exit 0 when everything ended as expected, 1 when something did not, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ragbench import trust
from ragbench.github import MARKER
from ragbench.store import Store
from scripts.fake_github import FakeGitHub
from scripts.workflow_expressions import RehearsalError
from scripts.workflow_runner import (
    MAIN,
    REPOSITORY,
    TOKEN,
    Event,
    JobResult,
    Runner,
    git,
    load_workflow,
    load_workflow_text,
    log,
    triggers,
)

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
LABEL = "perf-regression-accepted"
# --- the scenario ----------------------------------------------------------------------------


def make_origin(root: Path) -> tuple[Path, Path, list[str]]:
    """origin (bare, main = this HEAD) and an author's clone; -> (origin, author, main's last
    four commits, oldest first: the pushes' before and after)."""
    origin, author = root / "origin.git", root / "author"
    git("clone", "--quiet", "--bare", REPO, origin, cwd=root)
    git("update-ref", "refs/heads/main", git("rev-parse", "HEAD"), cwd=origin)
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=origin)
    git("clone", "--quiet", origin, author, cwd=root)
    git("config", "user.name", "Rehearsal Author", cwd=author)
    git("config", "user.email", "author@rehearsal.invalid", cwd=author)
    return origin, author, [git("rev-parse", f"HEAD~{i}") for i in (3, 2, 1, 0)]


def pr_commit(author: Path, number: int, changes: list[tuple[str, str, bool]],
              message: str) -> str:  # fmt: skip
    """Commit ``changes`` ((path, text, append) each) on pull request ``number``'s branch (made
    from main), push it there and as refs/pull/N/head, as GitHub keeps it; -> the sha."""
    branch = f"pr-{number}"
    if branch in git("branch", "--list", branch, cwd=author):
        git("checkout", "--quiet", branch, cwd=author)
    else:
        git("checkout", "--quiet", "-b", branch, "origin/main", cwd=author)
    for path, text, append in changes:
        target = author / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a" if append else "w") as f:
            f.write(text)
        git("add", path, cwd=author)
    git("commit", "--quiet", "-m", message, cwd=author)
    git("push", "--quiet", "--force", "origin", branch, f"HEAD:refs/pull/{number}/head",
        cwd=author)  # fmt: skip
    return git("rev-parse", "HEAD", cwd=author)


class Scenario:
    """The events, built lazily: a PR's commits are pushed just before its event runs, and
    labels are put on or taken off the fake GitHub's PR as the event says."""

    def __init__(self, author: Path, main: list[str], gh: FakeGitHub):
        self.author, self.main, self.gh = author, main, gh
        self.shas: dict[str, str] = {}
        gh.permissions.update({"maintainer": "write", "developer": "write", "outsider": "read",
                               "forker": "read"})  # fmt: skip

    def push(self, title: str, before: str, after: str, expect: str | None) -> Event:
        payload = {"before": before, "after": after, "ref": "refs/heads/main",
                   "sender": {"login": "developer"}}  # fmt: skip
        return Event("push", title, payload, after, "refs/heads/main",
                     expect={"bench-main/bench": expect} if expect else {},
                     run=expect is not None)  # fmt: skip

    def pr(self, action: str, title: str, number: int, head: str, *, fork=False,
           label: str | None = None, sender="developer", expect=None) -> Event:  # fmt: skip
        labels = self.gh.labels.setdefault(number, set())
        if action == "labeled":
            labels.add(label)
        elif action == "unlabeled":
            labels.discard(label)
        head_repo = "someone/ragged" if fork else REPOSITORY
        payload = {
            "action": action, "number": number, "sender": {"login": sender},
            "pull_request": {
                "number": number, "labels": [{"name": n} for n in sorted(labels)],
                "base": {"sha": self.main[-1], "ref": "main", "repo": {"full_name": REPOSITORY}},
                "head": {"sha": head, "ref": f"pr-{number}", "repo": {"full_name": head_repo}},
            },
        }  # fmt: skip
        if label:
            payload["label"] = {"name": label}
        # GitHub sends it to pull_request workflows (the PR's files) and to pull_request_target
        # ones (main's): scripts.rehearse.triggered
        return Event("pull_request", title, payload, head, f"refs/pull/{number}/merge", sender,
                     expect or {})  # fmt: skip

    def events(self) -> list:
        m, sh = self.main, self.shas
        no_gate = {"bench-pr/approve": "skipped", "bench-pr/gate": "skipped",
                   "bench-pr/verdict": "skipped"}  # fmt: skip
        accept = {"bench-accept/accept": "success", **no_gate}
        withdraw = {"bench-accept/accept": "success", "bench-pr/approve": "not run"}

        def gated(verdict: str) -> dict:
            return {"bench-pr/approve": "success", "bench-pr/gate": "success",
                    "bench-pr/verdict": verdict}  # fmt: skip

        def commit(key, number, path, text, message, append=False):
            sh[key] = pr_commit(self.author, number, [(path, text, append)], message)
            return sh[key]

        def fork():
            sh["fork"] = pr_commit(self.author, 2, [(".github/workflows/bench-pr.yml", FORK_FLOW,
                                                     False), ("Makefile", FORK_PAYLOAD, True)],
                                   "ci: run on the GPU (a fork)")  # fmt: skip
            return sh["fork"]

        return [
            lambda: self.push("push-seed", m[0], m[1], "success"),
            lambda: self.push("push-dropped", m[1], m[2], None),  # cancelled while pending
            lambda: self.push("push", m[2], m[3], "success"),
            lambda: self.pr("opened", "pr-opened", 1, commit(
                "clean", 1, "docs/rehearsal-pr.md", "A documentation change.\n",
                "docs: a note (rehearsal PR 1)"), expect=gated("success")),
            lambda: self.pr("synchronize", "pr-nan", 1, commit(
                "nan", 1, "ragged/attention.py", NAN_KERNEL,
                "attention: triton output NaN (rehearsal PR 1)", append=True),
                expect=gated("failure")),
            lambda: self.pr("labeled", "pr-label-outsider", 1, sh["nan"], label=LABEL,
                            sender="outsider", expect={"bench-accept/accept": "failure",
                                                       **no_gate}),
            lambda: self.pr("labeled", "pr-label-other", 1, sh["nan"], label="documentation",
                            sender="maintainer", expect={"bench-accept/accept": "skipped",
                                                         **no_gate}),
            lambda: self.pr("unlabeled", "pr-unlabel-refused", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=withdraw),
            lambda: self.pr("labeled", "pr-accepted", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=accept),
            lambda: self.pr("unlabeled", "pr-withdrawn", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=withdraw),
            lambda: self.pr("labeled", "pr-accepted-again", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=accept),
            lambda: self.pr("synchronize", "pr-later-push", 1, commit(
                "later", 1, "docs/rehearsal-pr.md", "More documentation.\n",
                "docs: more (rehearsal PR 1)", append=True), expect=gated("failure")),
            lambda: self.pr("opened", "pr-fork", 2, fork(), fork=True, sender="forker", expect={
                "bench-pr/approve": "failure", "bench-pr/gate": "skipped",
                "bench-pr/verdict": "skipped", "pr:bench-pr/gate": "no runner",
                "pr:bench-pr/own": "no runner"}),
            lambda: self.pr("labeled", "pr-fork-approved", 2, sh["fork"], fork=True,
                            label=APPROVAL, sender="maintainer", expect={
                "bench-pr/approve": "success", "bench-pr/gate": "failure",
                "bench-pr/verdict": "failure"}),
            lambda: Event("workflow_dispatch", "maintain", {
                "workflow": ".github/workflows/store-maintain.yml", "ref": MAIN,
                "sender": {"login": "maintainer"}}, m[-1], MAIN, "maintainer",
                expect={"store-maintain/maintain": "success"}),
        ]  # fmt: skip


# A fork's bench-pr.yml: on its own pull request (GitHub takes the file from the PR's merge
# commit), the approval dropped, and a job of its own on the trusted runner's labels.
FORK_FLOW = """name: bench-pr
on: pull_request
jobs:
  gate:
    runs-on: [self-hosted, linux, gpu]
    steps:
      - run: make gate-pr
  own:
    runs-on: [self-hosted, linux, gpu, trusted]
    steps:
      - run: make plant
"""
# What the fork appends to the Makefile, run by its gate: files that git, pip and ragged read
# planted in the home, its environment written into its report, and no gate.
FORK_PAYLOAD = """
# (rehearsal) a fork's payload
gate-pr: plant
plant:
\tmkdir -p results $$HOME/.config/pip $$HOME/.cache/ragged/build
\tprintf '[core]\\n\\tfsmonitor = echo planted by a fork\\n' > $$HOME/.gitconfig
\tprintf '[global]\\nindex-url = https://pypi.invalid/simple\\n' > $$HOME/.config/pip/pip.conf
\tprintf 'planted by a fork\\n' > $$HOME/.cache/ragged/build/ragged_fastpath.so
\tenv | sort > results/gate.md
\texit 2
"""
PLANTED = (".gitconfig", ".config/pip/pip.conf", ".cache/ragged/build/ragged_fastpath.so")
APPROVAL = trust.LABEL


# Planted faults, appended to ragged/attention.py: every triton output NaN (the failing pull
# request here), or the triton backend raising (tests/test_faults.py; both:
# experiments/fail_closed.py).
FAULTS = {
    "nan": """
import dataclasses as _dc  # noqa: E402

_real_triton = BACKENDS["triton"]
BACKENDS["triton"] = _dc.replace(
    _real_triton, run=lambda *a: _real_triton.run(*a).fill_(float("nan"))
)
""",
    "raise": """
import dataclasses as _dc  # noqa: E402


def _broken(*args):
    raise RuntimeError("a planted bug in the triton backend")


BACKENDS["triton"] = _dc.replace(BACKENDS["triton"], run=_broken)
""",
}
NAN_KERNEL = FAULTS["nan"]


def workflow_run_event(wf_name: str, run_id: int, event: Event, jobs: list[JobResult],
                       main: str) -> Event:  # fmt: skip
    """What GitHub sends when a workflow run completes (to ``on: workflow_run``), from the
    default branch's tip."""
    ran = [j.conclusion for j in jobs]
    conclusion = ("skipped" if all(c == "skipped" for c in ran)
                  else "failure" if "failure" in ran else "success")  # fmt: skip
    pr = event.payload.get("pull_request") or {}
    head_repo = (pr.get("head") or {}).get("repo", {}).get("full_name", REPOSITORY)
    payload = {
        "action": "completed",
        "workflow_run": {
            "id": run_id, "name": wf_name, "event": event.name, "conclusion": conclusion,
            "head_sha": event.sha, "head_repository": {"full_name": head_repo},
            "pull_requests": [{"number": pr["number"]}] if pr and head_repo == REPOSITORY
            else [],
        },
    }  # fmt: skip
    return Event("workflow_run", f"{event.title}-{wf_name}-completed", payload, main,
                 "refs/heads/main", "github-actions[bot]")  # fmt: skip


def check(results: dict[str, list[JobResult]], runner: Runner, gh: FakeGitHub,
          scene: Scenario) -> list[str]:  # fmt: skip
    """What must hold after the scenario; -> the failures."""
    bad = []
    if not runner.store.exists():
        return [f"no store at {runner.store}"]
    sh, main = scene.shas, scene.main
    with Store(runner.store, read_only=True) as store:
        every = store.runs(any_branch=True, gate_runs=True)
        stored = {r["commit_hash"] for r in every}
        if stored != set(main[1:]):
            bad.append(f"the store holds {sorted(c[:12] for c in stored)}, not main's "
                       f"{[c[:12] for c in main[1:]]} (the dropped push caught up)")  # fmt: skip
        if any(r["branch"] != "main" or r["label"] for r in every):
            bad.append("pull-request runs reached the persistent store")
        if not store.acceptances(sh["nan"]):
            bad.append("no acceptance recorded for the NaN head")
        if store.acceptances(sh["later"]):
            bad.append("the later push inherited an acceptance")
        if {a["accepted_by"] for a in store.acceptances()} != {"maintainer"}:
            bad.append("an acceptance by someone other than the maintainer")
        if not all(store.gate(1, sh[k]) for k in ("clean", "nan", "later")):
            bad.append("the trusted verdict did not record every gate of PR 1")
    if not list(runner.artifacts.glob("*/bench-main-*/asv")) or not list(
        runner.artifacts.glob("*/bench-main-*/store-snapshot.duckdb")
    ):
        bad.append("push: the asv results or the store snapshot were not uploaded")
    if not any(j.summary.strip() for j in results.get("push", [])):
        bad.append("push: the run summary is empty")
    for title, jobs in results.items():  # the pull request's code: no token, no store
        for job in jobs:
            if job.key != "bench-pr/gate":
                continue
            leaked = [k for env in job.envs for k, v in env.items()
                      if TOKEN in v or str(runner.store) in v]  # fmt: skip
            if leaked:
                bad.append(f"{title}: the PR's gate job saw {sorted(set(leaked))}")
    ours = [c for c in gh.comments.get(1, []) if c["user"]["login"] == gh.bot]
    forged = [c for c in gh.comments.get(1, []) if c["user"]["login"] != gh.bot]
    if (
        len(ours) != 1
        or "FAILURE" not in ours[0]["body"]
        or sh["later"][:12] not in ours[0]["body"]
    ):
        bad.append(f"PR 1 has {len(ours)} bot comments, not one showing the later head failing")
    if [c["body"] for c in forged] != [FORGED]:
        bad.append("the comment someone else wrote with the marker was edited")
    posts = [r for r in gh.requests if r.startswith("POST") and r.endswith("/issues/1/comments")]
    if len(posts) != 1:
        bad.append(f"{len(posts)} comments posted on PR 1: one expected, then edits")
    want = {
        "clean": ["success"], "later": ["failure"],
        "nan": ["failure", "failure", "success", "failure", "success"],
    }  # fmt: skip
    for key, states in want.items():
        got = [st["state"] for st in gh.statuses.get(sh[key], [])]
        if got != states:
            bad.append(f"ragbench/gate statuses of the {key} head: {got}, expected {states}")
    if LABEL in gh.labels.get(1, set()):
        bad.append("the stale acceptance label was left on PR 1 after the later push")
    fork_ours = [c for c in gh.comments.get(2, []) if c["user"]["login"] == gh.bot]
    fork_states = [st["state"] for st in gh.statuses.get(sh["fork"], [])]
    if len(fork_ours) != 1 or fork_states != ["error"]:
        bad.append(f"the fork's PR got {len(fork_ours)} bot comments and statuses {fork_states}, "
                   "not one comment and the error of a gate that gave no verdict")  # fmt: skip
    return bad + check_sandbox(runner)


def check_sandbox(runner: Runner) -> list[str]:
    """The fork's code ran in the sandbox only: its environment (its report) held no token,
    no store, nothing of GitHub's; the sandbox's home is gone; neither runner's home holds
    what it planted."""
    reports = [p.read_text() for p in runner.artifacts.glob("*/ragbench-gate/gate.md")]
    envs = [dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
            for text in reports if "\nHOME=" in text]  # fmt: skip
    if len(envs) != 1:
        return [f"{len(envs)} reports of the fork's payload (its environment), not one"]
    (env,) = envs
    bad = []
    leaked = sorted(k for k, v in env.items() if TOKEN in v or str(runner.store) in v
                    or k.startswith("GITHUB_"))  # fmt: skip
    if leaked:
        bad.append(f"the fork's code ran with {leaked} in its environment")
    if Path(env["HOME"]).exists():
        bad.append(f"the sandbox's home {env['HOME']} is still there")
    for service in runner.services:
        left = [rel for rel in PLANTED if (service.home / rel).exists()]
        if left:
            bad.append(f"the {service.name} runner's home holds what the fork planted: {left}")
    return bad


def planted_in_trusted_home(runner: Runner) -> tuple[int, str]:
    """What `make trust` says once the fork's files are put in the trusted runner's home (a
    runner where the pull request's job shared it): its exit status and message."""
    home = runner.trusted.home
    saved = home.with_name("home-saved")
    shutil.copytree(home, saved, symlinks=True)
    for rel in PLANTED:
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("planted by a fork\n")
    try:
        out = subprocess.run(["python3", "-s", "-E", "-m", "ragbench.trust", "check"],
                             cwd=runner.trusted.workspace, env=runner.base_env(runner.trusted),
                             capture_output=True, text=True)  # fmt: skip
    finally:  # the home as it was
        shutil.rmtree(home)
        saved.rename(home)
    return out.returncode, (out.stderr.strip().splitlines() or [""])[-1]


FORGED = f"{MARKER}\nWritten by someone else, with the gate's marker."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where origin, the runner and the logs go (default: a new temporary "
                         "directory, removed after a clean rehearsal)")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--bench", action="append", default=[], metavar="REGEX",
                    help="narrow the suite in bench-main and the gate (make's BENCH), and "
                         "gate in one round (ROUNDS=1); default: the workflows' full and quick "
                         "suites, the policies' rounds")  # fmt: skip
    ap.add_argument("--warm-venv", type=Path, default=None, metavar="VENV",
                    help="start the runner's .venv cache from this built .venv of the project "
                         "(hard links, no second set-up: the tests' run); default: the first "
                         "job builds it, as on a new runner")  # fmt: skip
    ap.add_argument("-v", "--verbose", action="store_true", help="stream every step's output")
    args = ap.parse_args(argv)
    if args.warm_venv and not (args.warm_venv / "bin" / "python").exists():
        ap.error(f"--warm-venv {args.warm_venv}: not a virtualenv (no bin/python)")
    flows = {p.stem: load_workflow(p) for p in sorted(WORKFLOWS.glob("*.yml"))}
    flows.pop("cpu-tests", None)  # `make browser test`: .ci/run's job
    if int(git("rev-list", "--count", "HEAD")) < 4:
        ap.error("the rehearsal pushes main's last three commits: HEAD needs three ancestors")
    if git("status", "--porcelain", "--untracked-files=no"):
        log("note: uncommitted changes are not rehearsed (the clone is of HEAD)")
    root = (args.workdir or Path(tempfile.mkdtemp(prefix="rehearsal-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        ap.error(f"{root} is not empty")
    t0 = time.perf_counter()
    results: dict[str, list[JobResult]] = {}
    wrong: list[str] = []
    runner = None
    try:
        origin, author, main_shas = make_origin(root)
        with FakeGitHub(TOKEN) as gh:
            gh.add(1, FORGED, user="someone")
            runner = Runner(root, origin, gh.url, args.bench, args.verbose, args.warm_venv)
            scene = Scenario(author, main_shas, gh)
            for make_event in scene.events():
                event = make_event()
                log(f"== {event.title}: {event.name} {event.payload.get('action', '')} "
                    f"{event.sha[:12]}")  # fmt: skip
                jobs = results.setdefault(event.title, [])
                if event.run:
                    play(event, flows, runner, jobs, main_shas[-1], origin)
                else:
                    log("   (GitHub cancelled this run while it waited: nothing runs)")
                wrong += expectations(event, jobs)
            wrong += check(results, runner, gh, scene)
            rc, said = planted_in_trusted_home(runner)
            if rc != 2 or ".gitconfig" not in said:
                wrong.append(f"the trust check passed the fork's files in the trusted home: {said}")
            shas = {**scene.shas, "dropped": main_shas[2], "main": main_shas[-1]}
            (root / "shas.json").write_text(json.dumps(shas, indent=1))
            (root / "github.json").write_text(json.dumps(
                {"comments": gh.comments, "statuses": gh.statuses, "requests": gh.requests,
                 "labels": {k: sorted(v) for k, v in gh.labels.items()}}, indent=1))  # fmt: skip
    except RehearsalError as exc:
        log(f"rehearse: {exc}")
        return 2
    finally:
        if runner is not None:
            runner.close()
    print("| event | workflow / job | conclusion | steps | seconds |")
    print("|---|---|---|---|---|")
    for title, jobs in results.items():
        for j in jobs:
            steps = ", ".join(f"{s}: {o}" for s, o, _ in j.steps) or "-"
            where = " (the PR's file)" if j.source == "pr" else ""
            print(f"| {title} | {j.workflow} / {j.job}{where} | {j.conclusion} | {steps} | "
                  f"{j.seconds:.0f} |")  # fmt: skip
    print(f"\nThe fork's files put in the trusted runner's home: `make trust` exits {rc}: {said}")
    print(f"\n{'All as expected' if not wrong else 'NOT as expected'} "
          f"({time.perf_counter() - t0:.0f} s). Logs and artifacts: {root}")  # fmt: skip
    for w in wrong:
        print(f"- {w}")
    if not wrong and not args.keep and args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
        print("(removed: pass --keep to look at them)")
    return 1 if wrong else 0


def play(event: Event, flows: dict, runner: Runner, jobs: list[JobResult], main: str,
         origin: Path) -> None:  # fmt: skip
    """Run every job of every workflow ``event`` triggers (a job after those it needs), then,
    as GitHub does when a run completes, the workflows listening for that (``workflow_run``);
    their jobs go to ``jobs`` too."""
    for source, wf_name, flow, ev, ref in triggered(event, flows, origin, main):
        runner.run_id += 1
        ran: dict[str, JobResult] = {}
        for job_id, job in flow["jobs"].items():
            needs = {k: r.conclusion for k, r in ran.items()}
            ran[job_id] = runner.run_job(wf_name, job_id, job, ev, ref=ref, source=source,
                                         needs=needs)  # fmt: skip
        jobs += ran.values()
        play(workflow_run_event(wf_name, runner.run_id, ev, list(ran.values()), main), flows,
             runner, jobs, main, origin)  # fmt: skip


def triggered(event: Event, flows: dict, origin: Path, main: str):
    """(source, workflow, its file, the event it sees, the file's ref) for each workflow the
    event triggers. A pull request's event reaches main's pull_request_target workflows (as
    main's tip, refs/heads/main) and the pull_request workflows of its own commit (GitHub
    takes them from the merge commit, refs/pull/N/merge)."""
    if event.name != "pull_request":
        for wf_name, flow in flows.items():
            dispatched = event.payload.get("workflow")  # workflow_dispatch names its file
            if triggers(flow, event) and (not dispatched or Path(dispatched).stem == wf_name):
                yield "main", wf_name, flow, event, MAIN
        return
    target = dataclasses.replace(event, name="pull_request_target", sha=main, ref=MAIN)
    for wf_name, flow in flows.items():
        if triggers(flow, target):
            yield "main", wf_name, flow, target, MAIN
    for wf_name, flow in pr_workflows(origin, event.sha).items():
        if wf_name != "cpu-tests" and triggers(flow, event):
            yield "pr", wf_name, flow, event, event.ref


def pr_workflows(origin: Path, sha: str) -> dict:
    """The workflow files of commit ``sha``, by name."""
    names = git("ls-tree", "--name-only", sha, ".github/workflows/", cwd=origin).splitlines()
    return {Path(n).stem: load_workflow_text(git("show", f"{sha}:{n}", cwd=origin))
            for n in names if n.endswith(".yml")}  # fmt: skip


def expectations(event: Event, jobs: list[JobResult]) -> list[str]:
    wrong = []
    for key, want in event.expect.items():
        got = [j.conclusion for j in jobs if j.key == key]
        if want == "not run" and got:
            wrong.append(f"{event.title}: {key} ran ({got}); it must not")
        elif want != "not run" and got != [want]:
            wrong.append(f"{event.title}: {key} ended {got}, expected {want}")
    return wrong


if __name__ == "__main__":
    sys.exit(main())
