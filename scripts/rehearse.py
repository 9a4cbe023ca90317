"""Rehearse the GitHub workflows on this machine, with no GitHub: the push and pull-request
workflows' steps, in order, from a fresh clone, through a scenario of five events.

    python -m scripts.rehearse                                   # make rehearse
    python -m scripts.rehearse --bench '^cpu\\.KernelError' --keep  # the test's short run

The scenario (each event runs every job of every workflow it triggers, as GitHub would):

1. push: HEAD~1..HEAD pushed to main (bench-main: the full suite on each pushed commit, into
   the runner's store; artifacts; the summary);
2. pull_request opened: PR 1, one documentation commit on main (bench-pr: the gate passes, the
   report is posted as the PR comment);
3. pull_request synchronize: PR 1 gets a commit that scales the triton backend's output by
   1.01 (the gate fails on its numerics, the same comment is updated, the check fails);
4. pull_request labeled perf-regression-accepted: the check passes and the acceptance is
   recorded in the store, the comment updated again;
5. pull_request opened from a fork: the gate job is skipped (no fork code on the runner).
It then checks that each job ended as expected, the store, the comment and the artifacts.

GitHub's parts, stood in for:
- the repository: a bare clone of this one (committed work only; HEAD as main) as origin;
- the runner: one workspace reused by every job, as a self-hosted runner's is, and the store
  (vars.RAGBENCH_STORE) beside it; jobs run one at a time (the GPU jobs share a concurrency
  group anyway);
- actions/checkout: a fresh clone of origin at the ref; actions/cache: the paths hard-linked
  into a cache by key after a successful job and back on a hit; actions/upload-artifact: the
  paths copied under artifacts/ (a missing path fails the step, GitHub only warns);
  actions/setup-python: this machine's python3, compared with the version asked for;
- ${{ }} expressions: evaluated over github (a pull request's sha is its head, not a merge
  commit), vars, secrets and runner contexts; the REST API: scripts/fake_github.py;
- `run:` steps: bash -eo pipefail in the workspace, with the job's and the step's env and the
  usual GITHUB_* variables; job timeouts and continue-on-error are kept.
cpu-tests is left out unless named in --workflows: it is `make browser test`, .ci/run's job.

Exit 0 when everything ended as expected, 1 when something did not, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ragbench.report import MARKER
from ragbench.store import Store
from scripts.fake_github import FakeGitHub

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
REPOSITORY = "rehearsal/ragged"
TOKEN = "rehearsal-token"
LABEL = "perf-regression-accepted"
# What the regressing pull request appends to ragged/attention.py: every triton output 1% off.
REGRESSION = """
# (rehearsal) a change that puts the triton backend's output 1% off
import dataclasses as _dc  # noqa: E402

_real_triton = BACKENDS["triton"]
BACKENDS["triton"] = _dc.replace(_real_triton, run=lambda *a: _real_triton.run(*a).mul_(1.01))
"""


class RehearsalError(RuntimeError):
    """The rehearsal cannot go on (bad workflow, git failure, unknown action)."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def git(*args, cwd: Path = REPO) -> str:
    out = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RehearsalError(f"git {' '.join(map(str, args))}: {out.stderr.strip()}")
    return out.stdout.strip()


# --- ${{ }} expressions ------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)"
    r"|(?P<op>==|!=|&&|\|\||[!().,*\[\]])|(?P<name>[A-Za-z_][\w-]*))"
)


class _Each(list):
    """The result of ``.*``: property access maps over its items."""


def _truthy(v) -> bool:
    return v not in (None, False, 0, "")


def _equal(a, b) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


def to_text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


