"""main's alerts (ragbench/history/alerting.py): steps grouped by commit, stored with a state that
people set and later runs keep, marked fixed when a later run shows them undone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench import follow_up
from ragbench.commands import alerts as alerts_command
from ragbench.history import alerting as alerts
from ragbench.history import edivisive as changepoints
from ragbench.policies import load_policies
from ragbench.store import Measurement, Run, Store

REPO = Path(__file__).resolve().parent.parent
POLICIES = load_policies()
STEP = 20  # the commit the slowdown arrives with


def sha(i: int) -> str:
    return f"{i:040x}"


def history(store: Store, commits: range, slow: set[int], machine: str = "m1",
            mode: str = "quick") -> list[str]:  # fmt: skip
    """A run a commit on main (of the suite's ``mode`` grid): triton and fa2 gpu_us 10% slower
    at the commits in ``slow``, torch_varlen unchanged; -> the run ids."""
    rng = np.random.default_rng(commits.start)
    ids = []
    with store.writing():  # one connection for them all, as an ingest's files share one
        for i in commits:
            run = Run("asv", sha(i), machine, started_at=1.8e9 + i * 3600,
                      commit_time=1.8e9 + i * 3600, branch="main",
                      fingerprint={"gpu": "Test GPU", "torch": "2.11.0"}, mode=mode)  # fmt: skip
            factor = 1.1 if i in slow else 1.0
            rows = [
                Measurement("kernel.KernelLatency", "gpu_us", {"backend": b}, "us",
                            float(np.median(v := rng.normal(center * f, 0.02, 20))),
                            samples=list(v))
                for b, center, f in (("triton", 10, factor), ("fa2", 12, factor),
                                     ("torch_varlen", 20, 1.0))
            ]  # fmt: skip
            store.add_run(run, rows)
            ids.append(run.run_id)
    changepoints.update(store, ids, POLICIES)
    return ids


def test_a_step_is_one_alert_of_its_commit_kept_and_fixed_when_undone(tmp_path):
    store = Store(tmp_path / "perf.duckdb")
    history(store, range(40), slow=set(range(STEP, 40)))
    assert alerts.update(store, "m1", POLICIES) == (1, 0, 0)
    (a,) = store.alerts("m1")
    assert (a["commit_hash"], a["prev_commit_hash"], a["state"]) == (sha(STEP), sha(STEP - 1),
                                                                     "new")  # fmt: skip
    cells = {c["param_key"]: c for c in a["cells"]}
    assert set(cells) == {"backend=triton", "backend=fa2"}  # torch_varlen did not move
    t = cells["backend=triton"]
    assert t["after"] / t["before"] == pytest.approx(1.1, abs=0.01)
    assert t["ratio_lo"] < 1.1 < t["ratio_hi"] and t["ratio_lo"] > 1.05
    assert alerts.update(store, "m1", POLICIES) == (0, 0, 0)  # nothing new: nothing changes

    alerts.change_state(store, "m1", sha(STEP)[:12], "acknowledged", by="ana")
    history(store, range(40, 44), slow=set())  # four commits back at 10 and 12: not yet fixed
    assert alerts.update(store, "m1", POLICIES)[1] == 0
    assert store.alerts("m1")[0]["state"] == "acknowledged"
    history(store, range(44, 46), slow=set())  # a step back of the code, over FIX_POINTS
    assert alerts.update(store, "m1", POLICIES)[1] == 1
    (a,) = store.alerts("m1", commit=sha(STEP))
    assert (a["state"], a["fixed_by"]) == ("fixed", sha(40))  # back from 40 on


def test_the_follow_ups_of_an_alert_of_the_full_grid_name_it(tmp_path):
    """main's runs measured the full grid (``bench-main``): the printed re-measurement and
    bisection pass ``--mode full`` (before: none, so the quick grid, which lacks most cells:
    the bisection refused them); of the quick grid, nothing."""
    for mode in ("full", "quick"):
        store = Store(tmp_path / f"{mode}.duckdb")
        history(store, range(30), slow=set(range(STEP, 30)), mode=mode)
        alerts.update(store, "m1", POLICIES)
        (a,) = store.alerts("m1")
        assert a["mode"] == mode
        a = {**a, "prev_commit_hash": sha(STEP - 2)}  # two commits: a bisection is offered
        repro, bisect = follow_up.repro_command(a), follow_up.bisect_command(a)
        assert repro.startswith("ragbench gate --mode full --base" if mode == "full"
                                else "ragbench gate --base"), repro  # fmt: skip
        assert ("--mode full" in bisect) == (mode == "full"), bisect
    # no measured commit before it (a history's first): the commit's parent, never itself
    first = follow_up.repro_command({**a, "prev_commit_hash": None})
    assert f"--base {sha(STEP)[:12]}~1 --head {sha(STEP)[:12]} " in first, first


def test_a_state_set_by_hand_is_kept_and_what_is_no_state_is_refused(tmp_path):
    store = Store(tmp_path / "perf.duckdb")
    history(store, range(30), slow=set(range(STEP, 30)))
    alerts.update(store, "m1", POLICIES)
    with pytest.raises(alerts.AlertError, match="needs --reason"):
        alerts.change_state(store, "m1", sha(STEP), "expected", by="ana")
    with pytest.raises(alerts.AlertError, match="found by a later run"):
        alerts.change_state(store, "m1", sha(STEP), "fixed", by="ana")
    with pytest.raises(alerts.AlertError, match="no alert of m1"):
        alerts.change_state(store, "m1", sha(3), "invalid", by="ana")
    alerts.change_state(store, "m1", sha(STEP), "expected", by="ana", reason="a larger tile")
    history(store, range(30, 34), slow=set())  # undone, but someone said it was expected
    alerts.update(store, "m1", POLICIES)
    (a,) = store.alerts("m1")
    assert (a["state"], a["reason"], a["changed_by"]) == ("expected", "a larger tile", "ana")
    command = follow_up.repro_command(a)
    assert command.startswith(f"ragbench gate --base {sha(STEP - 1)[:12]} --head "
                              f"{sha(STEP)[:12]} --machine m1 --bench")  # fmt: skip
    assert r"kernel\.KernelLatency\.track_gpu_us" in command


def test_an_ingest_makes_the_alerts_and_the_cli_lists_and_changes_them(tmp_path):
    """The alerts come with each ingest of main (no command to remember); ``ragbench alerts``
    lists them with their cells and the repro command, and changes a state (exit 2, one line,
    for one that does not exist)."""
    from ragbench import synth

    out = synth.write_history(tmp_path / "history", 40)
    path = tmp_path / "perf.duckdb"
    ingested = subprocess.run([sys.executable, "-m", "ragbench", "ingest", "--store", str(path),
                               "--branch", "main", str(out)], capture_output=True, text=True,
                              cwd=REPO)  # fmt: skip
    assert ingested.returncode == 0, ingested.stderr
    # synth's history gets faster (-10%) and changes torch: change points, no alert
    assert "change points of" in ingested.stderr and "of main's alerts" not in ingested.stderr

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "ragbench", "alerts", "--store", str(path),
                               *args], capture_output=True, text=True, cwd=REPO)  # fmt: skip

    store = Store(path)
    history(store, range(40, 70), slow=set(range(55, 70)), machine=synth.MACHINE)
    alerts.update(store, synth.MACHINE, POLICIES)
    listed = cli("--machine", synth.MACHINE)
    assert listed.returncode == 1, listed.stderr  # a new alert: something to look at
    assert sha(55)[:12] in listed.stdout and "new" in listed.stdout
    assert "10.0% slower" in listed.stdout or "% slower" in listed.stdout
    assert "ragbench gate --base" in listed.stdout
    done = cli("--machine", synth.MACHINE, "--set", "acknowledged", "--commit", sha(55)[:12],
               "--user", "ana")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert cli("--machine", synth.MACHINE).returncode == 0  # nothing new
    bad = cli("--machine", synth.MACHINE, "--set", "invalid", "--commit", "beef", "--user", "x")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_alerts_in_a_lake(tmp_path, postgres):
    store = Store(postgres.lake(tmp_path))
    history(store, range(30), slow=set(range(STEP, 30)))
    assert alerts.update(store, "m1", POLICIES) == (1, 0, 0)
    alerts.change_state(store, "m1", sha(STEP), "invalid", by="ana")
    assert [a["state"] for a in store.alerts("m1")] == ["invalid"]


def test_a_copy_brings_the_alerts_with_the_runs(tmp_path):
    source = Store(tmp_path / "runner.duckdb")
    history(source, range(30), slow=set(range(STEP, 30)))
    alerts.update(source, "m1", POLICIES)
    alerts.change_state(source, "m1", sha(STEP), "acknowledged", by="ana")
    target = Store(tmp_path / "central.duckdb")
    added, _ = target.copy_from(Store(source.path, read_only=True))
    assert added["alerts"] == 1 and added["alert_cells"] == 2
    assert target.alerts("m1") == source.alerts("m1")


# --- alerts that stay true ------------------------------------------------------------------

CELL = ("kernel.KernelLatency", "gpu_us", {"backend": "triton"}, "us")


def series(store: Store, values, start: int = 0, machine: str = "m1",
           torch=lambda i: "2.11.0", environment: str | None = None) -> list[str]:  # fmt: skip
    """One cell's runs on main, a commit a value from commit ``start`` on (20 samples each,
    1% apart around it); ``torch``: the stack of commit i; -> the run ids. The change points
    are stored, as an ingest does."""
    ids = []
    with store.writing():
        for i, v in enumerate(values, start):
            run = Run("asv", sha(i), machine, started_at=1.8e9 + i * 3600,
                      commit_time=1.8e9 + i * 3600, branch="main",
                      fingerprint={"gpu": "Test GPU", "torch": torch(i)},
                      environment=environment)  # fmt: skip
            samples = list(np.linspace(0.99, 1.01, 20) * v)
            store.add_run(run, [Measurement(*CELL, float(np.median(samples)), samples=samples)])
            ids.append(run.run_id)
    changepoints.update(store, ids, POLICIES)
    return ids


def noisy(rng, level: float, n: int, sd: float = 0.04) -> list[float]:
    return list(level * (1 + rng.normal(0, sd, n)))


def test_three_lucky_points_back_after_a_step_do_not_fix_it(tmp_path):
    """+20% at commit 30 of a series 4% noisy; three points back within the threshold by luck,
    then 17 more at +20%: never fixed (a step back needs a change point of the code whose
    segment, at least FIX_POINTS points, is back within the threshold)."""
    store = Store(tmp_path / "perf.duckdb")
    rng = np.random.default_rng(3)
    series(store, noisy(rng, 10, 30) + noisy(rng, 12, 20))
    assert alerts.update(store, "m1", POLICIES)[0] == 1
    series(store, [10.05, 9.95, 10.1], start=50)  # lucky: within 3% of the old level
    assert alerts.update(store, "m1", POLICIES)[1] == 0
    series(store, noisy(rng, 12, 17), start=53)
    alerts.update(store, "m1", POLICIES)
    (a,) = [a for a in store.alerts("m1") if a["commit_hash"] == sha(30)]
    assert a["state"] == "new" and a["fixed_by"] is None


def test_a_step_measured_a_commit_at_a_time_is_one_alert_where_it_began(tmp_path):
    """+20% at commit 30 of a series 1% noisy, ingested a commit at a time from 28 on, as
    bench-main records each push. Before: the next commits' lookback still held the old level
    and raised the step again (an alert at 31 or 32, new for good). The change point that
    E-Divisive must put at 29 while the step has two points (its segments have three) makes
    an alert there that the next point moves: invalid, saying so. A history ingested at once
    has its newest points' step where it began (before: at the newest, "arrived in" the
    commit before it, which had the step too)."""
    for seed in range(4):
        rng = np.random.default_rng(100 + seed)
        values = [v * (1.2 if i >= 30 else 1) for i, v in enumerate(noisy(rng, 10, 37, 0.01))]
        store = Store(tmp_path / f"{seed}.duckdb")
        series(store, values[:28])
        alerts.update(store, "m1", POLICIES)
        for i in range(28, 37):
            series(store, values[i : i + 1], start=i)
            alerts.update(store, "m1", POLICIES)
        found = {a["commit_hash"]: a for a in store.alerts("m1")}
        assert (found[sha(30)]["state"], found[sha(30)]["prev_commit_hash"]) == ("new", sha(29))
        moved = f"no step here any more: the commits measured since put it at {sha(30)[:12]}"
        assert all((a["state"], a["reason"]) == ("invalid", moved)
                   for c, a in found.items() if c != sha(30)), (seed, found)  # fmt: skip
    store = Store(tmp_path / "once.duckdb")
    series(store, [10.0] * 28 + [12.0] * 2)
    alerts.update(store, "m1", POLICIES)
    (a,) = store.alerts("m1")
    assert (a["commit_hash"], a["prev_commit_hash"]) == (sha(28), sha(27))
    assert [(c["found_by"], c["before"], c["after"]) for c in a["cells"]] == [
        ("newest run", 10.0, 12.0)
    ]


def test_a_fixed_alert_whose_series_returns_to_the_regressed_level_reopens(tmp_path):
    store = Store(tmp_path / "perf.duckdb")
    series(store, [10.0] * 30 + [12.0] * 20)
    assert alerts.update(store, "m1", POLICIES)[:2] == (1, 0)
    series(store, [10.0] * 25, start=50)  # a fix of the code: 25 points back
    assert alerts.update(store, "m1", POLICIES)[1] == 1
    (a,) = store.alerts("m1")
    assert (a["state"], a["fixed_by"]) == ("fixed", sha(50))
    series(store, [12.0] * 25, start=75)  # and the regression is back
    counts = alerts.update(store, "m1", POLICIES)
    (a,) = store.alerts("m1", commit=sha(30))
    assert a["state"] == "new" and a["reason"].startswith("reopened")
    assert len(store.alerts("m1")) == 1 and counts == (0, 0, 1)  # the alert itself, no other


def test_fixed_by_names_the_commit_that_brought_the_level_back(tmp_path):
    """Before: the newest change point of the code whose segment is back was named the fix,
    so an unrelated speed-up 20 commits after the fix was; and the fix stayed where it was
    first found when the commits before it were measured late."""
    store = Store(tmp_path / "perf.duckdb")
    series(store, [10.0] * 30 + [12.0] * 20 + [10.0] * 20 + [8.0] * 20)
    alerts.update(store, "m1", POLICIES)
    (a,) = store.alerts("m1")
    assert (a["state"], a["fixed_by"]) == ("fixed", sha(50))
    late = Store(tmp_path / "late.duckdb")
    series(late, [10.0] * 30 + [12.0] * 20)
    alerts.update(late, "m1", POLICIES)
    series(late, [10.0] * 9, start=52)  # 50 and 51, the fix, measured after 52-60
    alerts.update(late, "m1", POLICIES)
    assert late.alerts("m1")[0]["fixed_by"] == sha(52)
    series(late, [10.0] * 2, start=50)
    alerts.update(late, "m1", POLICIES)
    (a,) = late.alerts("m1")
    why = f"every step undone from {sha(50)[:12]} on"
    assert (a["state"], a["fixed_by"], a["reason"]) == ("fixed", sha(50), why)


def test_a_stack_upgrade_does_not_fix_a_code_alert(tmp_path):
    """+20% by the code at 30, then torch 2.11 makes the cell ~17% faster at 50: back at the old
    level, but by the environment: the alert stays open and says so."""
    store = Store(tmp_path / "perf.duckdb")
    stack = lambda i: "2.10.0" if i < 50 else "2.11.0"  # noqa: E731
    series(store, [10.0] * 30 + [12.0] * 20, torch=stack)
    alerts.update(store, "m1", POLICIES)
    series(store, [10.0] * 25, start=50, torch=stack)
    assert alerts.update(store, "m1", POLICIES)[1] == 0
    (a,) = store.alerts("m1")
    assert a["state"] == "new"
    (moved,) = alerts.moves(store, "m1", a, POLICIES)
    assert f"faster at {sha(50)[:12]} (environment: torch 2.10.0 -> 2.11.0)" in moved, moved
    assert moved.endswith("; no fix of the code")


def test_the_moves_of_several_alerts_read_their_series_once(tmp_path):
    """Two steps of the code (+20% at 30, again at 50), then torch 2.11 takes the cell back
    down at 70: each alert says so, and the series of both is read once (one query an
    environment; one alert at a time read it again each time: 6.5 s an alert on django-asv's
    history)."""
    store = Store(tmp_path / "perf.duckdb")
    stack = lambda i: "2.10.0" if i < 70 else "2.11.0"  # noqa: E731
    series(store, [10.0] * 30 + [12.0] * 20 + [14.4] * 20, torch=stack)
    alerts.update(store, "m1", POLICIES)
    series(store, [10.0] * 25, start=70, torch=stack)
    alerts.update(store, "m1", POLICIES)
    found = store.alerts("m1")
    assert [a["commit_hash"] for a in found] == [sha(50), sha(30)]
    reads, read = [], store.series_points
    store.series_points = lambda *a, **k: reads.append(a) or read(*a, **k)
    moved = alerts.moves_of(store, "m1", found, POLICIES)
    assert len(reads) == 1
    for a in found:
        (line,) = moved[a["commit_hash"]]
        assert f"faster at {sha(70)[:12]} (environment: torch 2.10.0 -> 2.11.0)" in line, line
        assert moved[a["commit_hash"]] == alerts.moves(store, "m1", a, POLICIES)


def test_a_concurrent_ingest_never_overwrites_a_persons_state(tmp_path):
    """The race, made deterministic: the ingest read the alert as new, a person set expected,
    then the ingest found every step undone. Its update is conditional on the state it read:
    it changes nothing, and the person's state stands."""
    store = Store(tmp_path / "perf.duckdb")
    series(store, [10.0] * 30 + [12.0] * 20)
    alerts.update(store, "m1", POLICIES)
    series(store, [10.0] * 25, start=50)
    read_by_ingest = store.alerts("m1")
    changed = alerts.change_state(store, "m1", sha(30)[:12], "expected", by="ana",
                                  reason="a larger tile")  # fmt: skip

    class StaleRead:
        """The store as the ingest saw it: its alerts as read before the person's change."""

        def __getattr__(self, name):
            return getattr(store, name)

        def alerts(self, machine=None, **kw):
            return [a for a in read_by_ingest if machine in (None, a["machine"])]

    alerts.update(StaleRead(), "m1", POLICIES)
    (a,) = store.alerts("m1")
    assert (a["state"], a["changed_by"], a["reason"]) == ("expected", "ana", "a larger tile")
    was, now = changed  # what the CLI prints: the state read and the state stored
    assert (was["state"], now) == ("new", "expected")


