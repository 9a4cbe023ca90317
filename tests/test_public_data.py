"""Results that nobody here wrote (tests/data/public: asv's astropy results on "cheetah" in three
environments and without samples, two of them as asv wrote them before 0.5; lagom's CI's
pytest-benchmark JSON of three Pythons; pytest-benchmark's own saved runs) through ingest,
detect, gate and every dashboard page."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import duckdb
import pytest

from dashboard import PAGES
from ragbench import cli
from ragbench.result_files import discover, ingest, parse
from ragbench.store import Store

PUBLIC = Path(__file__).resolve().parent / "data" / "public"
ASTROPY = PUBLIC / "asv-astropy"
PRE_05 = sorted((PUBLIC / "asv-astropy-pre-0.5" / "results" / "cheetah").glob("*-*.json"))
LAGOM = PUBLIC / "pytest-benchmark-lagom"
STORAGE = PUBLIC / "pytest-benchmark"
# three of asv's environments on one machine: the 12 newest commits of the first, and
# 3 (e8679b2e, fcf8c079, 22b920c6) and 1 (fcf8c079) of the others
MAIN_ENV, OTHER_ENV = "py2.7-Cython-numpy1.8", "py2.7-numpy1.8"
RESULT_FILES = sorted((ASTROPY / "results" / "cheetah").glob("*-*.json"))
# what these tests ingest: every sample but django's (tests/test_public_django.py has it)
SAMPLES = [ASTROPY, PUBLIC / "asv-astropy-pre-0.5", LAGOM, STORAGE]


def ragbench(capsys, *args) -> tuple[int, str]:
    """``ragbench ARGS`` in this process: its exit code and what it printed."""
    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as exc:  # argparse: an option this ragbench does not know
        code = exc.code
    out = capsys.readouterr()
    return code, out.out + out.err


def meta(path: Path) -> dict[str, str]:
    with duckdb.connect(str(path), read_only=True) as con:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Everything in tests/data/public, ingested as main's history."""
    path = tmp_path_factory.mktemp("public") / "perf.duckdb"
    with Store(path) as s:
        ingest(s, SAMPLES, branch="main", dirty=True)
        ingest(s, [ASTROPY], branch="main")  # again, from the project's root: its name
    return path


def test_every_current_file_is_stored_once_and_pre_05_files_name_asv_update(tmp_path):
    """asv 0.5+ files (a failed, a skipped and a parameterized benchmark, a benchmark at the
    top of the suite, a parameterized one that failed whole) and pytest-benchmark JSON of
    2015 and of 2021's CI are all stored; a second ingest stores nothing; the pre-0.5 files
    are refused with what to do."""
    with Store(tmp_path / "perf.duckdb") as s:
        report = ingest(s, SAMPLES, branch="main", dirty=True)
        again = ingest(s, SAMPLES, branch="main", dirty=True)
    pytest_json = sorted(STORAGE.glob("*.json")) + sorted(LAGOM.glob(".benchmarks/*/*.json"))
    assert sorted(report.stored) == sorted(RESULT_FILES + pytest_json)
    assert len(report.stored) == 16 + 8 + 3
    assert sorted(p for p, _ in report.failed) == PRE_05
    assert all("before asv 0.5" in why and "`asv update`" in why for _, why in report.failed)
    assert not again.stored and len(again.duplicate) == len(report.stored)


def test_a_pre_05_asv_file_is_told_to_run_asv_update():
    """asv's pre-0.5 result files ("version": 1, no result_columns) are asv's, and asv reads
    them after ``asv update``: the refusal says so (it said "neither an asv result file nor
    pytest-benchmark JSON")."""
    for path in PRE_05:
        assert json.loads(path.read_text())["version"] == 1
        with pytest.raises(ValueError, match=r"before asv 0\.5.*run `asv update`"):
            parse(path)


def asv_project(tmp_path: Path) -> Path:
    """The astropy project's root as asv leaves it after ``asv publish`` and a run: its
    config, results, and the html and env directories, each holding JSON of its own."""
    root = tmp_path / "astropy"
    shutil.copytree(ASTROPY, root)
    for rel, doc in (("html/index.json", {"project": "astropy"}),
                     ("html/graphs/summary/time_units.time_unit_parse.json", [[1, 2.0]]),
                     ("env/3e4f/lib/python2.7/site-packages/pkg/data.json", {"a": 1})):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(doc))
    return root