class Expression:
    """GitHub's expression language, the part workflows like ours use: literals, contexts
    with ``.name`` and ``.*``, ``! == != && ||``, parentheses, and the functions given."""

    def __init__(self, text: str, contexts: dict, functions: dict):
        self.text, self.contexts, self.functions = text, contexts, functions
        self.tokens, pos = [], 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise RehearsalError(f"cannot read expression {text!r} at {text[pos:]!r}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def value(self):
        v = self._or()
        if self.i != len(self.tokens):
            raise RehearsalError(f"cannot read expression {self.text!r}: {self.tokens[self.i]}")
        return v

    def _peek(self, *ops) -> bool:
        return self.i < len(self.tokens) and self.tokens[self.i] in [("op", o) for o in ops]

    def _take(self, op: str) -> None:
        if not self._peek(op):
            raise RehearsalError(f"expected {op!r} in expression {self.text!r}")
        self.i += 1

    def _or(self):
        v = self._and()
        while self._peek("||"):
            self.i += 1
            rhs = self._and()
            v = v if _truthy(v) else rhs
        return v

    def _and(self):
        v = self._eq()
        while self._peek("&&"):
            self.i += 1
            rhs = self._eq()
            v = rhs if _truthy(v) else v
        return v

    def _eq(self):
        v = self._not()
        if self._peek("==", "!="):
            op = self.tokens[self.i][1]
            self.i += 1
            same = _equal(v, self._not())
            return same if op == "==" else not same
        return v

    def _not(self):
        if self._peek("!"):
            self.i += 1
            return not _truthy(self._not())
        return self._primary()

    def _primary(self):
        kind, tok = self.tokens[self.i]
        self.i += 1
        if kind == "str":
            return tok[1:-1].replace("''", "'")
        if kind == "num":
            return float(tok) if "." in tok else int(tok)
        if (kind, tok) == ("op", "("):
            v = self._or()
            self._take(")")
            return v
        if kind != "name":
            raise RehearsalError(f"unexpected {tok!r} in expression {self.text!r}")
        if tok in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[tok]
        if self._peek("("):
            self.i += 1
            args = []
            while not self._peek(")"):
                args.append(self._or())
                if self._peek(","):
                    self.i += 1
            self._take(")")
            if tok not in self.functions:
                raise RehearsalError(f"the rehearsal has no function {tok}() ({self.text!r})")
            return self.functions[tok](*args)
        if tok not in self.contexts:
            raise RehearsalError(f"the rehearsal has no context {tok!r} ({self.text!r})")
        v = self.contexts[tok]
        while self._peek("."):
            self.i += 1
            kind, name = self.tokens[self.i]
            self.i += 1
            if name == "*":
                v = _Each(v.values() if isinstance(v, dict) else v or [])
            elif isinstance(v, _Each):
                v = _Each(x.get(name) if isinstance(x, dict) else None for x in v)
            else:
                v = v.get(name) if isinstance(v, dict) else None
        return v


def _contains(search, item) -> bool:
    if isinstance(search, list):
        return any(_equal(x, item) for x in search)
    return to_text(item).lower() in to_text(search).lower()


def interpolate(text: str, contexts: dict, functions: dict) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}",
                  lambda m: to_text(Expression(m.group(1), contexts, functions).value()),
                  str(text))  # fmt: skip


def condition(text, contexts: dict, functions: dict) -> bool:
    if isinstance(text, bool):
        return text
    inner = re.fullmatch(r"\s*\$\{\{(.*)\}\}\s*", str(text))
    return _truthy(Expression(inner.group(1) if inner else str(text), contexts, functions).value())


# --- the runner ------------------------------------------------------------------------------


@dataclass
class Event:
    """One GitHub event: its name, payload and the github context's other fields."""

    name: str  # push, pull_request
    title: str
    payload: dict
    sha: str
    ref: str
    actor: str = "developer"
    expect: dict = field(default_factory=dict)  # workflow/job -> success, failure, skipped


@dataclass
class JobResult:
    workflow: str
    job: str
    conclusion: str  # success, failure, skipped
    seconds: float = 0.0
    steps: list[tuple[str, str, float]] = field(default_factory=list)  # (step, outcome, s)
    summary: str = ""


