"""The fault suite: every way a broken build, a bad file, a hostile pull request or a sick
server was seen to pass, crash or lie (issue 14), planted for real and sent through the real
code path. Each test asserts the exit code, the message, and that no stored row was lost or
added.

The workflows' cases, which read one rehearsal of them, are in test_rehearsal.py.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, commit, fresh_copy, git, new_repo
from test_store import pytest_benchmark_json

from ragbench import cli, synth
from ragbench import pushes as record
from ragbench.git import commits
from ragbench.github import MARKER
from ragbench.result_files import ingest
from ragbench.store import Store
from ragbench.verdicts.status import JSON_SCHEMA as SCHEMA
from scripts.fake_github import FakeGitHub
from scripts.rehearse import FAULTS

VENV = Path(sys.executable).parent.parent
# make's set-up taken as done: this .venv is the one running the tests, and a copy's `make setup`
# (its pyproject.toml differs from the one the stamp was made for) would install that copy,
# a temporary directory, into it
STAMP = f"STAMP={VENV}/pyvenv.cfg"
KERNEL_ERROR = r"^cpu\.KernelError"  # the cheapest table through asv: ~20 s a run here


def ragbench(*args, cwd=REPO, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragbench", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=900)  # fmt: skip


def assert_clean_exit(out: subprocess.CompletedProcess, code: int, *messages: str) -> None:
    """``code``, each message on stderr or stdout, and no traceback."""
    text = out.stdout + out.stderr
    assert out.returncode == code, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    for m in messages:
        assert m in text, (m, text[-3000:])


def counts(path: Path) -> dict:
    return Store(path, read_only=True).counts()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """30 synthetic main commits, asv's layout (ragbench.synth)."""
    return synth.write_history(tmp_path_factory.mktemp("synth"), 30)


def main_store(history: Path, path: Path) -> Path:
    ingest(Store(path), [history], branch="main")
    return path


# --- 1. fail closed: the gate -----------------------------------------------------------------


def test_a_kernel_that_raises_fails_the_gate_and_is_stored_and_shown_as_failed(tmp_path):
    """A commit whose triton backend raises: asv records its cells as failed. bench-main's make
    target stores both commits (the failed cells as failed), exits 1, keeps its snapshot; the
    gate fails on them; main's detect lists them and exits 1."""
    repo = fresh_copy(tmp_path / "repo")
    base = git("rev-parse", "HEAD", cwd=repo)
    head = commit(repo, "ragged/attention.py", FAULTS["raise"], "triton raises (planted)")
    store = tmp_path / "perf.duckdb"
    out = subprocess.run(
        ["make", "bench-main", f"VENV={VENV}", STAMP, f"STORE={store}", f"BEFORE={base}~1",
         f"AFTER={head}", f"BENCH={KERNEL_ERROR}"], cwd=repo, capture_output=True, text=True,
        env={**os.environ, "RAGBENCH_MACHINE": "ci"}, timeout=900,
    )  # fmt: skip
    assert out.returncode != 0, out.stderr[-3000:]  # a benchmark failed: the job says so
    assert "benchmarks failed on 1 (stored as failed)" in out.stderr, out.stderr[-3000:]
    assert (repo / "results" / "store-snapshot.duckdb").is_file()
    s = Store(store, read_only=True)
    assert {r["commit_hash"] for r in s.runs(machine="ci")} == {base, head}
    failed = s.series(machine="ci", status="failed")
    assert failed and {r["commit_hash"] for r in failed} == {head}
    assert {r["variant"] for r in failed} == {"triton", "padded_sdpa"}  # its setup_cache raised

    # --no-drift: the outputs of a raising head are test_drift's (19 s of CPU here)
    gate = ragbench("gate", "--stored", "--store", store, "--machine", "ci", "--base", base,
                    "--head", head, "--json", tmp_path / "gate.json", "--no-drift",
                    cwd=repo)  # fmt: skip
    assert_clean_exit(gate, 1, "FAIL", "### Failed on head", "raised in 1 head run(s)")
    doc = json.loads((tmp_path / "gate.json").read_text())
    assert doc["verdict"] == "fail" and {f["status"] for f in doc["failures"]} == {"failed"}
    detect = ragbench("detect", "--store", store, "--machine", "ci", cwd=repo)
    assert_clean_exit(detect, 1, f"Failed on the newest commit {head[:12]}")
    assert counts(store)["runs"] == 2  # reading changed nothing