def test_an_asv_projects_root_is_ingested_and_names_the_project(tmp_path, capsys):
    """``ragbench ingest ROOT``: asv's own files (its config, benchmarks.json, machine.json,
    the html and env directories) are no results, so it exits 0 (it refused asv.conf.json:
    exit 1); the config's project and URL go into the store's meta, for the dashboard."""
    root = asv_project(tmp_path)
    assert discover([root]) == sorted((root / "results" / "cheetah").glob("*-*.json"))
    code, out = ragbench(capsys, "ingest", "--store", tmp_path / "a.duckdb", root)
    assert code == 0, out
    assert "16 file(s) stored" in out and "0 refused" in out
    assert meta(tmp_path / "a.duckdb")["project"] == "astropy"
    assert meta(tmp_path / "a.duckdb")["project_url"] == "https://www.astropy.org/"
    # the results directory, or one machine's: the config above it names the project too
    code, out = ragbench(capsys, "ingest", "--store", tmp_path / "b.duckdb",
                         root / "results" / "cheetah")  # fmt: skip
    assert code == 0, out
    assert meta(tmp_path / "b.duckdb")["project"] == "astropy"


def test_detect_judges_another_projects_history(store, capsys):
    """asv's time_* and mem_* benchmarks are judged by their kind (latency, lower is better)
    without a policies file: detect reports series, not "0 series"."""
    code, out = ragbench(capsys, "detect", "--store", store, "--machine", "cheetah")
    assert code in (0, 1), out
    series = re.search(r"(\d+) series; newest run", out)
    assert series and int(series.group(1)) >= 12, out  # the newest run's 12 benchmarks


def gate(capsys, store: Path, base: str, head: str, *more, machine="cheetah") -> tuple[int, str]:
    return ragbench(capsys, "gate", "--stored", "--store", store, "--machine", machine,
                    "--base", base, "--head", head, "--no-drift", *more)  # fmt: skip


def test_gate_between_two_commits_of_one_environment(store, capsys):
    """Two commits of py2.7-Cython-numpy1.8, no raw samples, no confidence intervals: every
    cell is judged by its kind (none is "not gated (info)"), and the verdict is what the exit
    code says."""
    code, out = gate(capsys, store, "e29770c2", "42100650")
    assert "Nothing was judged" not in out, out
    info = re.search(r"\| not gated \(info\) \| (\d+) \|", out)
    assert info is None or int(info.group(1)) == 0, out
    verdict = re.search(r"ragbench gate: (PASS|FAIL|INCONCLUSIVE)", out)
    assert verdict and code == (0 if verdict.group(1) == "PASS" else 1), out


def test_gate_refuses_to_compare_two_environments_unless_asked(store, capsys):
    """Base measured under py2.7-numpy1.8, head under py2.7-Cython-numpy1.8: not a change of
    the code, so the gate refuses and names --across-environments; with it, it compares them
    and says what differs besides the code."""
    code, out = gate(capsys, store, "e8679b2e", "42100650")
    assert code == 2, out
    assert OTHER_ENV in out and MAIN_ENV in out and "--across-environments" in out
    code, out = gate(capsys, store, "e8679b2e", "42100650", "--across-environments")
    assert code in (0, 1), out
    assert re.search(r"ragbench gate: (PASS|FAIL|INCONCLUSIVE)", out), out
    assert OTHER_ENV in out and MAIN_ENV in out  # the report says what else differed


def test_gate_in_one_environment_of_a_commit_measured_in_two(store, capsys):
    """fcf8c079 was measured in py2.7-numpy1.8 and py2.7-foo-numpy1.8: pooled, it is refused;
    with --environment the gate compares like with like, and a benchmark that failed on head
    (time_AAA_failure: asv wrote null) fails it."""
    code, out = gate(capsys, store, "fcf8c079", "22b920c6")
    assert code == 2 and "--environment" in out, out
    code, out = gate(capsys, store, "fcf8c079", "22b920c6", "--environment", OTHER_ENV)
    assert code == 1 and "ragbench gate: FAIL" in out, out
    assert "time_AAA_failure" in out