def load_workflow(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def triggers(flow: dict, event: Event) -> bool:
    on = flow["on"]
    if isinstance(on, str):
        on = {on: None}
    elif isinstance(on, list):
        on = dict.fromkeys(on)
    if event.name not in on:
        return False
    spec = on[event.name] or {}
    if event.name == "push":
        branch = event.ref.removeprefix("refs/heads/")
        return any(fnmatch.fnmatch(branch, b) for b in spec.get("branches", ["*"]))
    if event.name == "pull_request":
        types = spec.get("types", ["opened", "synchronize", "reopened"])
        return event.payload["action"] in types
    return True


class Runner:
    """A self-hosted runner's directories, and one job at a time."""

    def __init__(self, root: Path, origin: Path, api_url: str, bench: list[str], verbose: bool):
        self.root, self.origin, self.api_url = root, origin, api_url
        self.bench, self.verbose = bench, verbose
        self.workspace = root / "runner" / "work" / "ragged"
        self.cache = root / "runner" / "cache"
        self.store = root / "runner" / "perf.duckdb"
        self.artifacts = root / "artifacts"
        self.logs = root / "logs"
        self.jobs_run = 0
        for d in (self.cache, self.artifacts, self.logs):
            d.mkdir(parents=True, exist_ok=True)

    def contexts(self, event: Event) -> dict:
        return {
            "github": {
                "event_name": event.name, "event": event.payload, "sha": event.sha,
                "ref": event.ref, "repository": REPOSITORY, "actor": event.actor,
                "workspace": str(self.workspace),
            },
            "vars": {"RAGBENCH_STORE": str(self.store), "RAGBENCH_MACHINE": "rehearsal"},
            "secrets": {"GITHUB_TOKEN": TOKEN},
            "runner": {"os": "Linux", "temp": str(self.root / "runner" / "temp")},
            "env": {},
        }  # fmt: skip

    def functions(self, state: dict) -> dict:
        def hash_files(*patterns):
            files = sorted({f for p in patterns
                            for f in glob.glob(str(self.workspace / p), recursive=True)
                            if os.path.isfile(f)})  # fmt: skip
            if not files:
                return ""
            h = hashlib.sha256()
            for f in files:
                h.update(hashlib.sha256(Path(f).read_bytes()).digest())
            return h.hexdigest()

        return {
            "contains": _contains,
            "startsWith": lambda a, b: to_text(a).lower().startswith(to_text(b).lower()),
            "endsWith": lambda a, b: to_text(a).lower().endswith(to_text(b).lower()),
            "hashFiles": hash_files,
            "success": lambda: not state["failed"],
            "failure": lambda: state["failed"],
            "always": lambda: True,
            "cancelled": lambda: False,
        }

    def base_env(self) -> dict:
        """The runner service's environment: this one, less what belongs to the caller (its
        virtualenv, make, pytest, Triton's interpreter switch, ragbench's settings)."""
        drop = ("GITHUB_", "RUNNER_", "RAGBENCH_", "PYTEST_", "MAKE")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(drop) and k not in {
                   "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "TRITON_INTERPRET", "MFLAGS",
                   "ASV_PYTHONPATH"}}  # fmt: skip
        venv = os.environ.get("VIRTUAL_ENV")
        if venv:
            path = env.get("PATH", "").split(os.pathsep)
            env["PATH"] = os.pathsep.join(p for p in path if not p.startswith(venv))
        return env

    def run_job(self, wf_name: str, job_id: str, job: dict, event: Event) -> JobResult:
        state = {"failed": False}
        ctx, fns = self.contexts(event), self.functions(state)
        result = JobResult(wf_name, job_id, "success")
        if "if" in job and not condition(job["if"], ctx, fns):
            result.conclusion = "skipped"
            log(f"  {wf_name} / {job_id}: skipped (if: {job['if']})")
            return result
        self.jobs_run += 1
        logs = self.logs / f"{self.jobs_run:02d}-{event.title}-{wf_name}-{job_id}"
        logs.mkdir(parents=True, exist_ok=True)
        temp = self.root / "runner" / "temp"
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir(parents=True)
        (temp / "event.json").write_text(json.dumps(event.payload))
        labels = job["runs-on"]
        log(f"  {wf_name} / {job_id} on {labels}, timeout {job.get('timeout-minutes', 360)} min")
        t0 = time.perf_counter()
        deadline = t0 + 60 * float(job.get("timeout-minutes", 360))
        job_env = {k: interpolate(v, ctx, fns) for k, v in (job.get("env") or {}).items()}
        ctx["env"] = job_env
        saves: list[tuple[Path, list[str]]] = []  # caches missed: saved if the job succeeds
        summaries = []
        for n, step in enumerate(job["steps"], 1):
            label = step.get("name") or step.get("run") or step["uses"]
            if not condition(step.get("if", "success()"), ctx, fns):
                result.steps.append((label, "skipped", 0.0))
                continue
            s0 = time.perf_counter()
            step_env = {k: interpolate(v, ctx, fns) for k, v in (step.get("env") or {}).items()}
            summary = temp / f"summary-{n}.md"
            summary.touch()
            env = {**self.base_env(), **job_env, **step_env,
                   "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(self.workspace),
                   "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_SHA": event.sha,
                   "GITHUB_REF": event.ref, "GITHUB_EVENT_NAME": event.name,
                   "GITHUB_EVENT_PATH": str(temp / "event.json"), "GITHUB_ACTOR": event.actor,
                   "GITHUB_API_URL": self.api_url, "GITHUB_STEP_SUMMARY": str(summary),
                   "GITHUB_OUTPUT": str(temp / f"output-{n}"), "GITHUB_ENV": str(temp / "env"),
                   "RUNNER_OS": "Linux", "RUNNER_TEMP": str(temp)}  # fmt: skip
            if self.bench:  # the rehearsal's one addition: a narrower suite, to stay short
                env["BENCH"] = " ".join(self.bench)
            step_log = logs / f"{n:02d}.log"
            try:
                if "run" in step:
                    ok = self._run(step["run"], env, step_log, deadline)
                else:
                    ok = self._uses(step, ctx, fns, step_log, saves)
            except subprocess.TimeoutExpired:
                ok = False
                with step_log.open("a") as f:
                    f.write(f"\nthe job's timeout-minutes ({job.get('timeout-minutes')}) ran out\n")
            outcome = "success" if ok else "failure"
            seconds = time.perf_counter() - s0
            if not ok and step.get("continue-on-error"):
                outcome = "failure (continue-on-error)"
            elif not ok:
                state["failed"] = True
                result.conclusion = "failure"
            result.steps.append((label, outcome, seconds))
            summaries.append(summary.read_text())
            log(f"    {label}: {outcome} ({seconds:.0f} s)")
            if not ok and not self.verbose:
                tail = step_log.read_text().splitlines()[-25:]
                log("\n".join(f"      | {line}" for line in tail))
        if result.conclusion == "success":
            for key_dir, paths in saves:
                for p in paths:
                    if (self.workspace / p).exists() and not (key_dir / p).exists():
                        _link_copy(self.workspace / p, key_dir / p)
        result.summary = "".join(summaries)
        (logs / "summary.md").write_text(result.summary)
        result.seconds = time.perf_counter() - t0
        log(f"  {wf_name} / {job_id}: {result.conclusion} in {result.seconds:.0f} s")
        return result

    def _run(self, script: str, env: dict, step_log: Path, deadline: float) -> bool:
        path = step_log.with_suffix(".sh")
        path.write_text(script)
        with step_log.open("w") as out:
            proc = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)],
                cwd=self.workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            )  # fmt: skip

            def copy():
                for line in proc.stdout:
                    out.write(line)
                    out.flush()
                    if self.verbose:
                        sys.stderr.write(f"      | {line}")

            reader = threading.Thread(target=copy, daemon=True)
            reader.start()
            try:
                rc = proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                reader.join()
                raise
            reader.join()
        return rc == 0

    def _uses(self, step: dict, ctx: dict, fns: dict, step_log: Path, saves: list) -> bool:
        action = step["uses"].split("@")[0]
        args = {k: interpolate(v, ctx, fns) for k, v in (step.get("with") or {}).items()}
        note = ""
        if action == "actions/checkout":
            ref = args.get("ref") or ctx["github"]["sha"]
            shutil.rmtree(self.workspace, ignore_errors=True)  # checkout cleans the workspace
            self.workspace.parent.mkdir(parents=True, exist_ok=True)
            git("clone", "--quiet", self.origin, self.workspace, cwd=self.root)
            git("checkout", "--quiet", "--detach", ref, cwd=self.workspace)
            note = f"checked out {ref[:12]} into {self.workspace}"
        elif action == "actions/setup-python":
            have = subprocess.run(["python3", "--version"], capture_output=True, text=True)
            want = args.get("python-version", "")
            note = f"asked for Python {want}; this machine's python3 is {have.stdout.strip()}"
        elif action == "actions/cache":
            key_dir = self.cache / re.sub(r"[^\w.-]", "_", args["key"])
            paths = args["path"].split()
            if key_dir.exists():
                for p in paths:
                    if (key_dir / p).exists():
                        _link_copy(key_dir / p, self.workspace / p)
                note = f"cache hit: {args['key']}"
            else:
                saves.append((key_dir, paths))
                note = f"cache miss: {args['key']} (saved after a successful job)"
        elif action == "actions/upload-artifact":
            dest = self.artifacts / args["name"]
            missing = []
            for p in args["path"].split():
                src = self.workspace / p
                if not src.exists():
                    missing.append(p)
                elif src.is_dir():
                    shutil.copytree(src, dest / p, dirs_exist_ok=True)
                else:
                    (dest / p).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dest / p)
            note = f"uploaded to {dest}" + (f"; missing: {', '.join(missing)}" if missing else "")
            step_log.write_text(note + "\n")
            return not missing
        else:
            raise RehearsalError(f"the rehearsal cannot stand in for {step['uses']}")
        step_log.write_text(note + "\n")
        if self.verbose:
            log(f"      | {note}")
        return True


