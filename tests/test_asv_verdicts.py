"""Verdicts for another project's asv results (issue 35, item 5): default policies by asv's
benchmark kind and unit, asv's own confidence intervals where raw samples are absent, a gate
that judged nothing is inconclusive and says nothing false, ``--policies`` on every command
that judges. The files are written here in asv's result layout (django-asv's shapes: ``time_``
benchmarks in seconds, ``stats_ci_99_a``/``_b`` per cell, samples kept or not)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import duckdb
import pytest

from ragbench import cli
from ragbench.policies import load_policies
from ragbench.store import Store
from ragbench.synth import COLUMNS
from ragbench.verdicts import comparison as compare
from ragbench.verdicts import evidence
from ragbench.verdicts.status import Status

REPO = Path(__file__).resolve().parent.parent
BASE, HEAD = "b" * 40, "c" * 40
MACHINE = "ubuntu-latest"


def asv_result(results: Path, commit: str, cells: dict, day: int = 0, unit: str = "seconds",
               kind: str = "time") -> Path:  # fmt: skip
    """An asv result file of ``commit`` on MACHINE: ``cells`` maps a benchmark's full name to
    (value, raw samples or None, (ci_99_a, ci_99_b) or None); benchmarks.json beside it gives
    each its ``unit`` and ``kind`` (asv's type)."""
    (results / MACHINE).mkdir(parents=True, exist_ok=True)
    bench_path = results / "benchmarks.json"
    bench = json.loads(bench_path.read_text()) if bench_path.exists() else {"version": 2}
    rows = {}
    for name, (value, samples, ci) in cells.items():
        bench[name] = {"name": name, "param_names": [], "params": [], "unit": unit,
                       "type": kind, "version": "1"}  # fmt: skip
        a, b = ci or (None, None)
        rows[name] = [[value], [], "1", 1_700_000_000_000 + day * 86_400_000, 1.0, [a], [b],
                      None, None, [10], [10], [samples] if samples else None, None]  # fmt: skip
    bench_path.write_text(json.dumps(bench))
    data = {"commit_hash": commit, "env_name": "conda-py3.12", "python": "3.12",
            "date": 1_700_000_000_000 + day * 86_400_000, "params": {"machine": MACHINE},
            "requirements": {}, "env_vars": {}, "result_columns": COLUMNS, "results": rows,
            "durations": {}, "version": 2}  # fmt: skip
    path = results / MACHINE / f"{commit[:8]}-conda-py3.12.json"
    path.write_text(json.dumps(data))
    return path


def run(capsys, *args) -> tuple[int, str]:
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


def stored(tmp_path: Path, base: dict, head: dict, **kw) -> Path:
    """A store holding base's and head's result files (one run each)."""
    results = tmp_path / "results"
    asv_result(results, BASE, base, 0, **kw)
    asv_result(results, HEAD, head, 1, **kw)
    path = tmp_path / "s.duckdb"
    with Store(path) as s:
        from ragbench.result_files import ingest

        report = ingest(s, [results], branch="main")
        assert not report.failed, report.failed
    return path


def gate(capsys, store: Path, *args) -> tuple[int, str]:
    return run(capsys, "gate", "--stored", "--store", store, "--base", BASE[:8], "--head",
               HEAD[:8], "--machine", MACHINE, "--no-drift", "--paired-processes", "0",
               *args)  # fmt: skip


NAME = "query_benchmarks.query_delete.benchmark.QueryDelete.time_query_delete"


def cell(name: str, value: float, half: float) -> dict:
    """One sample-less cell (asv run without --record-samples): a value and asv's interval."""
    return {name: (value, None, (value - half, value + half))}


# --- default policies by asv's benchmark kind and unit ----------------------------------------


def test_default_policies_judge_asvs_benchmark_kinds_by_their_units():
    p = load_policies()
    for bench, metric, unit, kind in [
        ("form.FormClean", "time_form_clean", "seconds", "latency"),
        ("mem.Sizes", "peakmem_list", "bytes", "latency"),
        ("mem.Sizes", "mem_list", "bytes", "latency"),
        ("io.Rates", "rows_per_s", "rows/s", "throughput"),  # track_, by its unit
        ("io.Rates", "elapsed", "seconds", "latency"),
        ("tests/test_x.py::test_y", "time", "s", "latency"),  # pytest-benchmark
        ("io.Rates", "count", "unit", "info"),  # asv's default unit of a track_ says nothing
        ("time_utils.Bench", "count", "unit", "info"),  # a module named time_*: not a time_
    ]:
        rule = p.for_metric(bench, metric, unit)
        assert rule.kind == kind, (bench, metric, unit, rule)
        assert rule.threshold == (0.10 if kind != "info" else 0.0)  # asv's --factor 1.1


SUITE = ("kernel", "pipeline", "numerics", "cpu")
# Promises added since, each a bound of its own (the API's launch promises, a new length's)
BOUNDS_ADDED = {
    ("kernel.LaunchPromise", "layout_over_launch"), ("kernel.LaunchPromise", "api_over_aten"),
    ("kernel.NewLength", "first_over_kept"), ("kernel.NewLength", "compiles"),
    ("kernel.NewLength", "host_syncs"),
}  # fmt: skip
# Ratios judged since, as latencies (the kernel's GPU time over an empty kernel's)
LATENCIES_ADDED = {("kernel.GpuFloor", "over_empty")}


def test_this_suites_metrics_keep_their_calibrated_policies_exactly(tmp_path):
    """Every class of this suite's benchmark modules crossed with every track_ metric any of
    them has, under every unit: the same policy as the policies file before the defaults, but
    for the bounds added since."""
    old = tmp_path / "old.toml"
    old.write_text(subprocess.run(["git", "show", "2f95849:ragbench/policies.toml"], cwd=REPO,
                                  capture_output=True, text=True, check=True).stdout)  # fmt: skip
    before, now = load_policies(old), load_policies()
    text = {m: (REPO / "benchmarks" / f"{m}.py").read_text() for m in SUITE}
    metrics = {t for src in text.values() for t in re.findall(r"def track_(\w+)", src)}
    seen = 0
    for module, src in text.items():
        for cls in re.findall(r"^class (\w+)", src, re.M):
            for metric in metrics:
                for unit in ("us", "ms", "img/s", "MiB", "seconds", "s", "bytes", None):
                    a = before.for_metric(f"{module}.{cls}", metric, unit)
                    b = now.for_metric(f"{module}.{cls}", metric, unit)
                    if (f"{module}.{cls}", metric) in BOUNDS_ADDED:
                        assert b.kind == "bound" and b.max is not None
                        continue
                    if (f"{module}.{cls}", metric) in LATENCIES_ADDED:
                        assert b.kind == "latency" and b.threshold == 0.03 and not b.paired
                        continue
                    fields = ("kind", "threshold", "max", "min", "relative_to", "paired",
                              "history_only", "min_samples")  # fmt: skip
                    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields], (
                        module, cls, metric, unit)  # fmt: skip
                    seen += a.kind != "info"
    assert seen  # the calibrated ones were among them
    assert now.for_metric("kernel.KernelLatency", "gpu_us", "us").threshold == 0.02