def test_hosted_ci_runners_are_one_machine_and_each_python_an_environment(tmp_path, capsys):
    """lagom's CI ran its benchmarks on three hosted runners (nodes fv-az96-416, ...), one per
    Python: with ``[machines]`` in the policies they are one machine, and each Python (with
    its runner's CPU) is an environment of its own, never one series."""
    policies = tmp_path / "policies.toml"
    shipped = Path(cli.__file__).with_name("policies.toml").read_text()
    policies.write_text(f'{shipped}\n[machines]\n"fv-az*" = "ubuntu-latest"\n')
    path = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main", "--policies",
                         policies, LAGOM)  # fmt: skip
    assert code == 0 and "3 file(s) stored" in out, out
    store = Store(path, read_only=True)
    assert store.machines() == ["ubuntu-latest"]
    environments = sorted(r["environment"] for r in store.runs())
    assert [e.split(",")[0] for e in environments] == ["python 3.10", "python 3.8", "python 3.9"]
    # the dashboard's filter offers them in version order, not as text sorts them
    at = page_at(path, "Series", "ubuntu-latest")
    (python,) = [m for m in at.sidebar.multiselect if m.label == "python"]
    assert python.options == ["3.8.12", "3.9.7", "3.10.0"]


def page_at(store: Path, page: str, machine: str):
    from streamlit.testing.v1 import AppTest

    os.environ["RAGBENCH_STORE"] = str(store)
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py"),
                           default_timeout=120)  # fmt: skip
    at.query_params["page"], at.query_params["machine"] = page, machine
    return at.run()


@pytest.mark.parametrize("page", PAGES)
def test_every_dashboard_page_renders_on_public_results(store, page):
    """asv's and pytest-benchmark's results in one store: no page errs on asv's machine (and
    the pages a pytest-benchmark series is drawn on, on pytest-benchmark's), and the title is
    the asv project's, not this suite's."""
    assert {"cheetah", "minibox"} <= set(Store(store, read_only=True).machines())
    for machine in ("cheetah", "minibox") if page in ("Overview", "Series") else ("cheetah",):
        at = page_at(store, page, machine)
        assert not at.exception, (machine, at.exception)
        assert at.sidebar.title[0].value == "astropy performance"


def test_cells_without_samples_are_judged_by_asvs_own_intervals(store, capsys):
    """fcf8c079 -> 22b920c6 in py2.7-numpy1.8 holds asv's time_ci_small and time_ci_big (value
    3 -> 1, with asv's 99% intervals, no raw samples): each is judged by those intervals as
    ``asv compare`` does, and the report says which test that was: small's apart, big's
    overlapping (not significant, so no evidence either way)."""
    code, out = gate(capsys, store, "fcf8c079", "22b920c6", "--environment", OTHER_ENV)
    assert code == 1, out
    assert "judged by asv's 99% confidence intervals as `asv compare` does" in out, out
    rows = {line.split("`")[1]: line for line in out.splitlines()
            if line.startswith("| `time_ci_") and "99% intervals" in line}  # fmt: skip
    assert "asv's 99% intervals do not overlap" in rows["time_ci_small.time_ci_small"], rows
    assert "asv's 99% intervals overlap (not significant)" in rows["time_ci_big.time_ci_big"]


def test_a_slowdown_that_asv_timed_with_one_call_is_the_codes(tmp_path, capsys):
    """kedro-org/kedro-benchmark-results (tests/data/public/asv-kedro): time_get went from
    0.28 ms (asv's number 39) to 98 ms (number 1: one call is longer than asv's sample, where
    its calibration stops). Before: shown as a measurement setting change, not judged; now a
    regression, and time_exists (number 1 on both sides) beside it."""
    path = tmp_path / "perf.duckdb"
    with Store(path) as s:
        ingest(s, [PUBLIC / "asv-kedro"], branch="main")
    code, out = gate(capsys, path, "826021d699c9", "7b7dad9ddad4", machine="github-actions")
    assert code == 1, out
    regressions = out.split("### Regressions")[1].split("###")[0]
    for name in ("time_get", "time_exists"):
        assert f"`benchmark_kedrodatacatalog.TimeKedroDataCatalog.{name}`" in regressions, out
    assert "### Measurement setting changed" not in out, out