def _link_copy(src: Path, dest: Path) -> None:
    """Copy a file or tree as hard links (a cached .venv is gigabytes)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(src), str(dest)], check=True)


# --- the scenario ----------------------------------------------------------------------------


def make_origin(root: Path, pushed: int) -> tuple[Path, Path, list[str]]:
    """origin (bare, main = this HEAD) and an author's clone; -> (origin, author, the pushed
    range's before and after)."""
    head = git("rev-parse", "HEAD")
    before = git("rev-parse", f"HEAD~{pushed}")
    origin, author = root / "origin.git", root / "author"
    git("clone", "--quiet", "--bare", REPO, origin, cwd=root)
    git("update-ref", "refs/heads/main", head, cwd=origin)
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=origin)
    git("clone", "--quiet", origin, author, cwd=root)
    git("config", "user.name", "Rehearsal Author", cwd=author)
    git("config", "user.email", "author@rehearsal.invalid", cwd=author)
    return origin, author, [before, head]


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


def pr_event(action: str, title: str, number: int, base: str, head: str, *, labels=(),
             fork=False, actor="developer", expect=None) -> Event:  # fmt: skip
    head_repo = "someone/ragged" if fork else REPOSITORY
    payload = {
        "action": action, "number": number,
        "pull_request": {
            "number": number, "labels": [{"name": n} for n in labels],
            "base": {"sha": base, "ref": "main", "repo": {"full_name": REPOSITORY}},
            "head": {"sha": head, "ref": f"pr-{number}", "repo": {"full_name": head_repo}},
        },
    }  # fmt: skip
    return Event("pull_request", title, payload, head, f"refs/pull/{number}/merge", actor,
                 expect or {})  # fmt: skip


