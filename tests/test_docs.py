"""What a new user reads and types: the repository is self-contained, and the commands the
README and the demo print work as printed (from the repository's root, with the .venv that
the two set-up commands build)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import REPO, fresh_copy, git

from ragbench import cli, synth
from ragbench.result_files import ingest
from ragbench.store import Store
from scripts import demo

VENV = Path(sys.executable).parent.parent


def tracked_text() -> dict[str, str]:
    """Every tracked text file but this one (which spells out what it looks for)."""
    out = {}
    for rel in git("ls-files").splitlines():
        if rel == "tests/test_docs.py":
            continue
        try:
            out[rel] = (REPO / rel).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary (calibration archives) or deleted in the working tree
    return out


def test_nothing_points_outside_the_repository():
    """A clone has no ../shared: metric definitions live in docs/metrics.md."""
    bad = [rel for rel, text in tracked_text().items() if "../shared" in text]
    assert not bad
    for metric in ("call_us", "gpu_us", "host_us", "dispatch_us", "img_per_s", "floor_ratio"):
        assert f"`{metric}`" in (REPO / "docs" / "metrics.md").read_text()


def readme_commands() -> list[str]:
    """The command lines of the README's shell blocks, comments dropped."""
    text = (REPO / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_every_readme_command_runs_as_printed():
    """Each ragbench line parses with ragbench's own parser, each script and make target
    exists: nothing says `python -m ...` that the system Python could not run."""
    commands = readme_commands()
    assert commands
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    for line in commands:
        argv = shlex.split(line)
        if argv[0] == "make":
            assert argv[1] in targets, line
        elif argv[0] == ".venv/bin/ragbench":
            cli.parser().parse_args(argv[1:])  # SystemExit on a bad option
        elif argv[:2] == [".venv/bin/python", "-m"]:
            assert (REPO / (argv[2].replace(".", "/") + ".py")).is_file(), line
        else:
            raise AssertionError(f"a README command that does not run from .venv: {line}")
    for text in tracked_text().values():
        assert not re.search(r"(?<![\w/.])python -m ragbench", text)


def test_the_demos_next_steps_work_as_printed(tmp_path):
    """The lines the demo ends with, run in a clone with a store and asv results of its two
    last commits (synthetic values), as a user would type them."""
    repo = fresh_copy(tmp_path / "repo")
    (repo / ".venv").symlink_to(VENV)
    shas = git("rev-list", "-2", "HEAD", cwd=repo).split()[::-1]
    history = synth.write_history(tmp_path / "h", 2)
    results = repo / "results" / "asv"
    (results / synth.MACHINE).mkdir(parents=True)
    (results / "benchmarks.json").write_text((history / "benchmarks.json").read_text())
    (results / synth.MACHINE / "machine.json").write_text(
        json.dumps({"machine": synth.MACHINE, "version": 1}))  # fmt: skip
    files = [f for f in (history / synth.MACHINE).glob("*.json") if f.name != "machine.json"]
    files.sort(key=lambda p: json.loads(p.read_text())["date"])
    for sha, f in zip(shas, files, strict=True):
        data = json.loads(f.read_text())
        data["commit_hash"] = sha
        (results / synth.MACHINE / f"{sha[:8]}-{data['env_name']}.json").write_text(
            json.dumps(data))  # fmt: skip
    store = Path("results/a store/perf.duckdb")  # a space: quoted (before: two arguments)
    ingest(Store(repo / store), [results], branch="main")
    env = {**os.environ, "HOME": str(tmp_path)}
    for what, command in demo.next_steps(store, "main", synth.MACHINE):
        if command.startswith("make "):  # a server: the target and its variables, not the server
            command = command.replace("make ", "make -n ", 1)
        out = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True,
                             env=env, timeout=300)  # fmt: skip
        assert out.returncode in (0, 1), (what, command, out.stdout[-2000:], out.stderr[-2000:])
        assert "Traceback" not in out.stderr, (command, out.stderr[-2000:])
        assert "a store/perf.duckdb" in out.stdout or not command.startswith("make"), out.stdout
    assert (repo / "results" / "parquet" / "runs.parquet").is_file()
    # a branch name git allows that a shell would run (before: it ran ``touch PWNED``)
    branch = "feat;touch${IFS}PWNED"
    assert git("check-ref-format", "--branch", branch, cwd=repo) == branch
    _, detect = demo.next_steps(store, branch, synth.MACHINE)[1]
    subprocess.run(detect, shell=True, cwd=repo, capture_output=True, env=env, timeout=300)
    assert not (repo / "PWNED").exists()


def test_the_readme_is_short_and_says_each_thing_once():
    """A newcomer's five minutes: at most ~120 lines; the CI's time on a fresh clone stated
    once (measured by running .ci/run); every link resolves."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 120
    ci = re.findall(r"fresh clone[^.]*?, it takes \d+ min \d+ s", " ".join(text.split()))
    assert len(ci) == 1
    for page in [REPO / "README.md", REPO / "experiments" / "README.md",
                 *(REPO / "docs").glob("*.md")]:  # fmt: skip
        for target in re.findall(r"\]\(([\w./-]*[A-Za-z][\w./-]*)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)


def test_scripts_and_experiments_are_each_named_where_a_reader_looks():
    """Every module in scripts/ is in the README's layout row for it, and every experiment has
    its row in experiments/README.md with the command that runs it; nothing named is missing."""
    row = next(line for line in (REPO / "README.md").read_text().splitlines()
               if line.startswith("| `scripts/` |"))  # fmt: skip
    scripts = {p.stem for p in (REPO / "scripts").glob("*.py")} - {"__init__"}
    assert set(re.findall(r"`(\w+)`", row)) == scripts
    listing = (REPO / "experiments" / "README.md").read_text()
    experiments = {p.stem for p in (REPO / "experiments").glob("*.py")} - {"__init__"}
    assert set(re.findall(r"^\| `(\w+)` \|", listing, re.M)) == experiments
    for name in experiments:
        assert f"`.venv/bin/python -m experiments.{name}" in listing, name