def test_an_alerts_numbers_tell_one_story(tmp_path):
    """A step is raised only where its after/before interval excludes 1.0 and its estimate,
    inside that interval, is beyond the threshold. The newest run of a series whose level fell
    at 30 is judged against its lookback (the points at the new level): the interval of the
    same points as the estimate, not the 20 before it of both levels."""
    store = Store(tmp_path / "perf.duckdb")
    series(store, [11.0] * 30 + [10.0] * 10 + [10.6])
    alerts.update(store, "m1", POLICIES)
    (a,) = store.alerts("m1")
    (c,) = a["cells"]
    assert (a["commit_hash"], c["found_by"]) == (sha(40), "newest run")
    ratio = c["after"] / c["before"]
    assert 1 < c["ratio_lo"] <= ratio <= c["ratio_hi"] and ratio == pytest.approx(1.06)
    assert not alerts.raised(
        {"kind": "latency", "before": 1.0, "after": 1.101, "ratio_lo": 0.979, "ratio_hi": 1.402},
        0.10,
    )  # holds 1.0
    assert not alerts.raised(
        {"kind": "latency", "before": 1.0, "after": 1.101, "ratio_lo": 1.009, "ratio_hi": 1.067},
        0.10,
    )  # disagree
    assert alerts.raised({"kind": "latency", "before": 1.0, "after": 1.12,
                          "ratio_lo": 1.09, "ratio_hi": 1.15}, 0.10)  # fmt: skip