def test_head_cells_that_failed_are_nan_or_missing_fail_the_stored_gate(tmp_path, history):
    """Through ingest: head's asv file has the base's cells as null (failed), NaN (no value)
    or not at all; each fails the gate, a cell on neither side does not."""
    base_file = next((history / synth.MACHINE).glob("*.json"))
    data = json.loads(base_file.read_text())
    head = tmp_path / "r" / synth.MACHINE
    head.mkdir(parents=True)
    shutil.copy(history / "benchmarks.json", tmp_path / "r")
    data["commit_hash"] = "e" * 40
    rows = data["results"]
    rows["kernel.KernelLatency.track_gpu_us"][0][0] = None  # failed
    rows["pipeline.Throughput.track_img_per_s"][0][1] = math.nan  # no value (NaN)
    del rows["numerics.Drift.track_top1_agreement"]  # gone
    (head / "eeeeeeee-synthetic.json").write_text(json.dumps(data))
    # the same environment as base's (a file without it is another: the gate would refuse)
    shutil.copy(base_file.with_suffix(".fingerprint"), head / "eeeeeeee-synthetic.fingerprint")
    store = tmp_path / "s.duckdb"
    ingest(Store(store), [base_file, head], branch="main")
    before = counts(store)
    out = ragbench("gate", "--stored", "--store", store, "--machine", synth.MACHINE, "--base",
                   data_commit(base_file), "--head", "e" * 40)  # fmt: skip
    assert_clean_exit(out, 1, "| failed on head (the benchmark raised) | 1 |",
                      "| missing on head (base has a value: NaN, skipped or gone) | 4 |",
                      "### Missing on head")  # fmt: skip
    assert counts(store) == before


def data_commit(path: Path) -> str:
    return json.loads(path.read_text())["commit_hash"]


# --- 2. exit codes ------------------------------------------------------------------------------


def test_a_corrupt_store_exits_2_and_is_left_as_it_was(tmp_path, history):
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"\x00not a duckdb file" * 1000)
    real = main_store(history, tmp_path / "real.duckdb")
    truncated = tmp_path / "truncated.duckdb"
    truncated.write_bytes(real.read_bytes()[: real.stat().st_size // 3])
    import duckdb

    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    for path, why in ((garbage, "not a usable DuckDB store"), (truncated, "DuckDB"),
                      (other, "not a ragbench store")):  # fmt: skip
        before = path.read_bytes()
        for args in (["ingest", history, "--store", path],
                     ["detect", "--store", path, "--machine", synth.MACHINE],
                     ["export", "--store", path, "--out", tmp_path / "pq"],
                     ["gate", "--stored", "--store", path, "--base", synth.commit(0),
                      "--head", synth.commit(1), "--machine", synth.MACHINE]):  # fmt: skip
            out = ragbench(*args)
            assert_clean_exit(out, 2, why)
        assert path.read_bytes() == before, f"{path.name} was changed"


def test_an_internal_error_exits_2_never_1_or_0(tmp_path, monkeypatch, capsys, history):
    store = main_store(history, tmp_path / "s.duckdb")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))

    def bug(*a, **k):
        return 1 / 0

    monkeypatch.setattr("ragbench.history.series.stored_histories", bug)
    code = cli.main(["detect", "--store", str(store), "--machine", synth.MACHINE])
    err = capsys.readouterr().err
    assert code == 2 and "internal error: ZeroDivisionError" in err and "Traceback" not in err
    assert "ragbench detect failed (exit 2)" in summary.read_text()


def test_bench_summary_fails_and_says_so_when_detect_cannot_run(tmp_path):
    corrupt = tmp_path / "corrupt.duckdb"
    corrupt.write_bytes(b"junk" * 100)
    summary = tmp_path / "summary.md"
    out = subprocess.run(["make", "bench-summary", f"VENV={VENV}", STAMP, f"STORE={corrupt}"],
                         cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "GITHUB_STEP_SUMMARY": str(summary)})  # fmt: skip
    assert out.returncode != 0, out.stdout + out.stderr
    assert "ragbench detect failed (exit 2)" in summary.read_text()


def test_a_throughput_of_zero_is_a_regression_not_a_crash(tmp_path, history):
    history = Path(shutil.copytree(history, tmp_path / "history"))
    files = sorted((history / synth.MACHINE).glob("*.json"))[:2]
    for path, value in zip(files, (1000.0, 0.0), strict=True):  # 12 samples a side
        data = json.loads(path.read_text())
        row = data["results"]["pipeline.Throughput.track_img_per_s"]
        row[11] = [[value + i for i in range(12)] if value else [0.0] * 12 for _ in row[0]]
        row[0] = [float(sorted(s)[6]) for s in row[11]]
        row[7], row[8] = list(row[0]), list(row[0])
        path.write_text(json.dumps(data))
    store = tmp_path / "s.duckdb"
    ingest(Store(store), [history], branch="main")
    out = ragbench("gate", "--stored", "--store", store, "--machine", synth.MACHINE, "--base",
                   data_commit(files[0]), "--head", data["commit_hash"])  # fmt: skip
    assert_clean_exit(out, 1, "### Regressions", "`pipeline.Throughput.img_per_s`")


# --- 3. ingest: each file checked alone -----------------------------------------------------