def test_a_policy_names_units_as_a_list_of_texts(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text('[[policy]]\nmatch = "*"\nunit = "seconds"\nkind = "latency"\n')
    with pytest.raises(ValueError, match="unit of '\\*' must be a list"):
        load_policies(bad)
    bad.write_text("policy = [1]\n")
    with pytest.raises(ValueError, match="must be a table"):
        load_policies(bad)


def test_foreign_time_benchmarks_get_series_and_verdicts(tmp_path, capsys):
    """A foreign project's time_ benchmarks were all info: detect reported 0 series (exit 0)
    and the gate judged nothing. Now both judge them."""
    samples = [1.0 + 0.001 * i for i in range(10)]
    results = tmp_path / "results"
    for day in range(6):
        asv_result(results, f"{day:x}" * 40, {NAME: (samples[5], samples, (1.0, 1.009))}, day)
    store = tmp_path / "s.duckdb"
    assert run(capsys, "ingest", "--store", store, "--branch", "main", results)[0] == 0
    code, out = run(capsys, "detect", "--store", store, "--machine", MACHINE)
    assert "1 series" in out and "Nothing was judged" not in out, out
    assert code == 0, out


# --- asv's confidence intervals where raw samples are absent ---------------------------------


def test_cells_without_samples_are_judged_by_asvs_intervals_as_asv_compare(tmp_path, capsys):
    """The issue's case: no raw samples, two cells at +10-11% whose 99% intervals overlap (asv
    compare: not significant) failed a gate whose policy took one value a side; one at +16%
    with intervals apart is a regression for both."""
    policies = tmp_path / "policies.toml"  # what judging a sample-less project took before
    policies.write_text('[[policy]]\nmatch = "*"\nmetric = "time_*"\nkind = "latency"\n'
                        'threshold = 0.10\nmin_samples = 1\n')  # fmt: skip
    a, b, c = (f"q.Q{i}.time_q{i}" for i in range(3))
    base = {**cell(a, 1.0, 0.08), **cell(b, 1.0, 0.08), **cell(c, 1.0, 0.02)}
    head = {**cell(a, 1.105, 0.08), **cell(b, 1.11, 0.08), **cell(c, 1.16, 0.02)}
    store = stored(tmp_path, base, head)
    for extra in ((), ("--policies", policies)):
        code, out = gate(capsys, store, *extra)
        assert code == 1 and "FAIL" in out.splitlines()[0], out
        verdicts = {line.split("`")[1]: line for line in out.splitlines()
                    if line.startswith("| `") and "99% intervals" in line}  # fmt: skip
        assert "do not overlap" in verdicts[c] and c in out.split("### Regressions")[1]
        for name in (a, b):  # inconclusive: not significant is no evidence of "not worse"
            assert "overlap (not significant)" in verdicts[name], verdicts[name]
        regressions = out.split("### Regressions")[1].split("###")[0]
        assert a not in regressions and b not in regressions
        assert "judged by asv's 99% confidence intervals" in out


def key(name: str) -> compare.Key:
    bench, _, metric = name.rpartition(".")
    return (bench, metric, "")


def side(name: str, value: float, ci, samples=None) -> dict:
    bench, metric, _ = key(name)
    return {key(name): compare.Cell(bench, metric, "", {}, "seconds", samples or [value],
                                    ci=ci)}  # fmt: skip


@pytest.mark.parametrize(
    ("base_ci", "head", "head_ci", "status"),
    [
        ((0.99, 1.01), 1.01, (1.0, 1.02), Status.UNCHANGED),  # tight: shown within 10%
        ((0.9, 1.1), 1.03, (0.93, 1.13), Status.INCONCLUSIVE),  # wide: head/base to 1.26
        ((0.9, 1.1), 1.08, (0.98, 1.18), Status.INCONCLUSIVE),  # wide, +8%: no evidence
        ((0.99, 1.01), 1.2, (1.19, 1.21), Status.REGRESSION),
        ((0.99, 1.01), 0.8, (0.79, 0.81), Status.IMPROVEMENT),
        ((0.99, 1.01), 1.05, (1.04, 1.06), Status.UNCHANGED),  # different, within 10%
    ],
)
def test_by_interval_keeps_the_rule_of_evidence(base_ci, head, head_ci, status):
    """``evidence.RULE`` for a cell judged by intervals: unchanged only with the power to see the
    threshold (intervals narrow enough to have separated a 10% change) or where the ratios
    both intervals allow stay under it; a cell with neither samples nor an interval has no
    evidence."""
    c = compare.compare(side(NAME, 1.0, base_ci), side(NAME, head, head_ci),
                        load_policies())  # fmt: skip
    (v,) = c.verdicts
    assert v.status == status, v
    assert v.method == evidence.INTERVAL
    assert v.interval[0] <= v.ratio <= v.interval[1]
    (v,) = compare.compare(side(NAME, 1.0, None), side(NAME, head, head_ci),
                           load_policies()).verdicts  # fmt: skip
    assert v.status == Status.INCONCLUSIVE and "too few samples" in v.note


def test_raw_samples_are_tested_before_intervals():
    samples = [1.0 + 0.001 * i for i in range(10)]
    (v,) = compare.compare(side(NAME, 1.0, (0.5, 2.0), samples),
                           side(NAME, 1.0, (0.5, 2.0), samples),
                           load_policies()).verdicts  # fmt: skip
    assert v.method == "asv" and v.p is not None


def test_pooled_runs_keep_the_hull_of_their_intervals():
    one = side(NAME, 1.0, (0.9, 1.1))[key(NAME)]
    two = side(NAME, 1.2, (1.1, 1.3))[key(NAME)]
    none = side(NAME, 1.0, None)[key(NAME)]
    assert compare.pool([one, two])[key(NAME)].ci == (0.9, 1.3)
    assert compare.pool([one, none])[key(NAME)].ci is None  # a run without one: no interval


def test_the_store_keeps_asvs_interval_and_migrates_schema_2(tmp_path):
    path = stored(tmp_path, cell(NAME, 1.0, 0.05), cell(NAME, 1.0, 0.05))
    row = Store(path, read_only=True).series()[0]
    assert (row["ci_99_a"], row["ci_99_b"]) == (0.95, 1.05)
    con = duckdb.connect(str(path))  # as schema 2 left it: no interval columns
    con.execute("ALTER TABLE measurements DROP COLUMN ci_99_a")
    con.execute("ALTER TABLE measurements DROP COLUMN ci_99_b")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(Exception, match="schema 2: open it once for writing"):
        Store(path, read_only=True).runs()
    rows = Store(path).series()  # a writer migrates
    assert len(rows) == 2 and rows[0]["ci_99_a"] is None


def test_an_interval_that_is_not_one_refuses_the_file(tmp_path, capsys):
    results = tmp_path / "results"
    asv_result(results, BASE, {NAME: (1.0, None, (1.1, 0.9))})
    code, out = run(capsys, "ingest", "--store", tmp_path / "s.duckdb", results)
    assert code == 1 and "is not one" in out, out
    asv_result(results, BASE, {NAME: (1.0, None, (-0.04, 2.0))})  # asv's, from few samples
    code, out = run(capsys, "ingest", "--store", tmp_path / "s.duckdb", results)
    assert code == 0, out


def test_an_interval_reaching_below_zero_shows_no_power():
    """asv extends the interval of few samples below 0 (the suite's own CPU img/s: -0.039):
    such a side allows any ratio, and the cell could detect nothing."""
    (v,) = compare.compare(side(NAME, 1.0, (0.99, 1.01)), side(NAME, 1.0, (-0.04, 2.0)),
                           load_policies()).verdicts  # fmt: skip
    assert v.interval == (0.0, 2.0 / 0.99) and v.detectable == float("inf")
    assert v.status == Status.INCONCLUSIVE


# --- a gate that judged nothing ---------------------------------------------------------------


def test_a_foreign_gate_of_info_cells_is_inconclusive_and_says_nothing_false(tmp_path, capsys):
    """track_ benchmarks in asv's default unit: nothing judged. The gate said INCONCLUSIVE
    but claimed "the gated cells are deterministic bounds", and detect said 0 series, exit 0."""
    count = "q.Q.track_count"
    store = stored(tmp_path, {count: (3.0, None, None)}, {count: (4.0, None, None)},
                   unit="unit", kind="track")  # fmt: skip
    code, out = gate(capsys, store)
    assert code == 1 and "INCONCLUSIVE" in out.splitlines()[0], out
    assert "deterministic bounds" not in out and "torch None" not in out and "CPU" not in out
    assert "Nothing was judged" in out and "--policies FILE" in out
    # what was not judged is still shown, with its values (the CPU demo's timings are info)
    assert "Shown, not judged: 1 cell(s)" in out and "| 3 | 4 | 1.33 |" in out, out
    code, out = run(capsys, "detect", "--store", store, "--machine", MACHINE)
    assert code == 1 and "Nothing was judged" in out and "--policies FILE" in out, out


# --- --policies on every command that judges --------------------------------------------------


@pytest.mark.parametrize("command", ["gate", "versions", "detect", "verdict", "accept"])
def test_every_command_that_judges_takes_policies(command, tmp_path):
    args = {"gate": ["--base", BASE], "versions": [], "detect": [],
            "verdict": ["--gate-json", "g.json"], "accept": ["--user", "u"]}[command]  # fmt: skip
    if command in ("verdict", "accept"):
        args += ["--pr", "1", "--head", HEAD]
    ns = cli.parser().parse_args([command, *args, "--policies", str(tmp_path / "p.toml")])
    assert ns.policies == tmp_path / "p.toml"


def test_policies_of_the_command_line_judge(tmp_path, capsys):
    """A policies file that makes every metric info: the gate and detect judge nothing."""
    samples = [1.0 + 0.001 * i for i in range(10)]
    store = stored(tmp_path, {NAME: (samples[5], samples, None)},
                   {NAME: (samples[5], samples, None)})  # fmt: skip
    info = tmp_path / "info.toml"
    info.write_text('[[policy]]\nmatch = "*"\nkind = "info"\n')
    assert "Nothing was judged" not in gate(capsys, store)[1]
    code, out = gate(capsys, store, "--policies", info)
    assert code == 1 and "Nothing was judged" in out
    code, out = run(capsys, "detect", "--store", store, "--machine", MACHINE, "--policies", info)
    assert code == 1 and "Nothing was judged" in out
    code, out = run(
        capsys,
        "verdict",
        "--store",
        store,
        "--gate-json",
        tmp_path / "none.json",
        "--pr",
        "1",
        "--head",
        HEAD,
        "--policies",
        tmp_path / "missing.toml",
    )
    assert code == 2 and "missing.toml" in out, out  # read before anything is recorded


# --- the test asv runs on raw samples ------------------------------------------------------------


def test_ten_samples_a_side_can_fail_a_run_of_sixty_cells():
    """django-asv keeps 10 raw samples a cell and judges about 60 cells a run. The normal
    approximation never gives p below 1.8e-4 there, above Holm's 0.01 / 60: a cell 7x slower,
    every sample apart, was inconclusive ("too few samples to detect any change"). The exact
    distribution (asv's own up to 20 values a side) gives 1.1e-5."""
    fast = [1.0 + 0.001 * i for i in range(10)]
    base, head = {}, {}
    for i in range(60):
        name = f"q.Q{i}.time_q{i}"
        base.update(side(name, 1.0, None, fast))
        head.update(side(name, 7.0 if i == 0 else 1.0, None,
                         [x * (7.0 if i == 0 else 1.0) for x in fast]))  # fmt: skip
    c = compare.compare(base, head, load_policies())
    assert [v.key[0] for v in c.by_status(Status.REGRESSION)] == ["q.Q0"]
    assert all(v.status == Status.UNCHANGED for v in c.verdicts[1:])  # and the rest shown so


def test_the_exact_distribution_where_asv_uses_it():
    from scipy.stats import mannwhitneyu

    from ragbench import stats

    a, b = list(range(10)), [x + 0.5 for x in range(10)]
    assert stats.mann_whitney(a, b)[1] == mannwhitneyu(b, a, method="exact").pvalue
    tied = [0.0, *range(9)]  # a tie: scipy's exact assumes none; the tied ranks' own
    assert stats.mann_whitney(tied, b)[1] == stats.tied_exact_p(tied, b)
    many = list(range(21))  # beyond asv's 20 a side
    assert stats.mann_whitney(many, b)[1] == mannwhitneyu(b, many, method="asymptotic").pvalue