def test_stale_series_are_named_with_their_date_and_not_judged(tmp_path):
    """An environment dropped at commit 20 (py3.8) whose last point was slow: not the newest
    run of anything. detect and alerts name it with its date; neither judges it."""
    store = Store(tmp_path / "perf.duckdb")
    series(store, [10.0] * 19 + [13.0], environment="py3.8")
    series(store, [10.0] * 40, environment="py3.12")
    assert alerts.update(store, "m1", POLICIES)[0] == 0
    (stale,) = alerts.stale_series(store, "m1", POLICIES)
    assert stale.environment == "py3.8" and stale.status == "stale"
    path = str(store.path)
    detect = subprocess.run([sys.executable, "-m", "ragbench", "detect", "--store", path,
                             "--machine", "m1", "--last", "2000"], capture_output=True,
                            text=True, cwd=REPO)  # fmt: skip
    assert detect.returncode == 0, detect.stdout + detect.stderr
    assert "1 stale series" in detect.stdout and str(stale.stale_since) in detect.stdout
    listed = subprocess.run([sys.executable, "-m", "ragbench", "alerts", "--store", path,
                             "--machine", "m1"], capture_output=True, text=True,
                            cwd=REPO)  # fmt: skip
    assert listed.returncode == 0 and f"of {stale.stale_since}" in listed.stdout, listed.stdout


