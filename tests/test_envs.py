"""``ragbench run --env SPEC``: the suite under a second, real environment (this one with
another numpy on top, kept in .envs/ between runs of the tests: 60 MB, ~12 s to build once),
next to a spec pip cannot install and one it cannot read; the upgrade report between two
stacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragbench import envs
from ragbench.result_files import ingest
from ragbench.store import Store

REPO = Path(__file__).resolve().parent.parent
SPEC = "numpy==2.3.5"
# A guard against a hang, not a time limit: .ci/run at a load of ~20 on the 2-core machine
# (33% of a core for the run) built and ran the upgrade report in more than 900 s.
HANG = 3600


def ragbench(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home)}  # asv's machine file goes to $HOME
    env.pop("RAGBENCH_MODE", None)
    return subprocess.run([sys.executable, "-m", "ragbench", *args], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=HANG)  # fmt: skip


def test_a_run_under_a_second_environment_and_a_spec_pip_cannot_install(tmp_path):
    results = tmp_path / "results"
    out = ragbench("run", "--machine", "envs", "--results", str(results), "--bench",
                   r"^cpu\.KernelError", "--env", SPEC, "--env", "torch==0.0.1",
                   home=tmp_path)  # fmt: skip
    assert out.returncode == 2, out.stderr[-3000:]  # one spec unusable: the run says so
    done, failed = json.loads(out.stdout)
    assert done["env_spec"] == SPEC and done["asv_exit"] == 0
    assert failed["env_spec"] == "torch==0.0.1"
    # pip's own words vary with the index (no such release; a constraint file that conflicts)
    assert failed["error"].startswith("--env torch==0.0.1: pip could not install it: ERROR:")
    assert "Traceback" not in out.stderr
    # the run's Python was the environment's, and its fingerprint says which
    built: list[str] = []
    env = envs.ensure(SPEC, log=built.append)
    assert not built  # kept: a second use installs nothing
    assert env.versions["numpy"] == "2.3.5" and env.path.name in done["result"]
    fp = json.loads(Path(done["fingerprint"]).read_text())
    assert fp["env_spec"] == SPEC and fp["torch"] and fp["triton"]
    assert not envs.location("torch==0.0.1").exists()  # nothing left of the failed build
    with Store(tmp_path / "perf.duckdb") as s:
        report = ingest(s, [results], branch="main")
        assert len(report.stored) == 1 and not report.failed


def test_a_spec_pip_cannot_read_stops_before_any_work(tmp_path):
    out = ragbench("run", "--env", "torch==,triton", "--results", str(tmp_path), home=tmp_path)
    assert out.returncode == 2 and "is not a pip requirement" in out.stderr
    assert "Traceback" not in out.stderr and not any(tmp_path.iterdir())


def test_the_upgrade_report_judges_one_commit_under_two_stacks(tmp_path):
    """``make bench-versions`` (the weekly job's step, ``ragbench versions``): the same commit
    under two numpy releases, alternating, judged with the gate's rules (the kernel's error
    and output hashes must not move): safe, in the report and the job's summary."""
    report, summary = tmp_path / "upgrade.md", tmp_path / "summary.md"
    env = {**os.environ, "HOME": str(tmp_path), "RAGBENCH_MACHINE": "envs"}
    env.pop("RAGBENCH_MODE", None)
    out = subprocess.run(
        ["make", "bench-versions", f"FROM={SPEC}", "TO=numpy==2.2.6", f"SUMMARY={summary}",
         f"VERSIONS_REPORT={report}", "BENCH_ARGS=--bench ^cpu\\.KernelError --rounds 1"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=HANG,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Safe to upgrade" in summary.read_text()
    text = report.read_text()
    assert "ragbench versions: numpy==2.2.6 against numpy==2.3.5" in text and "PASS" in text
    assert text.rstrip().endswith("Safe to upgrade from numpy==2.3.5 to numpy==2.2.6 on this "
                                  "machine.")  # fmt: skip
    assert "| unchanged | 0 |" not in text  # the kernel's cells were compared


def test_an_upgrade_to_a_stack_pip_cannot_install_is_unusable_input(tmp_path):
    out = ragbench("versions", "--from", SPEC, "--to", "triton==0.0.1", home=tmp_path)
    assert out.returncode == 2 and "No matching distribution found for triton==0.0.1" in out.stderr
    assert "Traceback" not in out.stderr


def test_versions_refuses_a_range_and_one_stack_twice_before_any_build(tmp_path, monkeypatch,
                                                                        capsys):  # fmt: skip
    from ragbench import cli

    monkeypatch.setenv("RAGBENCH_ENVS", str(tmp_path))
    for args, why in (
        (["--commit", "HEAD~2..HEAD", "--from", SPEC, "--to", "numpy==2.2.6"], "is a range"),
        (["--commit", "HEAD..HEAD~3", "--bisect", "a.b.c x=1", "--between", SPEC, SPEC],
         "is a range"),
        (["--from", SPEC, "--to", f" {SPEC} "], "are the same stack"),
    ):  # fmt: skip
        assert cli.main(["versions", *args]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())  # nothing built


def test_the_result_file_is_the_one_this_run_wrote(tmp_path):
    """Two environments' results of one commit share a directory: a run whose asv wrote
    nothing (its imports failed) must not take the other environment's file for its own."""
    from ragbench.asv_run import _result_file, _result_files

    sha = "ab" * 20
    other = tmp_path / f"{sha[:8]}-existing-py_other_bin_python.json"
    other.write_text("{}")
    before = _result_files(tmp_path, sha)
    assert _result_file(tmp_path, sha, before) is None  # asv wrote nothing this time
    mine = tmp_path / f"{sha[:8]}-existing-py_mine_bin_python.json"
    mine.write_text("{}")
    assert _result_file(tmp_path, sha, before) == mine


def test_a_bisect_with_nothing_to_find_measures_the_last_stack_and_says_so(tmp_path):
    """``ragbench versions --bisect``: the real path (pip's listing of the releases between,
    both stacks measured, the cell found in the results); numpy does not move the kernel's
    error, so there is nothing to bisect: exit 1, said in the report."""
    report = tmp_path / "bisect.md"
    cell = "cpu.KernelError.output_hash backend=triton,dtype=float16"
    out = ragbench("versions", "--bisect", cell, "--between", "numpy==2.2.6", SPEC, "--rounds",
                   "1", "--machine", "envs", "--report", str(report), home=tmp_path)  # fmt: skip
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    text = report.read_text()
    assert "numpy release(s) between `numpy==2.2.6` and `numpy==2.3.5`: 2.3.0" in text
    assert f"| `{SPEC}` | does not show it | unchanged" in text
    assert "nothing to bisect" in text
    shown = "cpu.KernelError.max_abs_error backend=triton,dtype=float16"  # info: never judged
    out = ragbench("versions", "--bisect", shown, "--between", "numpy==2.2.6", SPEC,
                   "--rounds", "1", "--machine", "envs", home=tmp_path)  # fmt: skip
    assert out.returncode == 2 and "is shown, not judged" in out.stderr


# --- one build at a time, and nothing left of an interrupted one --------------------------------

# A stack of one tiny local wheel (no index), whose .pth holds the build's kernel check (the
# last step before the stamp) until the test says go: where a build is, is never a race.
HOLD = """import os, time
if os.environ.get("RAGFAKE_GO") and not os.path.exists(os.environ["RAGFAKE_GO"]):
    open(os.environ["RAGFAKE_READY"], "w").close()
    for _ in range(6000):  # 300 s at most, should the test be gone
        if os.path.exists(os.environ["RAGFAKE_GO"]):
            break
        time.sleep(0.05)
"""
# The build as a user's `ragbench run --env` at a terminal: Ctrl-C raises KeyboardInterrupt
# (a process started by pytest-xdist's worker inherits SIGINT ignored, and would finish).
DRIVER = """import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from ragbench import envs
print(envs.ensure(sys.argv[1], log=lambda m: print(m, file=sys.stderr, flush=True)).path)
"""


def fake_wheel(where: Path, version: str) -> None:
    import base64
    import hashlib
    import zipfile

    info = f"ragfake-{version}.dist-info"
    files = {
        "ragfake.py": HOLD,
        "ragfake.pth": "import ragfake\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: ragfake\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")

    record = [f"{name},sha256={digest(text)},{len(text.encode())}" for name, text in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    where.mkdir(exist_ok=True)
    with zipfile.ZipFile(where / f"ragfake-{version}-py3-none-any.whl", "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)


@pytest.fixture
def fake_stack(tmp_path, monkeypatch) -> dict:
    """The environment of processes that build ``ragfake==1.0`` or ``==2.0`` under tmp_path."""
    for version in ("1.0", "2.0"):
        fake_wheel(tmp_path / "wheels", version)
    monkeypatch.setenv("RAGBENCH_ENVS", str(tmp_path / "envs"))  # envs.location here, too
    return {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "wheels"),
            "RAGFAKE_GO": str(tmp_path / "go"),
            "RAGFAKE_READY": str(tmp_path / "ready")}  # fmt: skip


class Build:
    """``envs.ensure(spec)`` in a process of its own session (killed with its children)."""

    def __init__(self, spec: str, env: dict):
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, spec], cwd=REPO, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)  # fmt: skip
        self.lines: list[str] = []

    def line(self, *words: str) -> str:
        """The first line of its log holding one of ``words`` (read up to it)."""
        for line in self.proc.stderr:
            self.lines.append(line)
            if any(w in line for w in words):
                return line
        raise AssertionError(f"no line with {words}: {''.join(self.lines)[-3000:]}")

    def finish(self) -> str:
        out, err = self.proc.communicate(timeout=600)
        self.lines.append(err)
        assert self.proc.returncode == 0, "".join(self.lines)[-3000:]
        return out.strip()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.communicate(timeout=600)


def wait_ready(stack: dict, build: Build) -> None:
    """Until the build holds in its kernel check (its environment made, its stamp not)."""
    ready = Path(stack["RAGFAKE_READY"])
    for _ in range(12000):  # 600 s at most
        if ready.exists():
            ready.unlink()
            return
        assert build.proc.poll() is None, build.proc.communicate()[1][-3000:]
        time.sleep(0.05)
    raise AssertionError("the build never reached its kernel check")


def test_two_builds_of_one_stack_at_once_build_it_once(fake_stack, tmp_path):
    """Two ``run --env`` of one stack at once both failed (the second's clean-up deleted the
    first's directory): the second now waits, says so, and uses what the first built."""
    first = Build("ragfake==1.0", fake_stack)
    second = None
    try:
        first.line("building")
        second = Build("ragfake==1.0", fake_stack)
        assert "waiting for pid" in second.line("waiting for", ": building")
        Path(fake_stack["RAGFAKE_GO"]).touch()
        assert first.finish() == second.finish() == str(envs.location("ragfake==1.0"))
    finally:
        Path(fake_stack["RAGFAKE_GO"]).touch()
        for b in (first, second):
            if b is not None:
                b.kill()
    building = "--env ragfake==1.0: building"
    assert first.log.count(building) == 1 and building not in second.log
    assert "built by another process meanwhile" in second.log
    assert (envs.location("ragfake==1.0") / envs.STAMP).exists()


def test_an_interrupted_or_killed_build_leaves_nothing_behind(fake_stack, tmp_path):
    """Ctrl-C: the build removes what it made (a 3.3 GB directory was left). Killed, it cannot:
    the next ``ensure`` of any stack removes it, and a stack's own is rebuilt."""
    one, two = envs.location("ragfake==1.0"), envs.location("ragfake==2.0")
    build = Build("ragfake==1.0", fake_stack)
    try:
        wait_ready(fake_stack, build)
        assert one.is_dir()
        os.kill(build.proc.pid, signal.SIGINT)  # the process only: it stops its own children
        build.proc.communicate(timeout=600)
        assert build.proc.returncode != 0 and not one.exists()

        for spec, path in (("ragfake==1.0", one), ("ragfake==2.0", two)):
            build = Build(spec, fake_stack)
            wait_ready(fake_stack, build)
            build.kill()  # the process and its children, as a cancelled job's
            assert path.is_dir() and not (path / envs.STAMP).exists()
            if path == one:  # this stack's leftover: removed, then built
                Path(fake_stack["RAGFAKE_GO"]).touch()
                build = Build(spec, fake_stack)
                assert build.finish() == str(one)
                assert f"removing {one}, left by a build that did not finish" in build.log
                assert (one / envs.STAMP).exists()
                Path(fake_stack["RAGFAKE_GO"]).unlink()
        build = Build("ragfake==1.0", fake_stack)  # built: another stack's leftover goes
        assert build.finish() == str(one)
        assert f"removing {two}, left by a build that did not finish" in build.log
        assert ": building" not in build.log and not two.exists()
    finally:
        Path(fake_stack["RAGFAKE_GO"]).touch()
        build.kill()
