"""django/django-asv's published results (tests/data/public/asv-django: the newest 100 commits
of ubuntu-latest's conda-py3.12, where asv's ``number`` went from ~89,000 to 1 at c9eb16a8 and
many commits were measured after newer ones) through ingest, detect, alerts and the gate."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import ingest

from ragbench import cli
from ragbench.history import detection
from ragbench.history import edivisive as changepoints
from ragbench.result_files import ingest as store_files
from ragbench.store import Store

DJANGO = Path(__file__).resolve().parent / "data" / "public" / "asv-django"
RESULTS = DJANGO / "results" / "ubuntu-latest"
MACHINE, ENV = "ubuntu-latest", "conda-py3.12"
BASE, HEAD = "2cace96be6d6", "c9eb16a87e60"  # the night asv's number went to 1
BENCH, METRIC = "form_benchmarks.form_validate.benchmark.FormValidate", "time_form_invalid"
INVALID = f"{BENCH}.{METRIC}"  # as the reports name it
# Commits the runner measured after newer ones (their runs started later than a newer
# commit's): what an ingest of the runner's results brings out of order. The first two are
# among the newest 20 of the 100 commits, the third 55 from the newest.
LATE = ("1d50f129", "be6cf832", "2e48636c")


def ragbench(capsys, *args) -> tuple[int, str]:
    """``ragbench ARGS`` in this process: its exit code and what it printed."""
    capsys.readouterr()
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The sample, ingested as main's history (change points and alerts stored)."""
    path = tmp_path_factory.mktemp("django") / "perf.duckdb"
    ingest(Store(path), [DJANGO], branch="main")
    return path


def copy_of(store: Path, tmp_path: Path) -> Path:
    shutil.copyfile(store, tmp_path / "perf.duckdb")
    return tmp_path / "perf.duckdb"


def test_a_step_where_asv_number_changed_is_listed_apart_not_alerted(store, capsys):
    """At c9eb16a8 asv timed time_form_invalid with number 1 where it had 86787: the step up
    (+13,000%) is stored as a measurement setting change, with the settings either side, and
    ``ragbench alerts`` lists it apart from the alerts of the code (before: one alert of 22
    cells, 21 of them this, all called the code's)."""
    s = Store(store, read_only=True)
    found = s.alerts(MACHINE, commit=HEAD, cells="settings")
    timed = {f"{c['benchmark']}.{c['metric']}": c for a in found for c in a["cells"]}
    cell = timed[INVALID]
    assert cell["settings_changed"] == "asv number 86787 -> 1"
    same_code = json.loads(cell["prev_timing"])["version"]  # asv's hash of the benchmark
    assert json.loads(cell["prev_timing"]) == {"number": 86787, "repeat": 10, "version": same_code}
    assert json.loads(cell["timing"]) == {"number": 1, "repeat": 10, "version": same_code}
    code = [c for a in s.alerts(MACHINE, commit=HEAD) for c in a["cells"]]
    assert INVALID not in {f"{c['benchmark']}.{c['metric']}" for c in code}
    assert all(c["settings_changed"] is None for c in code)
    assert len(timed) >= 15 > len(code)
    _, out = ragbench(capsys, "alerts", "--store", store, "--machine", MACHINE)
    listed_apart = out[out.index("## Measurement setting changed") :]
    assert f"`{INVALID}` [{ENV}]: asv number 86787 -> 1" in listed_apart
    alerted = out[: out.index("## Measurement setting changed")]
    assert INVALID not in alerted


def test_detect_and_the_stored_change_points_name_the_setting(store, capsys):
    """The stored change point at c9eb16a8 keeps asv's number and repeat either side, and
    ``detect`` (which reads it) names the cause: a measurement setting (before: "code")."""
    s = Store(store, read_only=True)
    (row,) = [r for r in s.change_points(MACHINE, benchmark=BENCH, metric=METRIC)
              if r["commit_hash"].startswith(HEAD)][:1]  # fmt: skip
    assert json.loads(row["prev_timing"])["number"] == 86787
    assert json.loads(row["timing"])["number"] == 1
    _, out = ragbench(capsys, "detect", "--store", store, "--machine", MACHINE)
    line = next(x for x in out.splitlines() if INVALID in x and HEAD in x)
    assert line.endswith("| measurement setting changed: asv number 86787 -> 1 |"), line


def test_gate_stored_over_the_pair_reports_the_setting_not_regressions(store, capsys):
    """``gate --stored`` over the night the number went to 1: no cell is a regression of the
    code; the cells timed otherwise are listed with their settings, none passes (before: 35
    regressions, not a word on the number)."""
    rc, out = ragbench(capsys, "gate", "--stored", "--store", store, "--machine", MACHINE,
                       "--base", BASE, "--head", HEAD)  # fmt: skip
    assert rc == 1, out
    assert "**INCONCLUSIVE**" in out and "### Regressions" not in out
    assert "| regressions | 0 |" in out
    section = out[out.index("### Measurement setting changed") :]
    assert re.search(rf"`{INVALID}` \| 1\.226e-07 \| 1\.937e-05 \| .* \| asv number 86787 -> 1 \|",
                     section), section  # fmt: skip