def test_an_unknown_state_or_machine_is_refused_in_one_line(tmp_path):
    store = Store(tmp_path / "perf.duckdb")
    series(store, [10.0] * 30 + [12.0] * 20)
    alerts.update(store, "m1", POLICIES)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "ragbench", "alerts", "--store",
                               str(store.path), *args], capture_output=True, text=True,
                              cwd=REPO)  # fmt: skip

    for args in (("--state", "bogus"), ("--machine", "m2")):
        out = cli(*args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out
        assert out.stdout == ""
    new = cli("--state", "New")  # a state's name in any case
    assert new.returncode == 1 and sha(30)[:12] in new.stdout


ERROR = ("numerics.KernelError", "error_ratio", {"backend": "triton", "dtype": "float16"}, None)


def numerics(store: Store, ratios, start: int = 0, machine: str = "m1",
             policies=POLICIES) -> None:  # fmt: skip
    """The kernel's error ratio (bound: at most 2) a commit from ``start`` on, and a
    latency beside it."""
    for i, r in enumerate(ratios, start):
        run = Run("asv", sha(i), machine, started_at=1.8e9 + i * 3600, commit_time=1.8e9 + i * 3600,
                  branch="main", fingerprint={"gpu": "Test GPU", "torch": "2.11.0"})  # fmt: skip
        samples = list(np.linspace(9.9, 10.1, 20))
        store.add_run(run, [Measurement(*ERROR, r, samples=[r]),
                            Measurement(*CELL, 10.0, samples=samples)])  # fmt: skip
        if i >= start + len(ratios) - 3:  # an ingest of each of the newest three commits
            changepoints.update(store, [run.run_id], policies)
            alerts.update(store, machine, policies)


def test_a_broken_bound_on_mains_newest_commit_is_an_alert(tmp_path):
    """The kernel's error ratio 6,418 against its bound of 2 from commit 20 on: an alert of
    commit 20 (the commit after keeps it, makes no second one), ``ragbench alerts`` and
    ``ragbench detect`` exit 1 and say the value against the bound."""
    store = Store(tmp_path / "perf.duckdb")
    numerics(store, [1.1] * 20 + [6418.0] * 2)
    (a,) = store.alerts("m1")
    (c,) = a["cells"]
    assert (a["commit_hash"], a["prev_commit_hash"], a["state"]) == (sha(20), sha(19), "new")
    assert (c["metric"], c["found_by"]) == ("error_ratio", "violation: 6418 >= bound 2")
    path = str(store.path)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "ragbench", *args, "--store", path,
                               "--machine", "m1"], capture_output=True, text=True,
                              cwd=REPO)  # fmt: skip

    listed = cli("alerts")
    assert listed.returncode == 1 and "violation: 6418 >= bound 2" in listed.stdout, listed
    detect = cli("detect")
    assert detect.returncode == 1 and "6418 >= bound 2" in detect.stdout, detect
    numerics(store, [1.1] * 3, start=22)  # the kernel fixed: a commit without the violation
    (a,) = store.alerts("m1")
    assert (a["state"], a["fixed_by"]) == ("fixed", sha(22))


