"""Self-hosted runners for scripts/rehearse.py: GitHub events, which workflows they trigger,
which runner takes each job, and its steps run in that runner's reused workspace (checkout,
cache, artifacts, setup-python stood in for; ``run:`` steps in bash with GitHub's environment
and the runner's own home).

Two runners, as docs/runner.md sets the GPU machine up: ``trusted`` (labels ``[self-hosted,
linux, gpu, trusted]``: the store, the token) and ``sandbox`` (``[..., sandbox]``: the pull
request's gate). Each is in a runner group that runs only the jobs of its selected workflow
files as main has them (``OWNER/REPO/.github/workflows/FILE.yml@refs/heads/main``): a job of
any other file or ref, whatever its labels, finds no runner (on GitHub it stays queued)."""

from __future__ import annotations

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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ragbench import trust
from scripts.workflow_expressions import RehearsalError, condition, contains, interpolate, to_text

REPO = Path(__file__).resolve().parent.parent
REPOSITORY = "rehearsal/ragged"
TOKEN = "rehearsal-token"
MAIN = "refs/heads/main"
# The runner groups of docs/runner.md: a runner's labels, and the workflow files (as main has
# them) whose jobs its group runs.
GROUPS = {
    "trusted": (("self-hosted", "linux", "gpu", "trusted"),
                ("bench-main", "bench-pr", "bench-accept", "store-maintain", "bench-versions")),
    "sandbox": (("self-hosted", "linux", "gpu", "sandbox"), ("bench-pr",)),
}  # fmt: skip
FOLDERS = ("runner", "sandbox-runner")  # each service's home and work folder, under the root


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def git(*args, cwd: Path = REPO) -> str:
    out = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RehearsalError(f"git {' '.join(map(str, args))}: {out.stderr.strip()}")
    return out.stdout.strip()


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


def workflow_ref(stem: str, ref: str) -> str:
    """How a runner group's "selected workflows" name a workflow file at a ref."""
    return f"{REPOSITORY}/.github/workflows/{stem}.yml@{ref}"


@dataclass
class Service:
    """One runner service on the machine: its group's labels and selected workflows, its own
    user's home and work folder."""

    name: str
    labels: frozenset
    workflows: frozenset  # workflow_ref()s its group runs
    home: Path
    workspace: Path

    def takes(self, runs_on, ref: str) -> bool:
        wanted = {runs_on} if isinstance(runs_on, str) else set(runs_on)
        return wanted <= self.labels and ref in self.workflows


@dataclass
class JobResult:
    workflow: str
    job: str
    conclusion: str  # success, failure, skipped, no runner
    seconds: float = 0.0
    steps: list[tuple[str, str, float]] = field(default_factory=list)  # (step, outcome, s)
    summary: str = ""
    envs: list[dict] = field(default_factory=list)  # each run step's environment
    source: str = "main"  # where the workflow file came from: main, or the PR's merge commit
    runner: str = ""  # the service that ran it

    @property
    def key(self) -> str:
        """``workflow/job``, ``pr:workflow/job`` for a file from the pull request."""
        return f"{'pr:' if self.source == 'pr' else ''}{self.workflow}/{self.job}"


def load_workflow(path: Path) -> dict:
    return load_workflow_text(path.read_text())


