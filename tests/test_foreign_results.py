"""Another project's results (tests/data/public) judged and followed up as that project's:
runs saved with only their summaries (pytest-benchmark's saved runs keep no rounds' data) are
judged by Welch's t on those summaries; a run of a checkout with uncommitted changes stays out
of main's history unless asked for; an alert of another asv project links to that project's
commits and names its benchmarks and config in its commands."""

from __future__ import annotations

import json
from pathlib import Path

from ragbench import cli
from ragbench.ingest import ingest
from ragbench.store import Store

PUBLIC = Path(__file__).resolve().parent / "data" / "public"
STORAGE = PUBLIC / "pytest-benchmark"  # pytest-benchmark's own saved runs: all dirty
LAGOM = PUBLIC / "pytest-benchmark-lagom"  # lagom's CI: clean
FIRST, LAST = sorted(STORAGE.glob("*.json"))[0], sorted(STORAGE.glob("*.json"))[-1]
OTHER = "b87b9aae14ff14a7887a6bbaa9731b9a8760555d"  # the commit the first files' names carry


def ragbench(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_dirty_run_stays_out_of_mains_history_unless_asked(tmp_path, capsys):
    """pytest-benchmark's own saved runs were measured in a checkout with uncommitted changes
    (``commit_info.dirty``): ingest skips each and says so (exit 0: nothing was wrong with the
    files); ``--dirty`` stores them. lagom's clean runs are stored either way."""
    path = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, STORAGE, LAGOM)
    assert code == 0, out
    assert "3 file(s) stored" in out and "8 skipped as dirty" in out, out
    assert f"skipped {FIRST}: measured in a checkout with uncommitted changes" in out
    assert "minibox" not in Store(path, read_only=True).machines()
    code, out = ragbench(capsys, "ingest", "--store", path, "--dirty", STORAGE)
    assert code == 0 and "8 file(s) stored" in out, out
    assert "minibox" in Store(path, read_only=True).machines()


def pair(tmp_path: Path, slower: float = 1.0) -> Path:
    """Two of pytest-benchmark's saved runs of one cell (the first and the last of its 30,
    9,987 and 9,710 rounds), the second as if of another commit, its timings ``slower``
    times the real ones; both ingested (``dirty``: they are)."""
    src = tmp_path / "runs"
    src.mkdir()
    (src / "base.json").write_text(FIRST.read_text())
    data = json.loads(LAST.read_text())
    data["commit_info"]["id"] = OTHER
    for b in data["benchmarks"]:
        for k in ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3"):
            b["stats"][k] *= slower
    (src / "head.json").write_text(json.dumps(data))
    with Store(tmp_path / "perf.duckdb") as s:
        report = ingest(s, [src], dirty=True)
    assert len(report.stored) == 2
    return tmp_path / "perf.duckdb"


def gate(capsys, store: Path) -> tuple[int, str]:
    return ragbench(capsys, "gate", "--stored", "--store", store, "--machine", "minibox",
                    "--base", "5b78858e", "--head", OTHER[:8], "--no-drift")  # fmt: skip


def test_summary_only_runs_are_judged_by_welchs_t_on_their_summaries(tmp_path, capsys):
    """No raw samples, one run a side: before, "too few samples (1 base, 1 head)" and
    inconclusive, whatever the runs held. Now Welch's t on mean, stddev and rounds: the real
    pair passes with the power to see 10% (and the interval of the means' ratio), and the
    verdict names the test."""
    code, out = gate(capsys, pair(tmp_path))
    assert code == 0 and "ragbench gate: PASS" in out, out
    assert "too few samples" not in out
    assert "Welch's t on the summaries" in out and "9987 and 9710 rounds" in out, out
    assert "judged by Welch's t on their summaries" in out, out


def test_a_summary_only_slowdown_fails_by_welchs_t(tmp_path, capsys):
    """The same pair with head's timings 1.5 times the real ones: a regression, by the
    summaries' test (it was inconclusive: never a fail)."""
    code, out = gate(capsys, pair(tmp_path, slower=1.5))
    assert code == 1 and "ragbench gate: FAIL" in out, out
    assert "Welch's t on the summaries" in out and "regression" in out.lower(), out