def test_a_bound_broken_in_one_ingest_of_several_commits_is_placed_where_it_broke(tmp_path):
    """Commits 20-22 ingested together, the error ratio broken from 20 on; then 23-25, held
    again from 23. Before: the alert was of 22, "broken on the commit before too", arrived in
    21..22, and fixed by 25."""
    store = Store(tmp_path / "perf.duckdb")

    def ingest(ratios, start):
        ids = []
        with store.writing():
            for i, r in enumerate(ratios, start):
                run = Run("asv", sha(i), "m1", started_at=1.8e9 + i * 3600,
                          commit_time=1.8e9 + i * 3600, branch="main",
                          fingerprint={"gpu": "Test GPU", "torch": "2.11.0"})  # fmt: skip
                store.add_run(run, [Measurement(*ERROR, r, samples=[r])])
                ids.append(run.run_id)
        changepoints.update(store, ids, POLICIES)
        alerts.update(store, "m1", POLICIES)

    ingest([1.1] * 20, 0)
    ingest([6418.0] * 3, 20)
    (a,) = store.alerts("m1")
    (c,) = a["cells"]
    assert (a["commit_hash"], a["prev_commit_hash"]) == (sha(20), sha(19))
    assert (c["found_by"], c["before"], c["after"]) == ("violation: 6418 >= bound 2", 1.1, 6418)
    ingest([1.1] * 3, 23)
    (a,) = store.alerts("m1")
    assert (a["state"], a["fixed_by"]) == ("fixed", sha(23))