def test_gate_report_shows_only_what_the_data_has(store, capsys):
    """A project with no bounds, output hashes or outputs of ragged's to compare: its gate
    report has none of those sections (before: "drift: not compared", rows of bounds and hashes
    at 0, and a settle command that measures with this suite)."""
    rc, out = ragbench(capsys, "gate", "--stored", "--store", store, "--machine", MACHINE,
                       "--base", "cccc004b", "--head", "03988c5a")  # fmt: skip
    assert rc in (0, 1), out
    for words in ("drift", "bound", "hash", "--settle"):
        assert words not in out.lower(), words


def test_gate_stored_on_a_machine_without_the_commit_names_the_machines(store, capsys):
    """A --machine the commit has no run on: one line, exit 2, naming the machine that has
    it (before: git's "Needed a single revision")."""
    rc, out = ragbench(capsys, "gate", "--stored", "--store", store, "--machine", "macos-12",
                       "--base", BASE, "--head", HEAD)  # fmt: skip
    assert rc == 2
    assert out.strip().count("\n") == 0, out
    assert "rev-parse" not in out and "single revision" not in out
    assert f"pass --machine {MACHINE}" in out, out


def test_changepoints_of_a_machine_the_store_lacks_names_the_machines(store, capsys):
    """``ragbench changepoints --machine`` with a name the store has no runs of: one line,
    exit 2, naming the machines it has (before: "0 series up to date", exit 0)."""
    rc, out = ragbench(capsys, "changepoints", "--store", store, "--machine", "ubuntu-lates")
    assert rc == 2, out
    assert out.strip().count("\n") == 0, out
    assert f"its machines: {MACHINE}" in out, out


def test_no_cell_name_ends_in_a_space(store, capsys):
    """django's benchmarks have no parameters: their names are printed without the space that
    an empty parameter list left inside backticks and in a quoted cell (``--cell '... '``; an
    alert of another project's results bisects with asv's own ``asv find ... '^name$'``)."""
    _, out = ragbench(capsys, "alerts", "--store", store, "--machine", MACHINE)
    assert "asv find" in out and "--bench '^" in out and "`" in out
    assert not re.search(r"`[^`\n]* `", out), re.search(r"`[^`\n]* `", out)
    patterns = re.findall(r"'(\^[^'\n]*)'", out)  # the benchmarks' regexes, quoted
    assert patterns and not [p for p in patterns if p.rstrip("$").endswith(" ")], patterns


def test_an_alert_links_djangos_diff_and_re_measures_with_its_config(store, capsys):
    """``ragbench alerts`` on django-asv's results: the alert at c9eb16a8 links django's
    compare page (built from the config's ``repo``, not this checkout's origin), and its
    re-measure gate names django-asv's config and environment and selects its one benchmark
    by the name asv gives it in ``benchmarks.json`` (asv's own parser takes the bisection)."""
    import shlex

    from asv.commands import make_argparser

    _, out = ragbench(capsys, "alerts", "--store", store, "--machine", MACHINE)
    block = out[out.index(f"## {MACHINE} at {HEAD}") :].split("\n## ")[0]
    link = re.search(r"Arrived in \S+: (\S+)", block).group(1)
    assert re.fullmatch(rf"https://github\.com/django/django/compare/{BASE}\w+\.\.\.{HEAD}\w+",
                        link), link  # fmt: skip
    words = shlex.split(re.search(r"Re-measure: `(.+)`", block).group(1))
    conf = str((DJANGO / "asv.conf.json").resolve())
    assert words[:4] == ["ragbench", "gate", "--config", conf], words
    assert words[words.index("--environment") + 1] == ENV, words
    names = json.loads((DJANGO / "results" / "benchmarks.json").read_text())
    benches = [words[i + 1] for i, w in enumerate(words) if w == "--bench"]
    assert benches and all(len([n for n in names if re.search(b, n)]) == 1 for b in benches)
    machine, find = map(shlex.split, re.search(r"Bisect the range: `(.+)`", block).group(1)
                        .split(" && "))  # fmt: skip
    assert machine[:3] == ["asv", "machine", "--yes"], machine  # asv find needs it known
    parsed = make_argparser()[0].parse_args(find[1:])
    assert parsed.range == f"{BASE}..{HEAD}" and parsed.env_spec == ["conda:3.12"], parsed