def load_workflow_text(text: str) -> dict:
    data = yaml.safe_load(text)
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
    """The machine's runner services (``GROUPS``) and GitHub's side of them (caches, artifacts,
    run ids); one job at a time."""

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
        self.services = [
            Service(name, frozenset(labels),
                    frozenset(workflow_ref(stem, MAIN) for stem in stems),
                    root / folder / "home", root / folder / "work" / "ragged")
            for (name, (labels, stems)), folder in zip(GROUPS.items(), FOLDERS, strict=True)
        ]  # fmt: skip
        self.trusted = self.services[0]
        for service in self.services:
            service.home.mkdir(parents=True, exist_ok=True)
        self.service = self.trusted  # the one running the current job
        self.workspace = self.trusted.workspace
        self.cache = root / "runner" / "cache"
        self.store = root / "runner" / "perf.duckdb"  # beside the trusted runner's home
        self.artifacts = root / "artifacts"
        self.logs = root / "logs"
        self.jobs_run = 0
        self.deleting: list[subprocess.Popen] = []  # old workspaces, removed meanwhile
        self.run_id = 0  # the workflow run the job belongs to (its artifacts)
        for d in (self.cache, self.artifacts, self.logs):
            d.mkdir(parents=True, exist_ok=True)

    def _clear(self, path: Path) -> None:
        """Take ``path`` away at once and delete it meanwhile: a restored .venv is ~58,000 hard
        links, ~19 s to unlink on the loaded 2-core machine (1 s of it CPU), once a job."""
        if path.exists():
            trash = self.root / f".deleting-{len(self.deleting)}"
            path.rename(trash)
            self.deleting.append(subprocess.Popen(["rm", "-rf", str(trash)]))

    def close(self) -> None:
        """Wait until every old workspace is deleted."""
        for proc in self.deleting:
            proc.wait()

    def contexts(self, event: Event) -> dict:
        return {
            "github": {
                "event_name": event.name, "event": event.payload, "sha": event.sha,
                "ref": event.ref, "repository": REPOSITORY, "actor": event.actor,
                "workspace": str(self.workspace), "run_id": self.run_id,
            },
            "vars": {"RAGBENCH_STORE": str(self.store), "RAGBENCH_MACHINE": "rehearsal",
                     "RAGBENCH_SANDBOX": "rehearsal"},
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
            "contains": contains,
            "startsWith": lambda a, b: to_text(a).lower().startswith(to_text(b).lower()),
            "endsWith": lambda a, b: to_text(a).lower().endswith(to_text(b).lower()),
            "hashFiles": hash_files,
            "success": lambda: not state["failed"],
            "failure": lambda: state["failed"],
            "always": lambda: True,
            "cancelled": lambda: False,
        }

    def base_env(self, service: Service | None = None) -> dict:
        """A runner service's environment: this one, less what belongs to the caller (its
        virtualenv, make, pytest, Triton's, ragged's and ragbench's settings, its pip, git and
        XDG settings: a runner's admin sets none, ragbench.trust refuses them), with
        the service user's own HOME. RAGBENCH_REHEARSAL=1 lets the sandbox be a new home for
        the same user (scripts/sandbox.py)."""
        drop = ("GITHUB_", "RUNNER_", "RAGBENCH_", "RAGGED_", "TRITON_", "PYTEST_", "MAKE",
                "XDG_", *trust.ENV_PREFIXES)  # fmt: skip
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(drop) and k not in trust.ENV_NAMES | {
                   "VIRTUAL_ENV", "MFLAGS", "ASV_PYTHONPATH"}}  # fmt: skip
        venv = os.environ.get("VIRTUAL_ENV")
        if venv:
            path = env.get("PATH", "").split(os.pathsep)
            env["PATH"] = os.pathsep.join(p for p in path if not p.startswith(venv))
        env["HOME"] = str((service or self.service).home)
        env["RAGBENCH_REHEARSAL"] = "1"
        return env

    def run_job(self, wf_name: str, job_id: str, job: dict, event: Event, *, ref: str = MAIN,
                source: str = "main", needs: dict | None = None) -> JobResult:  # fmt: skip
        """``needs``: the results of the jobs this one needs (job id -> conclusion); ``ref``:
        where the workflow file came from, which decides the runner group."""
        missing = set(_needs(job)) - set(needs or {})
        if missing:
            raise RehearsalError(f"{wf_name} / {job_id} needs {sorted(missing)}, not run before it")
        needs = {k: v for k, v in (needs or {}).items() if k in _needs(job)}
        state = {"failed": any(v != "success" for v in needs.values())}  # the job-level if
        ctx, fns = self.contexts(event), self.functions(state)
        ctx["needs"] = {k: {"result": v, "outputs": {}} for k, v in needs.items()}
        result = JobResult(wf_name, job_id, "success", source=source)
        if not condition(job.get("if", "success()"), ctx, fns):
            result.conclusion = "skipped"
            log(f"  {wf_name} / {job_id}: skipped (if: {job.get('if', 'success()')})")
            return result
        state["failed"] = False
        labels = job["runs-on"]
        if "self-hosted" not in ([labels] if isinstance(labels, str) else labels):
            result.conclusion = "not rehearsed (GitHub-hosted)"
            return result
        service = next((s for s in self.services if s.takes(labels, workflow_ref(wf_name, ref))),
                       None)  # fmt: skip
        if service is None:  # GitHub leaves it queued; no runner group selects this file
            result.conclusion = "no runner"
            log(
                f"  {wf_name} / {job_id} on {labels}: no runner takes it (its file is "
                f"{workflow_ref(wf_name, ref)}; the groups select main's files only)"
            )
            return result
        self.service, self.workspace = service, service.workspace
        ctx["github"]["workspace"] = str(service.workspace)
        result.runner = service.name
        self.jobs_run += 1
        logs = self.logs / f"{self.jobs_run:02d}-{event.title}-{wf_name}-{job_id}"
        logs.mkdir(parents=True, exist_ok=True)
        temp = self.root / "runner" / "temp"
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir(parents=True)
        (temp / "event.json").write_text(json.dumps(event.payload))
        log(
            f"  {wf_name} / {job_id} on the {service.name} runner ({labels}), timeout "
            f"{job.get('timeout-minutes', 360)} min"
        )
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
            self._clear(self.workspace)  # checkout cleans the workspace
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


def _needs(job: dict) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


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
    try:  # the venv itself: a link to one would be copied as the link, and written through
        _link_copy(venv.resolve(), dest)
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
