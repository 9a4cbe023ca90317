"""main's alerts (ragbench/alerts.py): steps grouped by commit, stored with a state that
people set and later runs keep, marked fixed when a later run shows them undone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench import alerts, changepoints
from ragbench.policies import load_policies
from ragbench.store import Measurement, Run, Store

REPO = Path(__file__).resolve().parent.parent
POLICIES = load_policies()
STEP = 20  # the commit the slowdown arrives with


def sha(i: int) -> str:
    return f"{i:040x}"


def history(store: Store, commits: range, slow: set[int], machine: str = "m1") -> list[str]:
    """A run a commit on main: triton and fa2 gpu_us 10% slower at the commits in ``slow``,
    torch_varlen unchanged; -> the run ids."""
    rng = np.random.default_rng(commits.start)
    ids = []
    for i in commits:
        run = Run("asv", sha(i), machine, started_at=1.8e9 + i * 3600, commit_time=1.8e9 + i * 3600,
                  branch="main", fingerprint={"gpu": "Test GPU", "torch": "2.11.0"})  # fmt: skip
        factor = 1.1 if i in slow else 1.0
        rows = [
            Measurement("kernel.KernelLatency", "gpu_us", {"backend": b}, "us",
                        float(np.median(v := rng.normal(center * f, 0.02, 20))), samples=list(v))
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
    assert alerts.update(store, "m1", POLICIES) == (1, 0)
    (a,) = store.alerts("m1")
    assert (a["commit_hash"], a["prev_commit_hash"], a["state"]) == (sha(STEP), sha(STEP - 1),
                                                                     "new")  # fmt: skip
    cells = {c["param_key"]: c for c in a["cells"]}
    assert set(cells) == {"backend=triton", "backend=fa2"}  # torch_varlen did not move
    t = cells["backend=triton"]
    assert t["after"] / t["before"] == pytest.approx(1.1, abs=0.01)
    assert t["ratio_lo"] < 1.1 < t["ratio_hi"] and t["ratio_lo"] > 1.05
    assert alerts.update(store, "m1", POLICIES) == (0, 0)  # nothing new: nothing changes

    alerts.change_state(store, "m1", sha(STEP)[:12], "acknowledged", by="ana")
    history(store, range(40, 42), slow=set())  # two commits back at 10 and 12: not yet fixed
    assert alerts.update(store, "m1", POLICIES)[1] == 0
    assert store.alerts("m1")[0]["state"] == "acknowledged"
    history(store, range(42, 44), slow=set())
    assert alerts.update(store, "m1", POLICIES)[1] == 1
    (a,) = store.alerts("m1", commit=sha(STEP))
    assert (a["state"], a["fixed_by"]) == ("fixed", sha(40))  # back from 40 on


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
    command = alerts.repro_command(a)
    assert command.startswith(f"ragbench gate --base {sha(STEP - 1)[:12]} --head "
                              f"{sha(STEP)[:12]} --machine m1 --bench")  # fmt: skip
    assert r"kernel\.KernelLatency\.track_gpu_us" in command


def test_an_ingest_makes_the_alerts_and_the_cli_lists_and_changes_them(tmp_path):
    """The alerts come with each ingest of main (no command to remember); ``ragbench alerts``
    lists them with their cells and the repro command, and changes a state (exit 2, one line,
    for one that does not exist)."""
    from ragbench import synth
    from ragbench.ingest import ingest

    out = synth.write_history(tmp_path / "history", 40)
    path = tmp_path / "perf.duckdb"
    with Store(path) as s:
        report = ingest(s, [out], branch="main")
    assert report.alerts == 0  # synth's history gets faster (-10%) and changes torch: no alert

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
    assert alerts.update(store, "m1", POLICIES) == (1, 0)
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