def scenario(author: Path, pushed: list[str]) -> list:
    """The events, built lazily: a PR's commits are pushed just before its event runs."""
    main = pushed[1]
    shas: dict[str, str] = {}

    def push():
        payload = {"before": pushed[0], "after": main, "ref": "refs/heads/main"}
        return Event("push", "push", payload, main, "refs/heads/main",
                     expect={"bench-main/bench": "success"})  # fmt: skip

    def opened():
        shas["clean"] = pr_commit(author, "pr-1", "docs/rehearsal-pr.md",
                                  "A documentation change (workflow rehearsal).\n",
                                  "docs: a note (rehearsal PR 1)", append=False)  # fmt: skip
        return pr_event("opened", "pr-opened", 1, main, shas["clean"],
                        expect={"bench-pr/gate": "success"})  # fmt: skip

    def synchronize():
        shas["regress"] = pr_commit(author, "pr-1", "ragged/attention.py", REGRESSION,
                                    "attention: triton output 1% off (rehearsal PR 1)",
                                    append=True)  # fmt: skip
        return pr_event("synchronize", "pr-regression", 1, main, shas["regress"],
                        expect={"bench-pr/gate": "failure"})  # fmt: skip

    def labeled():
        return pr_event("labeled", "pr-accepted", 1, main, shas["regress"], labels=[LABEL],
                        actor="maintainer", expect={"bench-pr/gate": "success"})  # fmt: skip

    def fork():
        return pr_event("opened", "pr-fork", 2, main, shas["clean"], fork=True,
                        expect={"bench-pr/gate": "skipped"})  # fmt: skip

    return [push, opened, synchronize, labeled, fork]