def test_an_older_store_gets_the_settings_of_its_change_points(store, tmp_path):
    """A store of schema 6 (change points and alert cells without settings), opened for
    writing: its stored change points and alert cells get asv's number and repeat from the
    measurements, the point's and the one before it."""
    path = copy_of(store, tmp_path)
    with duckdb.connect(str(path)) as con:
        for table in ("change_points", "alert_cells"):
            for column in ("timing", "prev_timing"):
                con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    s = Store(path)  # migrates
    (row,) = [r for r in s.change_points(MACHINE, benchmark=BENCH, metric=METRIC)
              if r["commit_hash"].startswith(HEAD)][:1]  # fmt: skip
    assert json.loads(row["prev_timing"]) == {"number": 86787, "repeat": 10}
    assert json.loads(row["timing"]) == {"number": 1, "repeat": 10}
    cells = [c for a in s.alerts(MACHINE, commit=HEAD, cells="settings") for c in a["cells"]]
    assert INVALID in {f"{c['benchmark']}.{c['metric']}" for c in cells}


def test_results_that_arrive_out_of_order_update_their_series_from_their_window_on(
    tmp_path, monkeypatch
):
    """Three commits the runner measured after newer ones, ingested after the rest: the stored
    change points equal those of every series computed again from all its points, and no
    series is computed from its first point again, only from the first window that holds a
    late point (windows of 40 points here, so that 100 commits have five): before, every
    window of each series again."""
    settings = changepoints.Settings(window=40)
    monkeypatch.setattr(changepoints.Settings, "of", classmethod(lambda cls, p: settings))
    data = tmp_path / "django"
    shutil.copytree(DJANGO, data)
    late = tmp_path / "late" / "results" / MACHINE
    late.mkdir(parents=True)
    for prefix in LATE:
        for f in (data / "results" / MACHINE).glob(f"{prefix}-*.json"):
            shutil.move(f, late / f.name)
    s = Store(tmp_path / "perf.duckdb")
    ingest(s, [data], branch="main")
    starts = []
    real = changepoints.found_in

    def recorded(values, settings, first=0):
        starts.append(first)
        return real(values, settings, first)

    monkeypatch.setattr(changepoints, "found_in", recorded)
    report = store_files(s, [late.parent], branch="main")
    detected = detection.update(s, report.new_runs)
    assert len(report.stored) == 3 and detected.series >= 60
    # the deepest late commit is the 46th of the 100: the windows from 20 on hold it
    assert len(starts) >= detected.series and min(starts) == 20, sorted(set(starts))
    newest = {(r["environment"], r["benchmark"], r["metric"], r["param_key"]):
              (r["last_commit"], r["last_env_key"])
              for r in s.change_point_state(MACHINE, ENV)}  # fmt: skip
    computed = len(starts)
    found = changepoints.current(s, MACHINE, settings, newest)
    assert len(starts) == computed  # every series up to date: read as stored
    for env, *key in newest:
        values = [p[7] for p in s.series_points(MACHINE, env, keys=[tuple(key)])]
        stored = [r["position"] for r in found.get((env, *key), [])]
        assert stored == changepoints.change_points(values, settings), key


def test_a_result_ingested_without_benchmarks_json_keeps_its_series_unit(tmp_path):
    """The newest commit's file ingested alone, from a directory without asv's
    ``benchmarks.json`` (where the units are): its rows have no unit, and main's history
    still reads every series in seconds, so its steps are "slower", as the rest of the
    series' (before: the newest run's missing unit made them "higher (worse)", the words of
    a metric without a unit, beside "slower" for the same benchmark in the same alert)."""
    from ragbench.history.series import stored_histories
    from ragbench.policies import load_policies

    data = tmp_path / "django"
    shutil.copytree(DJANGO, data)
    files = sorted((data / "results" / MACHINE).glob("*-*.json"),
                   key=lambda f: json.loads(f.read_text())["date"])  # fmt: skip
    alone = tmp_path / "alone" / MACHINE
    alone.mkdir(parents=True)
    shutil.move(files[-1], alone / files[-1].name)
    s = Store(tmp_path / "perf.duckdb")
    ingest(s, [data], branch="main")
    ingest(s, [alone / files[-1].name], branch="main")
    newest = s.runs(machine=MACHINE)[0]
    assert {m["unit"] for m in s.measurements([newest["run_id"]])} == {None}
    reports = stored_histories(s, MACHINE, load_policies())
    assert reports and {r.unit for r in reports} == {"seconds"}, {r.unit for r in reports}


RAW = "query_benchmarks.query_raw.benchmark.QueryRaw.time_query_raw"


