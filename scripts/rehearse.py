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

from ragbench.github import MARKER
from ragbench.store import Store
from scripts.fail_closed import FAULTS
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
        while self._peek(".", "["):
            if self._peek("["):  # an index: pull_requests[0]
                self.i += 1
                index = self._or()
                self._take("]")
                if isinstance(v, list) and isinstance(index, int):
                    v = v[index] if -len(v) <= index < len(v) else None
                else:
                    v = v.get(to_text(index)) if isinstance(v, dict) else None
                continue
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
    expect: dict = field(default_factory=dict)  # workflow/job -> success, failure, skipped,
    #                                             or "not run"
    run: bool = True  # False: a run GitHub cancelled while it was pending


@dataclass
class JobResult:
    workflow: str
    job: str
    conclusion: str  # success, failure, skipped
    seconds: float = 0.0
    steps: list[tuple[str, str, float]] = field(default_factory=list)  # (step, outcome, s)
    summary: str = ""
    envs: list[dict] = field(default_factory=list)  # each run step's environment


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
    if event.name in ("pull_request", "pull_request_target"):
        types = spec.get("types", ["opened", "synchronize", "reopened"])
        return event.payload["action"] in types
    if event.name == "workflow_run":
        run = event.payload["workflow_run"]
        return run["name"] in spec.get("workflows", []) and event.payload["action"] in spec.get(
            "types", ["requested", "completed"]
        )
    return True


class Runner:
    """A self-hosted runner's directories, and one job at a time."""

    def __init__(
        self,
        root: Path,
        origin: Path,
        api_url: str,
        bench: list[str],
        verbose: bool,
        warm_venv: Path | None = None,
    ):
        self.root, self.origin, self.api_url = root, origin, api_url
        self.bench, self.verbose, self.warm_venv = bench, verbose, warm_venv
        self.workspace = root / "runner" / "work" / "ragged"
        self.cache = root / "runner" / "cache"
        self.store = root / "runner" / "perf.duckdb"
        self.artifacts = root / "artifacts"
        self.logs = root / "logs"
        self.jobs_run = 0
        self.run_id = 0  # the workflow run the job belongs to (its artifacts)
        for d in (self.cache, self.artifacts, self.logs):
            d.mkdir(parents=True, exist_ok=True)

    def contexts(self, event: Event) -> dict:
        return {
            "github": {
                "event_name": event.name, "event": event.payload, "sha": event.sha,
                "ref": event.ref, "repository": REPOSITORY, "actor": event.actor,
                "workspace": str(self.workspace), "run_id": self.run_id,
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
                   "GITHUB_RUN_ID": str(self.run_id), "GITHUB_SERVER_URL": "https://github.invalid",
                   "GITHUB_OUTPUT": str(temp / f"output-{n}"), "GITHUB_ENV": str(temp / "env"),
                   "RUNNER_OS": "Linux", "RUNNER_TEMP": str(temp)}  # fmt: skip
            if self.bench:  # the short rehearsal's additions: a narrower suite, one gate round
                env.update(BENCH=" ".join(self.bench), ROUNDS="1")
            step_log = logs / f"{n:02d}.log"
            try:
                if "run" in step:
                    result.envs.append(env)
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
            if not key_dir.exists() and self.warm_venv and paths == [".venv"]:
                seed_venv(self.warm_venv, key_dir / ".venv", self.workspace / ".venv")
            if key_dir.exists():
                for p in paths:
                    if (key_dir / p).exists():
                        _link_copy(key_dir / p, self.workspace / p)
                note = f"cache hit: {args['key']}"
            else:
                saves.append((key_dir, paths))
                note = f"cache miss: {args['key']} (saved after a successful job)"
        elif action == "actions/upload-artifact":
            # the paths' common folder is the artifact's root, as GitHub's action does
            paths = args["path"].split()
            root = Path(os.path.commonpath([str(Path(p).parent) for p in paths]))
            dest = self.artifacts / str(self.run_id) / args["name"]
            missing = []
            for p in paths:
                src, to = self.workspace / p, dest / Path(p).relative_to(root)
                if not src.exists():
                    missing.append(p)
                elif src.is_dir():
                    shutil.copytree(src, to, dirs_exist_ok=True)
                else:
                    to.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, to)
            note = f"uploaded to {dest}" + (f"; missing: {', '.join(missing)}" if missing else "")
            step_log.write_text(note + "\n")
            return not missing or args.get("if-no-files-found", "warn") != "error"
        elif action == "actions/download-artifact":
            run_id = args.get("run-id") or str(self.run_id)
            src = self.artifacts / run_id / args["name"]
            if not src.is_dir():
                step_log.write_text(f"no artifact {args['name']} in run {run_id}\n")
                return False
            shutil.copytree(src, self.workspace / args.get("path", "."), dirs_exist_ok=True)
            note = f"downloaded {src} into {args.get('path', '.')}"
        else:
            raise RehearsalError(f"the rehearsal cannot stand in for {step['uses']}")
        step_log.write_text(note + "\n")
        if self.verbose:
            log(f"      | {note}")
        return True


def seed_venv(venv: Path, dest: Path, final: Path) -> None:
    """Put ``venv`` (a built .venv of this project) into a cache entry as hard links, moved to
    ``final`` (the workspace's .venv): the few files that name its path (bin/'s scripts, the
    editable install of the project) rewritten, never written through a link. The runner's
    cache then starts warm, as a runner's does after its first job: a second CUDA torch set-up
    is 6 GB of disk (CI once ran out of it)."""
    direct_url = next(
        (venv / "lib").glob("python*/site-packages/ragged-*.dist-info/direct_url.json")
    )
    project = json.loads(direct_url.read_text())["url"].removeprefix("file://")
    moves = [(str(v), str(final)) for v in {venv.absolute(), venv.resolve()}]
    moves.append((project, str(final.parent)))
    try:
        _link_copy(venv, dest)
    except subprocess.CalledProcessError:  # another file system: the job builds it
        shutil.rmtree(dest, ignore_errors=True)
        log(f"      | --warm-venv: cannot hard-link {venv} into the cache; built cold")
        return
    site = direct_url.parent.parent.relative_to(venv)
    texts = [
        *(dest / "bin").iterdir(),
        *(dest / site).glob("*.pth"),
        *(dest / site).glob("__editable__*"),
        *(dest / site).glob("*.dist-info/direct_url.json"),
    ]
    for f in texts:
        if f.is_symlink() or not f.is_file():
            continue
        data = f.read_bytes()
        new = data
        for old, to in moves:
            new = new.replace(old.encode(), to.encode())
        if new != data:
            mode = f.stat().st_mode
            f.unlink()  # a new file: the link to the source venv stays as it was
            f.write_bytes(new)
            f.chmod(mode)


def _link_copy(src: Path, dest: Path) -> None:
    """Copy a file or tree as hard links (a cached .venv is gigabytes)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(src), str(dest)], check=True)


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