def check(results: dict[str, list[JobResult]], runner: Runner, gh: FakeGitHub,
          pushed: list[str], regress_sha: str | None) -> list[str]:  # fmt: skip
    """What must hold after the scenario; -> the failures."""
    bad = []
    if not runner.store.exists():
        return [f"no store at {runner.store}"]
    with Store(runner.store, read_only=True) as store:
        main_runs = [r for r in store.runs() if r.get("branch") == "main"]
        want = git("rev-list", f"{pushed[0]}..{pushed[1]}").split()
        missing = set(want) - {r["commit_hash"] for r in main_runs}
        if missing:
            bad.append(f"push: no stored main run of {', '.join(m[:12] for m in missing)}")
        gate_runs = store.runs(gate_runs=True, label="gate:%")
        if not gate_runs:
            bad.append("pull requests: no gate runs in the store")
        accepted = store.acceptances(regress_sha) if regress_sha else []
        if not accepted:
            bad.append("labeled: no acceptance recorded for the regressing head")
    artifacts = list(runner.artifacts.glob("bench-main-*/results/asv-main"))
    if not artifacts or not list(runner.artifacts.glob("bench-main-*/results/*.duckdb")):
        bad.append("push: the asv results or the store snapshot were not uploaded")
    push_jobs = results.get("push", [])
    if not any(j.summary.strip() for j in push_jobs):
        bad.append("push: the run summary is empty")
    ours = [c for c in gh.comments.get(1, []) if MARKER in c["body"]]
    if len(ours) != 1:
        bad.append(f"PR 1 has {len(ours)} gate comments, not one")
    elif "FAIL" not in ours[0]["body"]:
        bad.append("PR 1's comment does not show the failing gate")
    if gh.comments.get(2):
        bad.append("the fork's PR got a comment")
    posts = [r for r in gh.requests if r.startswith("POST")]
    if len(posts) != 1:
        bad.append(f"{len(posts)} comments posted: one expected, then edits")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where origin, the runner and the logs go (default: a new temporary "
                         "directory, removed after a clean rehearsal)")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--bench", action="append", default=[], metavar="REGEX",
                    help="narrow the suite in bench-main and the gate (make's BENCH); "
                         "default: the workflows' full and quick suites")  # fmt: skip
    ap.add_argument("--pushed", type=int, default=1, help="commits in the push (default 1)")
    ap.add_argument(
        "--workflows",
        nargs="+",
        default=["bench-main", "bench-pr"],
        help="which workflows to run (default bench-main bench-pr)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="stream every step's output")
    args = ap.parse_args(argv)
    paths = {p.stem: p for p in sorted(WORKFLOWS.glob("*.yml"))}
    unknown = set(args.workflows) - set(paths)
    if unknown:
        ap.error(f"no workflow {', '.join(sorted(unknown))}; there are {', '.join(paths)}")
    count = int(git("rev-list", "--count", "HEAD"))
    if not 1 <= args.pushed < count:
        ap.error(f"--pushed must be between 1 and {count - 1}")
    if git("status", "--porcelain", "--untracked-files=no"):
        log("note: uncommitted changes are not rehearsed (the clone is of HEAD)")
    flows = {n: load_workflow(paths[n]) for n in args.workflows}
    root = (args.workdir or Path(tempfile.mkdtemp(prefix="rehearsal-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        ap.error(f"{root} is not empty")
    t0 = time.perf_counter()
    results: dict[str, list[JobResult]] = {}
    wrong: list[str] = []
    try:
        origin, author, pushed = make_origin(root, args.pushed)
        with FakeGitHub(TOKEN) as gh:
            runner = Runner(root, origin, gh.url, args.bench, args.verbose)
            regress_sha = None
            for make_event in scenario(author, pushed):
                event = make_event()
                log(f"== {event.title}: {event.name} {event.payload.get('action', '')} "
                    f"{event.sha[:12]}")  # fmt: skip
                jobs = results.setdefault(event.title, [])
                for wf_name, flow in flows.items():
                    if not triggers(flow, event):
                        continue
                    for job_id, job in flow["jobs"].items():
                        jobs.append(runner.run_job(wf_name, job_id, job, event))
                for key, want in event.expect.items():
                    got = [j.conclusion for j in jobs if f"{j.workflow}/{j.job}" == key]
                    if key.split("/")[0] in flows and got != [want]:
                        wrong.append(f"{event.title}: {key} ended {got}, expected {want}")
                if event.title == "pr-regression":
                    regress_sha = event.sha
            if {"bench-main", "bench-pr"} <= set(flows):
                wrong += check(results, runner, gh, pushed, regress_sha)
            (root / "github.json").write_text(json.dumps(
                {"comments": gh.comments, "requests": gh.requests}, indent=1))  # fmt: skip
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


if __name__ == "__main__":
    sys.exit(main())