def _bad_files(good: Path, dest: Path) -> dict[str, str]:
    """Copies of a good asv file, each broken one way; -> {name: the reason ingest gives}."""
    data = json.loads(good.read_text())
    kernel = "kernel.KernelLatency.track_gpu_us"
    cases = {
        "samples-strings": (lambda d: d["results"][kernel][11][0].__setitem__(0, "1.5"),
                            "a sample is '1.5'"),
        "value-string": (lambda d: d["results"][kernel][0].__setitem__(0, "1.5"),
                         "the value is '1.5'"),
        "value-inf": (lambda d: d["results"][kernel][0].__setitem__(0, math.inf),
                      "the value is 'inf'"),
        "value-negative": (lambda d: d["results"][kernel][0].__setitem__(0, -3.0),
                           "the value is '-3.0'"),
        "sample-nan": (lambda d: d["results"][kernel][11][0].__setitem__(0, math.nan),
                       "a sample is 'nan'"),
        "commit-null": (lambda d: d.__setitem__("commit_hash", None), "not a git commit hash"),
        "commit-short": (lambda d: d.__setitem__("commit_hash", "abc"), "not a git commit hash"),
        "date-1e22": (lambda d: d.__setitem__("date", 1e22), "is not a plausible date"),
        "date-text": (lambda d: d.__setitem__("date", "yesterday"), "not a number"),
        "result-renamed": (lambda d: d.__setitem__("result_columns",
                                                   ["value", *d["result_columns"][1:]]),
                           "without a 'result' column"),
        "all-skipped": (lambda d: [r.__setitem__(0, [math.nan] * len(r[0]))
                                   for r in d["results"].values()], "no measurements"),
        "samples-not-list": (lambda d: d["results"][kernel][11].__setitem__(0, "fast"),
                             "samples are str, not a list"),
    }  # fmt: skip
    out = {}
    for name, (mutate, why) in cases.items():
        d = json.loads(json.dumps(data))
        mutate(d)
        path = dest / synth.MACHINE / f"{name}.json"
        path.write_text(json.dumps(d))
        shutil.copy(good.with_suffix(".fingerprint"), path.with_suffix(".fingerprint"))
        out[path.name] = why
    return out


def test_one_bad_file_never_stops_an_ingest(tmp_path, history):
    src = tmp_path / "results"
    shutil.copytree(history, src)
    files = sorted((src / synth.MACHINE).glob("*.json"))
    good = files[:5]
    for extra in files[5:]:
        extra.unlink()
    reasons = _bad_files(good[0], src)
    pb = json.loads(pytest_benchmark_json(tmp_path / "pb.json", "a" * 40).read_text())
    for name, mutate, why in (
        ("pb-median-fast.json", lambda d: d["benchmarks"][0]["stats"].__setitem__("median",
                                                                                  "fast"),
         "the value is 'fast'"),
        ("pb-commit-null.json", lambda d: d["commit_info"].__setitem__("id", None),
         "no commit_info.id"),
        ("pb-date-huge.json", lambda d: d.__setitem__("datetime", 1e22), "not an ISO 8601"),
    ):  # fmt: skip
        d = json.loads(json.dumps(pb))
        mutate(d)
        (src / name).write_text(json.dumps(d))
        reasons[name] = why
    os.mkfifo(src / "fifo.json")  # would block a plain read for ever
    reasons["fifo.json"] = "not a regular file"
    store = tmp_path / "s.duckdb"
    out = ragbench("ingest", src, "--store", store, "--branch", "main")
    assert_clean_exit(out, 1, "5 file(s) stored", f"{len(reasons)} refused")
    for name, why in reasons.items():
        line = next((ln for ln in out.stderr.splitlines() if f"/{name}:" in ln), "")
        assert why in line, (name, why, line)
    s = Store(store, read_only=True)
    assert {r["commit_hash"] for r in s.runs()} == {data_commit(p) for p in good}
    assert counts(store)["measurements"] == 5 * len(ingest_rows(good[0]))


def ingest_rows(path: Path) -> list:
    from ragbench.result_files import parse

    return parse(path)[1]


# --- 4. main's history is main's ----------------------------------------------------------------


def test_a_pull_request_branch_cannot_rewrite_mains_history(tmp_path, history):
    store = main_store(history, tmp_path / "s.duckdb")
    assert_clean_exit(ragbench("detect", "--store", store, "--machine", synth.MACHINE), 0)
    newest = sorted((history / synth.MACHINE).glob("*.json"))[-1]
    data = json.loads(newest.read_text())
    for row in data["results"].values():  # 3x slower, a day later, another commit
        if row[0] and all(isinstance(x, float) for x in row[0]):
            row[0] = [x * 3 for x in row[0]]
            if row[11]:
                row[11] = [[x * 3 for x in s] if s else s for s in row[11]]
    data["commit_hash"], data["date"] = "d" * 40, data["date"] + 86_400_000
    poison = tmp_path / "poison" / synth.MACHINE
    poison.mkdir(parents=True)
    shutil.copy(history / "benchmarks.json", poison.parent)
    (poison / "dddddddd-synthetic.json").write_text(json.dumps(data))
    assert_clean_exit(ragbench("ingest", poison.parent, "--store", store, "--branch",
                               "pr-feature"), 0)  # fmt: skip
    main = ragbench("detect", "--store", store, "--machine", synth.MACHINE)
    assert_clean_exit(main, 0, "0 regression(s)")
    s = Store(store, read_only=True)
    assert "d" * 40 not in {r["commit_hash"] for r in s.runs()}
    assert all(r["commit_hash"] != "d" * 40 for r in s.series(machine=synth.MACHINE))
    pr = Store(store, read_only=True, branch="pr-feature")  # there, and only there
    assert [r["commit_hash"] for r in pr.runs()] == ["d" * 40]


