"""Rehearse the GitHub workflows on this machine, with no GitHub: the benchmark workflows'
steps, in order, from a fresh clone, through a scenario of thirteen events.

    python -m scripts.rehearse                                   # make rehearse
    python -m scripts.rehearse --bench '^cpu\\.KernelError' --keep  # the test's short run

The scenario (each event runs every job of every workflow it triggers, as GitHub would, and
a run's completion triggers the ``workflow_run`` workflows):

1. pushes to main: HEAD~3..HEAD~2 (bench-main measures it into the runner's store), then
   HEAD~2..HEAD~1, whose run GitHub cancels while it waits (nothing runs), then HEAD~1..HEAD:
   bench-main catches the dropped commit up; artifacts; the summary;
2. PR 1 opened, one documentation commit: bench-pr's gate passes in a scratch store;
   bench-pr-verdict (the base's code) records it, posts the comment, sets ragbench/gate;
3. PR 1 synchronize, a commit that makes the triton backend's output NaN: the gate fails
   closed (the cells base has and head lacks), the comment is updated, the status fails;
4. the perf-regression-accepted label by a user with read access: refused (bench-accept);
   another label: nothing runs; the label taken off, put on by a maintainer (accepted: the
   status passes), taken off (withdrawn: it fails), put on again (accepted);
5. PR 1 synchronize, a later documentation commit: the acceptance does not carry over, the
   status fails and the stale label is taken off;
6. PR 2 from a fork: the gate job is skipped (no fork code on the runner), no verdict.
It then checks the store (main's runs only: nothing from a PR's code), the acceptances, the
statuses, the one comment (and that a marked comment by someone else was left alone), that
the gate job's environment held neither the token nor the store, and the artifacts.

GitHub's parts, stood in for:
- the repository: a bare clone of this one (committed work only; HEAD as main) as origin;
- the runner: one workspace reused by every job, as a self-hosted runner's is, and the store
  (vars.RAGBENCH_STORE) beside it; jobs run one at a time;
- actions/checkout: a fresh clone of origin at the ref (default: the event's sha, which for
  pull_request_target and workflow_run is main's tip); actions/cache: the paths hard-linked
  into a cache by key after a successful job and back on a hit; actions/upload-artifact and
  download-artifact: copies under artifacts/<run id>/<name>, rooted at the paths' common
  folder; actions/setup-python: this machine's python3, compared with the version asked for;
- ${{ }} expressions: evaluated over github (a pull request's sha is its head, not a merge
  commit), vars, secrets and runner contexts; the REST API: scripts/fake_github.py;
- `run:` steps: bash -eo pipefail in the workspace, with the job's and the step's env and the
  usual GITHUB_* variables; job timeouts and continue-on-error are kept.
cpu-tests is left out: it is `make browser test`, .ci/run's job.

Exit 0 when everything ended as expected, 1 when something did not, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ragbench.github import MARKER
from ragbench.store import Store
from scripts.fail_closed import FAULTS
from scripts.fake_github import FakeGitHub
from scripts.workflow_expressions import RehearsalError
from scripts.workflow_runner import (
    REPOSITORY,
    TOKEN,
    Event,
    JobResult,
    Runner,
    git,
    load_workflow,
    log,
    triggers,
)

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
LABEL = "perf-regression-accepted"
# What the regressing pull request appends to ragged/attention.py: every triton output 1% off.
REGRESSION = """
# (rehearsal) a change that puts the triton backend's output 1% off
import dataclasses as _dc  # noqa: E402