def edited(tmp_path: Path, slower: range, factor: float, recoded_from: int) -> Path:
    """The sample, with time_query_raw ``factor`` times slower at the commits at positions
    ``slower`` (oldest first) and measured with other code of the benchmark (another asv
    ``version``: django-asv's benchmark edited) from position ``recoded_from`` on."""
    data = tmp_path / "django"
    shutil.copytree(DJANGO, data)
    files = sorted((data / "results" / MACHINE).glob("*-*.json"),
                   key=lambda f: json.loads(f.read_text())["date"])  # fmt: skip
    for i, f in enumerate(files):
        doc = json.loads(f.read_text())
        row = dict(zip(doc["result_columns"], doc["results"][RAW], strict=False))
        x = factor if i in slower else 1.0
        for k in ("result", "stats_q_25", "stats_q_75", "stats_ci_99_a", "stats_ci_99_b"):
            row[k] = [v * x for v in row[k]] if row.get(k) else row.get(k)
        if row.get("samples"):
            row["samples"] = [[v * x for v in s] for s in row["samples"]]
        if i >= recoded_from:
            row["version"] = "f" * 64
        doc["results"][RAW] = [row.get(k) for k in doc["result_columns"]]
        f.write_text(json.dumps(doc))
    return data


def test_a_step_where_the_benchmarks_code_changed_is_the_benchmarks_not_the_projects(
    tmp_path, capsys
):
    """asv keeps a hash of each benchmark's code (``version``); django's own sample has one
    commit measured with other code (d0580589: 65 benchmarks' versions, back at 7f395438).
    time_query_raw twice as slow from the commit where its code changed: ``alerts`` lists the
    step apart, as a measurement setting, and alerts nothing; ``detect`` names the setting
    and exits 0; the same step with the same code is the project's (before: an alert of the
    code at that commit with django's link and ``asv find``, and ``detect`` exit 1)."""
    s = Store(tmp_path / "perf.duckdb")
    ingest(s, [edited(tmp_path, range(50, 100), 2.0, 50)], branch="main")
    rc, out = ragbench(capsys, "alerts", "--store", s.name, "--machine", MACHINE)
    alerted, apart = out.split("## Measurement setting changed")
    assert RAW not in alerted
    assert re.search(rf"`{RAW}` \[{ENV}\]: asv version \w{{8}} -> ffffffff", apart), apart
    # the same step, the benchmark's code unchanged: the project's
    shutil.rmtree(tmp_path / "django")
    s = Store(tmp_path / "same.duckdb")
    ingest(s, [edited(tmp_path, range(50, 100), 2.0, 100)], branch="main")
    rc, out = ragbench(capsys, "alerts", "--store", s.name, "--machine", MACHINE)
    assert RAW in out.split("## Measurement setting changed")[0]
    # at the newest commit, which ``detect`` judges against its lookback
    shutil.rmtree(tmp_path / "django")
    s = Store(tmp_path / "newest.duckdb")
    ingest(s, [edited(tmp_path, range(99, 100), 2.0, 99)], branch="main")
    rc, out = ragbench(capsys, "detect", "--store", s.name, "--machine", MACHINE)
    assert rc == 0, out
    newest = out[out.index("### Measurement setting changed on the newest run") :]
    assert re.search(rf"`{RAW}` .*\| measurement setting changed: asv version \w{{8}} -> "
                     r"ffffffff \|\n", newest), newest  # fmt: skip


def test_an_alert_is_not_fixed_by_a_change_of_the_benchmarks_code(tmp_path, capsys):
    """time_query_raw 60% slower from position 40 (the same code: an alert), and back at 88,
    where its benchmark's code changed: the alert stays open, the drop listed apart (before:
    "fixed by" that commit)."""
    s = Store(tmp_path / "perf.duckdb")
    ingest(s, [edited(tmp_path, range(40, 88), 1.6, 88)], branch="main")
    rc, out = ragbench(capsys, "alerts", "--store", s.name, "--machine", MACHINE)
    assert rc == 1, out  # an open alert
    (block,) = [b for b in out.split("\n## ") if f"`{RAW}`" in b and "Measurement" not in b[:40]]
    assert block.splitlines()[0].endswith(": new"), block


def test_the_newest_run_is_judged_against_its_own_benchmark_code(tmp_path, capsys):
    """Found by an attack on the version setting: the benchmark's code changed three commits
    before the newest, which is twice as slow; its lookback of ten held seven points of the
    old code, so the newest was "timed otherwise", not a regression, until the new code's
    points were the most. It is judged against the three of its own code: a regression."""
    s = Store(tmp_path / "perf.duckdb")
    ingest(s, [edited(tmp_path, range(99, 100), 2.0, 96)], branch="main")
    rc, out = ragbench(capsys, "detect", "--store", s.name, "--machine", MACHINE)
    assert rc == 1, out
    assert [x for x in out.splitlines() if f"`{RAW}`" in x and x.endswith("| regression |")]