# --- 5. acceptance ----------------------------------------------------------------------------


def test_accept_refuses_readers_and_unseen_gates_and_withdraws(tmp_path):
    store = tmp_path / "s.duckdb"
    head = "a" * 40
    gate = tmp_path / "gate.json"
    gate.write_text(json.dumps({"schema": SCHEMA, "base": "b" * 40, "head": head, "machine": "m",
                                "verdict": "fail", "failures": [
                                    {"benchmark": "kernel.KernelLatency", "metric": "gpu_us",
                                     "param_key": "backend=triton", "status": "regression",
                                     "change": 0.1, "note": ""}]}))  # fmt: skip
    with FakeGitHub("t0ken") as gh:
        gh.permissions.update({"reader": "read", "maintainer": "write"})
        env = {"GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "o/r"}
        common = ["--store", store, "--pr", 4, "--head", head]
        early = ragbench("accept", *common, "--user", "maintainer", env=env)
        assert_clean_exit(early, 2, "no results store at")  # a mistyped --store: no new file
        assert not store.exists()
        Store(store).close()
        early = ragbench("accept", *common, "--user", "maintainer", env=env)
        assert_clean_exit(early, 2, "no gate verdict of PR #4")
        verdict = ragbench("verdict", *common, "--gate-json", gate, "--github", env=env)
        assert_clean_exit(verdict, 1, "FAILURE")
        reader = ragbench("accept", *common, "--user", "reader", env=env)
        assert_clean_exit(reader, 2, "reader has 'read' permission", "nothing recorded")
        assert not Store(store, read_only=True).acceptances()
        ok = ragbench("accept", *common, "--user", "maintainer", env=env)
        assert_clean_exit(ok, 0, "now SUCCESS")
        assert len(Store(store, read_only=True).acceptances(head)) == 1
        back = ragbench("accept", *common, "--user", "maintainer", "--withdraw", env=env)
        assert_clean_exit(back, 0, "now FAILURE")
        assert not Store(store, read_only=True).acceptances()
        assert [st["state"] for st in gh.statuses[head]] == ["failure", "success", "failure"]
        other = json.loads(gate.read_text())
        other["head"] = "c" * 40  # an artifact of another commit than GitHub names
        gate.write_text(json.dumps(other))
        wrong = ragbench("verdict", *common, "--gate-json", gate, "--github", env=env)
        assert_clean_exit(wrong, 2, f"not {head}")
        assert gh.statuses[head][-1]["state"] == "error"


# --- 6. the comment and the API -----------------------------------------------------------------


def _verdict_env(gh, tmp_path, **extra):
    head = "f" * 40
    gate = tmp_path / "gate.json"
    gate.write_text(json.dumps({"schema": SCHEMA, "base": "b" * 40, "head": head, "machine": "m",
                                "verdict": "pass", "failures": []}))  # fmt: skip
    env = {"GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "o/r",
           "RAGBENCH_GITHUB_TIMEOUT": "1", "RAGBENCH_GITHUB_ATTEMPTS": "2", **extra}  # fmt: skip
    args = ["verdict", "--github", "--store", tmp_path / "s.duckdb", "--pr", 9, "--head", head,
            "--gate-json", gate]  # fmt: skip
    return args, env


def test_only_the_bots_own_comment_is_edited(tmp_path):
    with FakeGitHub("t0ken") as gh:
        forged = gh.add(9, f"{MARKER}\nlooks like the gate's", user="someone")
        args, env = _verdict_env(gh, tmp_path)
        assert_clean_exit(ragbench(*args, env=env), 0, "posted comment")
        assert_clean_exit(ragbench(*args, env=env), 0, "updated comment")
        assert forged["body"] == f"{MARKER}\nlooks like the gate's"
        ours = [c for c in gh.comments[9] if c["user"]["login"] == gh.bot]
        assert len(ours) == 1 and "SUCCESS" in ours[0]["body"]


def test_a_redirect_to_another_host_gets_no_token(tmp_path):
    with FakeGitHub("t0ken") as gh, FakeGitHub("t0ken", host="localhost") as elsewhere:
        gh.redirect = elsewhere.url
        args, env = _verdict_env(gh, tmp_path)
        out = ragbench(*args, env=env)
        assert_clean_exit(out, 2, "HTTP 401")
        assert elsewhere.requests and not any(elsewhere.authorized)


def test_a_trickling_server_is_cut_off_and_5xx_is_retried(tmp_path):
    with FakeGitHub("t0ken") as gh:
        args, env = _verdict_env(gh, tmp_path)
        gh.add(9, "an earlier comment " * 10)  # an answer of some hundred bytes
        gh.trickle = 0.2  # a byte every 0.2 s: each read is quick, the answer takes a minute
        t0 = time.monotonic()
        out = ragbench(*args, env=env)
        assert_clean_exit(out, 2, "no complete answer within 1 s", "2 attempt(s)")
        assert time.monotonic() - t0 < 30
        gh.trickle = None
        gh.server_errors = 1  # one 502, then fine: retried
        assert_clean_exit(ragbench(*args, env=env), 0, "posted comment")
        gh.server_errors = 10
        assert_clean_exit(ragbench(*args, env=env), 2, "HTTP 502", "giving up")


# --- 7. bench-main ------------------------------------------------------------------------------


def test_a_merge_is_one_commit_and_a_dropped_push_is_caught_up(tmp_path, monkeypatch):
    repo = new_repo(tmp_path / "r")
    c0 = commit(repo, "a.txt", "0\n", "c0")
    git("checkout", "--quiet", "-b", "feature", cwd=repo)
    for i in range(5):
        commit(repo, "b.txt", f"{i}\n", f"feature {i}")
    git("checkout", "--quiet", "main", cwd=repo)
    git("merge", "--quiet", "--no-ff", "-m", "Merge pull request #12 from o/feature", "feature",
        cwd=repo)  # fmt: skip
    merge = git("rev-parse", "HEAD", cwd=repo)
    c2 = commit(repo, "a.txt", "2\n", "c2 (#13)")
    monkeypatch.setattr("ragbench.git.REPO", repo)
    assert commits([f"{c0}..{merge}"], first_parent=True) == [merge]
    assert len(commits([f"{c0}..{merge}"])) == 6  # what the old bench-main measured

    store = Store(tmp_path / "s.duckdb")
    todo, done, _ = record.commits(store, "m", c0, c2, 30)
    assert todo == [merge, c2] and not done
    from ragbench.store import Run

    store.add_run(Run("asv", c0, "m", 1.8e9, branch="main"), [])
    todo, _, _ = record.commits(store, "m", merge, c2, 30)  # merge's push was dropped
    assert todo == [merge, c2]
    # PR 12's acceptance at its head, of the cell its verdict recorded failing, reaches the
    # merge commit GitHub names for it (tests/test_acceptance.py: which pull request that is)
    failing = {"benchmark": "b", "metric": "m", "param_key": "k", "status": "regression"}
    store.record_gate(12, "f" * 40, c0, "m", [failing])
    store.accept("f" * 40, "b", "m", "k", "label", "maintainer", pr=12)
    assert store.carry_acceptances(merge, [(12, "f" * 40)]) == 1
    assert store.acceptances(merge)[0]["given_on"] == "f" * 40


# --- 8. readers never wait for a whole ingest ----------------------------------------------------


READER = """
import json, sys, time
from ragbench.store import Store
path, stop = sys.argv[1], sys.argv[2]
seen, waits = [], []
import os
while not os.path.exists(stop):
    t = time.monotonic()
    s = Store(path, read_only=True)
    c = s.counts()
    waits.append(time.monotonic() - t)
    seen.append((c["runs"], c["measurements"]))
    time.sleep(0.01)
print(json.dumps({"seen": seen, "waits": waits}))
"""


def test_two_writers_and_a_reader(tmp_path):
    """Two ingests of 100 files at once and a reader polling the store: the reader reads while
    they write (it sees the counts grow), every snapshot is whole runs, and no row is lost."""
    a, b = tmp_path / "a", tmp_path / "b"
    synth.write_history(a, 100)
    shutil.copytree(a, b)
    for i, p in enumerate(sorted((b / synth.MACHINE).glob("*.json"))):
        d = json.loads(p.read_text())
        d["env_name"] = f"other-{i}"  # other runs than a's
        p.write_text(json.dumps(d))
    per_run = len(ingest_rows(next((a / synth.MACHINE).glob("*.json"))))
    store = tmp_path / "s.duckdb"
    Store(store)
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(store), str(stop)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    writers = [subprocess.Popen([sys.executable, "-m", "ragbench", "ingest", str(d), "--store",
                                 str(store), "--branch", "main"], cwd=REPO,
                                stderr=subprocess.PIPE, text=True) for d in (a, b)]  # fmt: skip
    errors = [w.communicate(timeout=600)[1] for w in writers]
    stop.touch()
    seen = json.loads(reader.communicate(timeout=120)[0])
    assert [w.returncode for w in writers] == [0, 0], errors
    assert counts(store)["runs"] == 200 and counts(store)["measurements"] == 200 * per_run
    during = {runs for runs, _ in seen["seen"] if 0 < runs < 200}
    assert len(during) >= 3, f"the reader saw only {sorted(during)} while the ingests ran"
    assert all(m == r * per_run for r, m in seen["seen"]), "a snapshot with half a run"
    print(f"reader: {len(seen['waits'])} reads, longest {max(seen['waits']) * 1e3:.0f} ms")


# --- 9. export: the path never enters SQL -------------------------------------------------------


def test_export_to_a_path_with_quotes_and_sql(tmp_path, history):
    store = main_store(history, tmp_path / "s.duckdb")
    before = counts(store)
    out_dir = tmp_path / "x'); DROP TABLE runs; --"
    assert_clean_exit(ragbench("export", "--store", store, "--out", out_dir), 0)
    assert (out_dir / "runs.parquet").is_file() and counts(store) == before


# --- what an attack on this change found (each case failed once; none may again) ------------


def asv_file(results: Path, commit: str, cells: dict, t: float = 1.77e9,
             name: str | None = None) -> Path:  # fmt: skip
    """An asv result file in asv's layout: ``cells`` maps ``module.Class.track_x`` to
    (param names, axes of repr'd values, values, samples or None)."""
    from ragbench.synth import COLUMNS

    (results / "m").mkdir(parents=True, exist_ok=True)
    bench = json.loads((results / "benchmarks.json").read_text()) if (
        results / "benchmarks.json").exists() else {"version": 2}  # fmt: skip
    rows = {}
    for full, (names, axes, values, samples) in cells.items():
        bench[full] = {"name": full, "param_names": names, "params": axes, "unit": "us",
                       "type": "track", "version": "1"}  # fmt: skip
        rows[full] = [values, axes, "1", int(t * 1e3), 1.0, None, None, None, None, None,
                      None, samples, None]  # fmt: skip
    (results / "benchmarks.json").write_text(json.dumps(bench))
    data = {"commit_hash": commit, "env_name": "e", "date": int(t * 1e3),
            "params": {"machine": "m"}, "python": "3.12", "requirements": {}, "env_vars": {},
            "result_columns": COLUMNS, "results": rows, "durations": {}, "version": 2}  # fmt: skip
    path = results / "m" / (name or f"{commit[:8]}-e.json")
    path.write_text(json.dumps(data))
    return path


def samples(center: float, n: int = 10) -> list[float]:
    return [center * (1 + 0.001 * (i - n // 2)) for i in range(n)]


def med(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


KL = "kernel.KernelLatency.track_gpu_us"
AXES = [["'triton'", "'fa2'"]]


def gate_stored(tmp_path: Path, base: dict, heads: list[dict], *args) -> tuple:
    """Ingest base and head files (one per dict of ``heads``), gate them --stored."""
    b, h = "b" * 40, "c" * 40
    asv_file(tmp_path / "base", b, base)
    for i, cells in enumerate(heads):
        asv_file(tmp_path / "head", h, cells, t=1.77e9 + 3600 * (i + 1), name=f"c-{i}.json")
    store = tmp_path / "s.duckdb"
    ing = ragbench("ingest", "--branch", "main", tmp_path / "base", tmp_path / "head", "--store",
                   store)  # fmt: skip
    assert ing.returncode == 0, ing.stderr
    return ragbench("gate", "--stored", "--store", store, "--machine", "m", "--base", b, "--head",
                    h, *args)  # fmt: skip


def test_a_nan_in_one_of_heads_runs_fails(tmp_path):
    both = [samples(2.7), samples(5.8)]
    base = {KL: (["backend"], AXES, [med(s) for s in both], both)}
    heads = [base, {KL: (["backend"], AXES, [med(both[0]), math.nan], [both[0], None])}]
    out = gate_stored(tmp_path, base, heads)
    assert_clean_exit(out, 1, "no value in 1 of the head runs", "backend=fa2")


def test_a_broken_bound_reference_and_a_worse_pre_existing_break_fail(tmp_path):
    drift = "numerics.Drift.track_max_abs_diff"
    axes = [["'triton'", "'fa2'", "'padded_full'"], ["'m'"], ["'t'"]]
    names = ["backend", "model", "method"]
    base = {drift: (names, axes, [0.005, 0.005, 0.0089], None)}
    out = gate_stored(tmp_path / "a", base, [{drift: (names, axes, [0.5, 0.5, 1.0], None)}])
    assert_clean_exit(out, 1, "| bound violations | 1 |",  # padded_full cannot excuse itself
                      "backend=padded_full,method=t,model=m: 1 >= bound 0.0178")  # fmt: skip
    base = {drift: (names, axes, [0.008, 0.005, 0.006], None)}  # inside its own run's bound
    out = gate_stored(tmp_path / "b", base, [{drift: (names, axes, [0.9, 0.005, 0.006], None)}])
    assert_clean_exit(out, 1, "| bound violations | 1 |", "0.9 >= bound 0.012")


def test_a_bound_that_held_is_shown_beside_its_bound(tmp_path):
    promise = "kernel.LaunchPromise.track_api_over_aten"  # a bound: at most 1.0
    axes = [["'deit_b'"]]
    cells = {promise: (["geometry"], axes, [0.9], [samples(0.9)])}
    out = gate_stored(tmp_path / "a", cells, [{promise: (["geometry"], axes, [0.87],
                                                         [samples(0.87)])}])  # fmt: skip
    assert_clean_exit(
        out,
        0,
        "| bounds held on head | 1 |",
        "Bounds held on head",
        "`kernel.LaunchPromise.api_over_aten` geometry=deit_b | 0.8996 | 0.8696 | < 1 |",
    )
    out = gate_stored(tmp_path / "b", cells, [{promise: (["geometry"], axes, [1.05],
                                                         [samples(1.05)])}])  # fmt: skip
    assert_clean_exit(
        out,
        1,
        "| bound violations | 1 |",
        ">= bound 1",
        "| bounds held on head | 0 |",
    )


def test_a_latency_of_zero_on_head_is_missing_not_faster(tmp_path):
    both = [samples(2.7), samples(5.8)]
    base = {KL: (["backend"], AXES, [med(s) for s in both], both)}
    head = {KL: (["backend"], AXES, [0.0, med(both[1])], [[0.0] * 10, both[1]])}
    out = gate_stored(tmp_path, base, [head])
    assert_clean_exit(out, 1, "a latency of 0 on head")


def test_nothing_to_judge_is_an_error_not_a_pass(tmp_path):
    both = [samples(2.7), samples(5.8)]
    cells = {KL: (["backend"], AXES, [med(s) for s in both], both)}
    other = {"kernel.Other.track_gpu_us": (["backend"], AXES, [med(s) for s in both], both)}
    out = gate_stored(tmp_path / "a", cells, [other])  # nothing in common, nothing lost?
    assert_clean_exit(out, 1, "| missing on head")  # base's cells are gone: that fails
    store = tmp_path / "a" / "s.duckdb"
    out = ragbench("gate", "--stored", "--store", store, "--machine", "m", "--base", "HEAD",
                   "--head", "c" * 40)  # fmt: skip
    assert_clean_exit(out, 2, "no run of base")  # a base with no runs: not a pass
    out = ragbench("gate", "--base", "HEAD~1", "--head", "HEAD", "--rounds", "-1", "--store",
                   tmp_path / "r.duckdb")  # fmt: skip
    assert_clean_exit(out, 2, "--rounds must be at least 1")


def test_the_value_must_be_the_median_of_its_samples(tmp_path):
    s = samples(2.7)
    asv_file(tmp_path / "r", "b" * 40, {KL: (["backend"], [["'triton'"]], [27.0], [s])})
    out = ragbench("ingest", tmp_path / "r", "--store", tmp_path / "s.duckdb")
    assert_clean_exit(out, 1, "the value 27 is not the median of its samples")


@pytest.mark.parametrize("case", [
    "duration-huge", "date-huge", "sample-huge", "result-huge", "param-name-null",
    "deep-nesting", "env-surrogate", "same-cell-two-names", "param-names-twice",
    "harness-2**40", "version-object", "env-list", "unit-list", "fingerprint-nan",
])  # fmt: skip
# Not refused any more: params 1 and '1', and 1e999, are cells keyed by the text asv writes
# (issue 35; tests/test_environments.py::test_asv_cells_are_keyed_by_the_values_as_asv_writes_them).
def test_a_bad_file_is_refused_alone_whatever_breaks_in_it(tmp_path, case):
    """Each was a crash (exit 2, the good file after it lost) or a silent store of junk."""
    good = asv_file(tmp_path / "good", "a" * 40, {KL: (["backend"], [["'triton'"]], [2.7],
                                                       [samples(2.7)])})  # fmt: skip
    bad_dir = tmp_path / "bad"
    s = samples(2.7)
    cell = {KL: (["backend"], [["'triton'"]], [med(s)], [s])}
    path = asv_file(bad_dir, "b" * 40, cell)
    data = json.loads(path.read_text())
    row = data["results"][KL]
    bench = json.loads((bad_dir / "benchmarks.json").read_text())
    text = None
    if case == "duration-huge":
        row[4] = 10**400
    elif case == "date-huge":
        data["date"] = 10**400
    elif case == "sample-huge":
        row[11][0][0] = 10**400
    elif case == "result-huge":
        row[0][0] = 10**400
    elif case == "param-name-null":
        bench[KL]["param_names"] = [None]
    elif case == "deep-nesting":
        text = "[" * 100_000 + "]" * 100_000
    elif case == "env-surrogate":
        data["env_name"] = "\ud800"
    elif case == "same-cell-two-names":
        data["results"]["kernel.KernelLatency.gpu_us"] = row
        bench["kernel.KernelLatency.gpu_us"] = bench[KL]
    elif case == "param-names-twice":
        row[0], row[1], row[11] = [med(s)], [["'triton'"], ["1"]], [s]
        bench[KL]["param_names"] = ["a", "a"]
    elif case == "harness-2**40":
        path.with_suffix(".fingerprint").write_text(json.dumps({"harness_version": 2**40}))
    elif case == "version-object":
        row[2] = {"a": 1}
    elif case == "env-list":
        data["env_name"] = ["x"]
    elif case == "unit-list":
        bench[KL]["unit"] = ["us"]
    elif case == "fingerprint-nan":
        path.with_suffix(".fingerprint").write_text('{"gpu": "x", "load": NaN}')
    (bad_dir / "benchmarks.json").write_text(json.dumps(bench))
    path.write_text(text or json.dumps(data))
    store = tmp_path / "s.duckdb"
    out = ragbench("ingest", "--branch", "main", bad_dir, good.parent.parent, "--store", store)
    assert_clean_exit(out, 1, "1 file(s) stored", "1 refused", "refused")
    assert [r["commit_hash"] for r in Store(store, read_only=True).runs()] == ["a" * 40]


def test_a_file_name_that_is_not_utf8_is_stored(tmp_path):
    s = samples(2.7)
    path = asv_file(tmp_path / "r", "b" * 40, {KL: (["backend"], [["'triton'"]], [med(s)], [s])})
    odd = Path(os.fsdecode(os.fsencode(str(path.parent)) + b"/\xff-odd.json"))
    path.rename(odd)
    assert_clean_exit(ragbench("ingest", tmp_path / "r", "--store", tmp_path / "s.duckdb"), 0,
                      "1 file(s) stored")  # fmt: skip


def test_another_branchs_ingest_never_hides_a_main_run(tmp_path, history):
    newest = sorted((history / synth.MACHINE).glob("*.json"))[-1]
    store = tmp_path / "s.duckdb"
    assert_clean_exit(ragbench("ingest", newest, "--store", store, "--branch", "feature"), 0)
    assert_clean_exit(ragbench("ingest", newest, "--store", store, "--branch", "main"), 0,
                      "1 file(s) stored")  # fmt: skip
    assert [r["commit_hash"] for r in Store(store, read_only=True).runs()] == [data_commit(newest)]


def test_foreign_files_are_never_written_and_nothing_hangs(tmp_path):
    import sqlite3

    import duckdb

    cases = {}
    for kind, ddl in (("view", "CREATE VIEW v AS SELECT 1 AS x"),
                      ("sequence", "CREATE SEQUENCE s"), ("macro", "CREATE MACRO f(a) AS a + 1"),
                      ("schema", "CREATE SCHEMA other"),
                      ("meta-v1", "CREATE TABLE meta (key VARCHAR, value VARCHAR); "
                                  "INSERT INTO meta VALUES ('schema_version', '1'); "
                                  "CREATE TABLE precious AS SELECT 42 AS x")):  # fmt: skip
        path = tmp_path / f"{kind}.duckdb"
        con = duckdb.connect(str(path))
        con.execute(ddl)
        con.close()
        cases[path] = "not a ragbench store"
    lite = tmp_path / "lite.db"
    sqlite3.connect(lite).execute("CREATE TABLE t (x)").connection.commit()
    cases[lite] = "DuckDB"
    fifo = tmp_path / "fifo.duckdb"
    os.mkfifo(fifo)
    cases[fifo] = "not a regular file"
    for path, why in cases.items():
        before = None if path == fifo else path.read_bytes()
        for args in (["ingest", history_file(tmp_path), "--store", path],
                     ["detect", "--store", path, "--machine", "m"]):  # fmt: skip
            out = subprocess.run([sys.executable, "-m", "ragbench", *map(str, args)], cwd=REPO,
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
            assert_clean_exit(out, 2, why)
        if before is not None:
            assert path.read_bytes() == before, path.name
    policies = tmp_path / "policies.toml"
    os.mkfifo(policies)
    out = subprocess.run([sys.executable, "-m", "ragbench", "detect", "--policies", str(policies)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_clean_exit(out, 2, "not a regular file")


def history_file(tmp_path: Path) -> Path:
    s = samples(2.7)
    return asv_file(tmp_path / "h", "a" * 40, {KL: (["backend"], [["'triton'"]], [med(s)], [s])})


def test_the_verdict_takes_an_unparameterized_cell_and_refuses_a_huge_pr(tmp_path):
    gate = tmp_path / "gate.json"
    gate.write_text(json.dumps({"schema": SCHEMA, "base": "b" * 40, "head": "a" * 40,
                                "machine": "m", "verdict": "fail", "failures": [
                                    {"benchmark": "cpu.Plain", "metric": "x", "param_key": "",
                                     "status": "missing"}]}))  # fmt: skip
    common = ["verdict", "--gate-json", gate, "--store", tmp_path / "s.duckdb", "--head", "a" * 40]
    assert_clean_exit(ragbench(*common, "--pr", 3), 1, "FAILURE")
    out = ragbench(*common, "--pr", 99999999999)
    assert out.returncode == 2 and "is not a pull request number" in out.stderr