_real_triton = BACKENDS["triton"]
BACKENDS["triton"] = _dc.replace(_real_triton, run=lambda *a: _real_triton.run(*a).mul_(1.01))
"""


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


def pr_commit(author: Path, branch: str, path: str, text: str, message: str, append: bool) -> str:
    """Commit ``text`` to ``path`` on ``branch`` (made from main), push it; -> the sha."""
    if branch in git("branch", "--list", branch, cwd=author):
        git("checkout", "--quiet", branch, cwd=author)
    else:
        git("checkout", "--quiet", "-b", branch, "origin/main", cwd=author)
    target = author / path
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a" if append else "w") as f:
        f.write(text)
    git("add", path, cwd=author)
    git("commit", "--quiet", "-m", message, cwd=author)
    git("push", "--quiet", "origin", branch, cwd=author)
    return git("rev-parse", "HEAD", cwd=author)


class Scenario:
    """The events, built lazily: a PR's commits are pushed just before its event runs, and
    labels are put on or taken off the fake GitHub's PR as the event says."""

    def __init__(self, author: Path, main: list[str], gh: FakeGitHub):
        self.author, self.main, self.gh = author, main, gh
        self.shas: dict[str, str] = {}
        gh.permissions.update({"maintainer": "write", "outsider": "read"})

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
        if action in ("labeled", "unlabeled"):  # pull_request_target runs the base's code
            return Event("pull_request_target", title, payload, self.main[-1], "refs/heads/main",
                         sender, expect or {})  # fmt: skip
        return Event("pull_request", title, payload, head, f"refs/pull/{number}/merge", sender,
                     expect or {})  # fmt: skip

    def events(self) -> list:
        m, sh = self.main, self.shas
        accept = {"bench-accept/accept": "success", "bench-pr/gate": "not run"}

        def commit(key, branch, path, text, message, append=False):
            sh[key] = pr_commit(self.author, branch, path, text, message, append)
            return sh[key]

        return [
            lambda: self.push("push-seed", m[0], m[1], "success"),
            lambda: self.push("push-dropped", m[1], m[2], None),  # cancelled while pending
            lambda: self.push("push", m[2], m[3], "success"),
            lambda: self.pr("opened", "pr-opened", 1, commit(
                "clean", "pr-1", "docs/rehearsal-pr.md", "A documentation change.\n",
                "docs: a note (rehearsal PR 1)"), expect={
                "bench-pr/gate": "success", "bench-pr-verdict/verdict": "success"}),
            lambda: self.pr("synchronize", "pr-nan", 1, commit(
                "nan", "pr-1", "ragged/attention.py", NAN_KERNEL,
                "attention: triton output NaN (rehearsal PR 1)", append=True), expect={
                "bench-pr/gate": "success", "bench-pr-verdict/verdict": "failure"}),
            lambda: self.pr("labeled", "pr-label-outsider", 1, sh["nan"], label=LABEL,
                            sender="outsider", expect={"bench-accept/accept": "failure"}),
            lambda: self.pr("labeled", "pr-label-other", 1, sh["nan"], label="documentation",
                            sender="maintainer", expect={"bench-accept/accept": "skipped",
                                                         "bench-pr/gate": "not run"}),
            lambda: self.pr("unlabeled", "pr-unlabel-refused", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=accept),
            lambda: self.pr("labeled", "pr-accepted", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=accept),
            lambda: self.pr("unlabeled", "pr-withdrawn", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=accept),
            lambda: self.pr("labeled", "pr-accepted-again", 1, sh["nan"], label=LABEL,
                            sender="maintainer", expect=accept),
            lambda: self.pr("synchronize", "pr-later-push", 1, commit(
                "later", "pr-1", "docs/rehearsal-pr.md", "More documentation.\n",
                "docs: more (rehearsal PR 1)", append=True), expect={
                "bench-pr/gate": "success", "bench-pr-verdict/verdict": "failure"}),
            lambda: self.pr("opened", "pr-fork", 2, commit(
                "fork", "pr-2", "docs/rehearsal-fork.md", "From a fork.\n", "docs: fork"),
                fork=True, expect={"bench-pr/gate": "skipped",
                                   "bench-pr-verdict/verdict": "skipped"}),
        ]  # fmt: skip


# What the failing pull request appends to ragged/attention.py: every triton output NaN.
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
            if job.workflow != "bench-pr":
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
    posts = [r for r in gh.requests if r.startswith("POST") and r.endswith("/comments")]
    if len(posts) != 1:
        bad.append(f"{len(posts)} comments posted: one expected, then edits")
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
    if gh.comments.get(2) or gh.statuses.get(sh["fork"]):
        bad.append("the fork's PR got a comment or a status")
    return bad


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
                    play(event, flows, runner, jobs, main_shas[-1])
                else:
                    log("   (GitHub cancelled this run while it waited: nothing runs)")
                wrong += expectations(event, jobs)
            wrong += check(results, runner, gh, scene)
            shas = {**scene.shas, "dropped": main_shas[2], "main": main_shas[-1]}
            (root / "shas.json").write_text(json.dumps(shas, indent=1))
            (root / "github.json").write_text(json.dumps(
                {"comments": gh.comments, "statuses": gh.statuses, "requests": gh.requests,
                 "labels": {k: sorted(v) for k, v in gh.labels.items()}}, indent=1))  # fmt: skip
    except RehearsalError as exc:
        log(f"rehearse: {exc}")
        return 2
    print("| event | workflow / job | conclusion | steps | seconds |")
    print("|---|---|---|---|---|")
    for title, jobs in results.items():
        for j in jobs:
            steps = ", ".join(f"{s}: {o}" for s, o, _ in j.steps) or "-"
            print(f"| {title} | {j.workflow} / {j.job} | {j.conclusion} | {steps} | "
                  f"{j.seconds:.0f} |")  # fmt: skip
    print(f"\n{'All as expected' if not wrong else 'NOT as expected'} "
          f"({time.perf_counter() - t0:.0f} s). Logs and artifacts: {root}")  # fmt: skip
    for w in wrong:
        print(f"- {w}")
    if not wrong and not args.keep and args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
        print("(removed: pass --keep to look at them)")
    return 1 if wrong else 0


def play(event: Event, flows: dict, runner: Runner, jobs: list[JobResult], main: str) -> None:
    """Run every job of every workflow ``event`` triggers, then, as GitHub does when a run
    completes, the workflows listening for that (``workflow_run``); their jobs go to ``jobs``
    too."""
    for wf_name, flow in flows.items():
        if not triggers(flow, event):
            continue
        runner.run_id += 1
        ran = [runner.run_job(wf_name, job_id, job, event) for job_id, job in flow["jobs"].items()]
        jobs += ran
        play(workflow_run_event(wf_name, runner.run_id, event, ran, main), flows, runner, jobs,
             main)  # fmt: skip


def expectations(event: Event, jobs: list[JobResult]) -> list[str]:
    wrong = []
    for key, want in event.expect.items():
        got = [j.conclusion for j in jobs if f"{j.workflow}/{j.job}" == key]
        if want == "not run" and got:
            wrong.append(f"{event.title}: {key} ran ({got}); it must not")
        elif want != "not run" and got != [want]:
            wrong.append(f"{event.title}: {key} ended {got}, expected {want}")
    return wrong


if __name__ == "__main__":
    sys.exit(main())