def test_a_cell_judged_by_another_rule_now_is_never_fixed_by_it(tmp_path):
    """The error ratio's bound (max 2) made ``info``, or loosened to 10,000, after it broke at
    6,418: no later commit marks the alert fixed (before: the next commit, of the same value,
    did), whatever its state, and ``ragbench alerts`` says why and what to do; under the rule
    it was found by again, a commit back within it fixes it."""
    import dataclasses

    def with_rule(**changes):
        rules = tuple(dataclasses.replace(r, **changes) if r.match == "*.KernelError.error_ratio"
                      else r for r in POLICIES.rules)  # fmt: skip
        return dataclasses.replace(POLICIES, rules=rules)

    for i, (changed, person) in enumerate([({"kind": "info"}, False), ({"max": 1e4}, False),
                                           ({"kind": "info"}, True)]):  # fmt: skip
        machine = f"m{i}"
        store = Store(tmp_path / f"{machine}.duckdb")
        numerics(store, [1.1] * 3 + [6418.0] * 2, machine=machine)
        (a,) = store.alerts(machine)
        assert a["cells"][0]["rule"] == "bound max 2", a
        if person:
            store.set_alert_state(machine, sha(3), "acknowledged", by="someone", was="new")
        # 6 is back within the old bound: not fixed under the rule that judges it now
        numerics(store, [6418.0, 1.1], start=5, machine=machine, policies=with_rule(**changed))
        (a,) = store.alerts(machine)
        assert (a["state"], a["fixed_by"]) == ("acknowledged" if person else "new", None), a
        now = with_rule(**changed).for_metric(*ERROR[:2]).rule()
        text = alerts_command.text(a, None, policies=with_rule(**changed))
        assert ("Judged by another rule now, so no later commit marks them fixed: "
                "`numerics.KernelError.error_ratio backend=triton,dtype=float16` (found under "
                f"'bound max 2', now {now!r})") in text, text  # fmt: skip
        assert f"--machine {machine} --commit {sha(3)[:12]}`" in text, text
        alerts.update(store, machine, POLICIES)
        assert store.alerts(machine)[0]["fixed_by"] == sha(6)


def lagom_history(out: Path, commits: range) -> None:
    """pytest-benchmark's real file of lagom (tests/data/public), as 14 nightly runs of main
    whose three benchmarks are 50% slower from the ninth commit on: the commits of ``commits``."""
    import copy
    import hashlib
    import json

    src = REPO / "tests/data/public/pytest-benchmark-lagom/.benchmarks/Linux-CPython-3.10-64bit"
    base = json.loads((src / "0001_baseline.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    for i in commits:
        doc, commit = copy.deepcopy(base), hashlib.sha1(b"c%d" % i).hexdigest()
        doc["commit_info"].update(id=commit, time=f"2021-11-{i + 1:02d}T10:00:00+00:00",
                                  branch="main")  # fmt: skip
        doc["datetime"] = f"2021-11-{i + 1:02d}T12:00:00"
        for b in doc["benchmarks"]:
            for k in ("min", "max", "mean", "median", "q1", "q3"):
                b["stats"][k] *= (1.5 if i >= 8 else 1) * (1 + 0.001 * (i % 3))
        (out / f"{i:04d}_{commit}.json").write_text(json.dumps(doc))


def test_a_step_a_late_commit_moves_leaves_one_alert_where_it_is_now(tmp_path, capsys):
    """The ninth night's run, ingested after the rest: the step was first placed at the tenth
    commit (its alert made), then at the ninth. The tenth's alert is invalid, saying where the
    step is; the ninth's is the one alert (before: both new, and the newest commit a third, its
    lookback across the step judging it again)."""
    from ragbench import cli

    lagom_history(tmp_path / "first", [i for i in range(14) if i != 8])
    lagom_history(tmp_path / "late", [8])
    store = str(tmp_path / "perf.duckdb")
    for part in ("first", "late"):
        assert cli.main(["ingest", "--store", store, str(tmp_path / part)]) == 0
    s = Store(store, read_only=True)
    states = {a["commit_hash"][:8]: (a["state"], a["reason"]) for a in s.alerts("fv-az214-550")}
    ninth, tenth = "9f84ad6b", "68ee74f7"
    moved = "no step here any more: the commits measured since put it at 9f84ad6b89dc"
    assert states == {ninth: ("new", None), tenth: ("invalid", moved)}
    # all at once: the one alert at once
    assert cli.main(["ingest", "--store", str(tmp_path / "once.duckdb"), str(tmp_path / "first"),
                     str(tmp_path / "late")]) == 0  # fmt: skip
    once = Store(tmp_path / "once.duckdb", read_only=True).alerts("fv-az214-550")
    assert [(a["commit_hash"][:8], a["state"]) for a in once] == [(ninth, "new")]
    # the tenth the newest when the first part was ingested: its newest run's alert, then the
    # ninth late, then more nights (before: two new alerts of one step, the tenth's claiming
    # it against a flat ninth)
    lagom_history(tmp_path / "a", [i for i in range(10) if i != 8])
    lagom_history(tmp_path / "b", [8])
    lagom_history(tmp_path / "c", range(10, 16))
    store = str(tmp_path / "newest.duckdb")
    for part in "abc":
        assert cli.main(["ingest", "--store", store, str(tmp_path / part)]) in (0, 1)
    found = Store(store, read_only=True).alerts("fv-az214-550")
    states = {a["commit_hash"][:8]: (a["state"], a["reason"]) for a in found}
    late = "no step here any more: a commit measured later put it at 9f84ad6b89dc"
    assert states == {ninth: ("new", None), tenth: ("invalid", late)}, states


def test_a_finding_stored_before_findings_had_an_environment_is_fixed_where_gone_from_all():
    """Found by an attack on this session's change: findings are now kept per environment,
    and one an older store keeps with '' matched none, so its alert was never fixed and the
    same finding made a second alert. '' now stands for every environment of the cell."""
    from types import SimpleNamespace

    from ragbench.verdicts.status import Status

    cell = {"environment": "", "benchmark": "b", "metric": "time_x", "param_key": "",
            "found_by": "failed: raised in 1 head run(s)"}  # fmt: skip
    alert = {"commit_hash": "old"}

    def now(py313: str) -> alerts.Newest:
        verdicts = {(env, "b", "time_x", ""): SimpleNamespace(head=1.0, status=status)
                    for env, status in (("conda-py3.12", Status.UNCHANGED),
                                        ("conda-py3.13", py313))}  # fmt: skip
        return alerts.Newest("new", "old", None, verdicts)

    assert alerts.finding_gone(alert, cell, now(Status.FAILED)) is None
    assert alerts.finding_gone(alert, cell, now(Status.UNCHANGED)) == "new"
    stored = [{"state": "new", "cells": [cell]}]
    assert alerts.findings(None, "m", now(Status.FAILED), stored) == []  # held: no second alert
