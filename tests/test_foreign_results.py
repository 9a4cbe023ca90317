"""Another project's results (tests/data/public) judged and followed up as that project's:
runs saved with only their summaries (pytest-benchmark's saved runs keep no rounds' data) are
judged by Welch's t on those summaries; a run of a checkout with uncommitted changes stays out
of main's history unless asked for; an alert of another asv project links to that project's
commits and names its benchmarks and config in its commands."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

from conftest import commit, git, ingest, new_repo

from ragbench import cli
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
    # base and head are the means the test compared (before: the medians, 2.202e-07 both,
    # beside "0.4% faster", the means' change)
    assert re.search(r"\| 2\.622e-07 \| 2\.612e-07 \| 0\.4% faster \|", out), out


def test_a_summary_only_slowdown_fails_by_welchs_t(tmp_path, capsys):
    """The same pair with head's timings 1.5 times the real ones: a regression, by the
    summaries' test (it was inconclusive: never a fail)."""
    code, out = gate(capsys, pair(tmp_path, slower=1.5))
    assert code == 1 and "ragbench gate: FAIL" in out, out
    assert "Welch's t on the summaries" in out and "regression" in out.lower(), out


ASTROPY = PUBLIC / "asv-astropy"  # asv's astropy results, its config beside them
BASE, HEAD = "e29770c2", "42100650"  # two commits of py2.7-Cython-numpy1.8 on "cheetah"


def astropy_store(tmp_path: Path, capsys, *more, root: Path = ASTROPY) -> Path:
    """astropy's results ingested as main's history (its config above them; ``root``: a copy
    of them, ``typed_astropy``)."""
    path = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main", *more,
                         root / "results")  # fmt: skip
    assert code == 0, out
    return path


def an_alert(store: Path) -> dict:
    """An alert of astropy's ``cheetah`` as ``Store.alerts`` gives one (a row of ``alerts``
    with its ``alert_cells``): its range the two commits, its cell a real benchmark of the
    results with its values there."""
    s = Store(store)
    runs = {r["commit_hash"][:8]: r for r in s.runs(machine="cheetah")}
    value = {
        c: next(m["median"] for m in s.measurements([runs[c]["run_id"]])
                if (m["benchmark"], m["metric"]) == ("time_units", "time_unit_parse"))
        for c in (BASE, HEAD)
    }  # fmt: skip
    runs = {c: r["commit_hash"] for c, r in runs.items()}
    cell = {
        "environment": "py2.7-Cython-numpy1.8",
        "benchmark": "time_units",
        "metric": "time_unit_parse",
        "param_key": "",
        "unit": "seconds",
        "kind": "latency",
        "before": value[BASE],
        "after": value[HEAD],
        "ratio_lo": None,
        "ratio_hi": None,
    }
    return {"machine": "cheetah", "commit_hash": runs[HEAD], "prev_commit_hash": runs[BASE],
            "commit_time": None, "state": "new", "reason": None, "fixed_by": None,
            "cells": [{**cell, "found_by": "change point"}]}  # fmt: skip


def test_the_store_keeps_the_project_its_asv_results_are_of(tmp_path, capsys):
    """Ingest finds astropy's asv.conf.json above the results and keeps, for its machine,
    its repo and show_commit_url (before: only its name, for the dashboard's title); one
    given with --config is kept where none is above the files."""
    from ragbench import project

    kept = project.load(Store(astropy_store(tmp_path, capsys)), "cheetah")
    assert kept is not None, "nothing kept"
    assert kept.repo == "https://github.com/astropy/astropy.git"
    assert kept.show_commit_url == "https://github.com/astropy/astropy/commit/"
    assert kept.config == str((ASTROPY / "asv.conf.json").resolve())
    alone = tmp_path / "alone"
    (alone / "cheetah").mkdir(parents=True)
    for f in (ASTROPY / "results" / "cheetah").glob("*.json"):
        (alone / "cheetah" / f.name).write_text(f.read_text())
    path = tmp_path / "b.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, alone)
    assert code == 0 and project.load(Store(path), "cheetah") is None, out
    code, out = ragbench(capsys, "ingest", "--store", path, "--config",
                         ASTROPY / "asv.conf.json", alone)  # fmt: skip
    assert code == 0 and project.load(Store(path), "cheetah").name == "astropy", out


def typed_astropy(tmp_path: Path, kind: str = "virtualenv") -> Path:
    """astropy's results and config copied, the config given the ``environment_type`` (``kind``)
    that asv 0.5 and later require of it (asv's fixture names none: asv's tests pass -E);
    nothing else changed."""
    import shutil

    root = tmp_path / "astropy"
    shutil.copytree(ASTROPY, root)
    conf = root / "asv.conf.json"
    conf.write_text(conf.read_text().replace("{", f'{{\n    "environment_type": "{kind}",', 1))
    return root


def astropy_as_then(tmp_path: Path) -> Path:
    """``typed_astropy`` with its matrix as when its results were measured (without jinja2,
    which its config adds since): asv builds ``virtualenv-py2.7-Cython-numpy1.8`` of it."""
    root = typed_astropy(tmp_path)
    conf = root / "asv.conf.json"
    conf.write_text(conf.read_text().replace('"jinja2": [],', "", 1))
    return root


def astropy_both(tmp_path: Path) -> Path:
    """``typed_astropy`` with jinja2 in its matrix installed or not (asv's ``null``): asv
    builds ``virtualenv-py2.7-Cython-jinja2-numpy1.8`` and ``virtualenv-py2.7-Cython-numpy1.8``
    of it, the second the environment its results were measured in."""
    root = typed_astropy(tmp_path)
    conf = root / "asv.conf.json"
    conf.write_text(conf.read_text().replace('"jinja2": [],', '"jinja2": ["", null],', 1))
    return root


def asv_builds(config: Path, asv_spec: str) -> list[str]:
    """The environments asv 0.6 itself builds of ``config`` with ``-E asv_spec``
    (``get_environments``, as ``asv run`` calls it)."""
    from asv.config import Config
    from asv.environment import get_environments

    return [e.name for e in get_environments(Config.load(config), [asv_spec], verbose=False)]


def test_an_alert_of_another_project_links_and_measures_that_project(tmp_path, capsys):
    """An alert of astropy's results (its config given an environment_type: ``typed_astropy``):
    its link is astropy's compare page (before: this checkout's origin), the re-measure gate
    names astropy's config and selects the benchmark by its asv name (asv's own parser takes
    it), and the bisection is asv's own ``asv find`` in that config (this checkout has none
    of its commits), each where asv can build the cell's environment: astropy's config builds
    it no more (its matrix adds jinja2), so the alert says why instead of either."""
    import shlex

    from asv.commands import make_argparser

    from ragbench import follow_up, project
    from ragbench.commands import alerts as alerts_command
    from ragbench.commands.gate import add_parser

    root = typed_astropy(tmp_path)
    store = astropy_store(tmp_path, capsys, root=root)
    alert, kept = an_alert(store), project.load(Store(store), "cheetah")
    text = alerts_command.text(alert, "https://github.com/ragged/ragged", [], kept)
    assert (f"https://github.com/astropy/astropy/compare/{alert['prev_commit_hash']}..."
            f"{alert['commit_hash']}") in text, text  # fmt: skip
    assert "ragged/ragged" not in text
    conf = str((root / "asv.conf.json").resolve())
    assert follow_up.repro_command(alert, kept) is None and "Re-measure" not in text, text
    assert (
        f"Not re-measured in {LEGACY}: asv (-E virtualenv:2.7) builds "
        f"virtualenv-py2.7-Cython-jinja2-numpy1.8 from {conf}, and no environment "
        f"virtualenv-{LEGACY}: the gate would measure another, or none"
    ) in text, text
    plain = {**alert, "cells": [{**alert["cells"][0], "environment": ""}]}
    repro = follow_up.repro_command(plain, kept)
    words = shlex.split(repro)
    assert words[:4] == ["ragbench", "gate", "--config", conf], repro
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(words[1:])
    assert (args.config, args.environment, args.machine) == (Path(conf), None, "cheetah")

    (bench,) = args.bench
    names = json.loads((ASTROPY / "results" / "benchmarks.json").read_text())
    assert [n for n in names if re.search(bench, n)] == ["time_units.time_unit_parse"]
    # astropy's config's matrix now adds jinja2: asv builds the alert's environment no more,
    # and its bisection would search another (test_matrix_bisection_selects_the_alerts_environment)
    assert follow_up.bisect_command(alert, kept) is None
    assert (f"Not bisected in py2.7-Cython-numpy1.8: asv (-E virtualenv:2.7) builds "
            f"virtualenv-py2.7-Cython-jinja2-numpy1.8 from {conf}, and no environment "
            "virtualenv-py2.7-Cython-numpy1.8") in text, text  # fmt: skip
    # asv find refuses a machine this host's asv does not know: asv machine first
    machine, find = map(shlex.split, follow_up.bisect_command(plain, kept).split(" && "))
    assert machine == ["asv", "machine", "--yes", "--config", conf, "--machine", "cheetah"]
    assert make_argparser()[0].parse_args(machine[1:]).yes
    assert find[:4] == ["asv", "find", "--config", conf], find
    asv_args = make_argparser()[0].parse_args(find[1:])
    assert asv_args.range == f"{alert['prev_commit_hash'][:12]}..{alert['commit_hash'][:12]}"
    assert [n for n in names if re.search(asv_args.bench, n)] == ["time_units.time_unit_parse"]


def test_a_gate_of_another_projects_commits_names_its_config(tmp_path, capsys):
    """``ragbench gate`` (measuring) of astropy's commits, which this checkout lacks: one
    line, exit 2, naming the --config to pass (before: git's "Needed a single revision")."""
    store = astropy_store(tmp_path, capsys)
    code, out = ragbench(capsys, "gate", "--store", store, "--machine", "cheetah", "--base",
                         BASE, "--head", HEAD)  # fmt: skip
    assert code == 2, out
    conf = str((ASTROPY / "asv.conf.json").resolve())
    assert f"pass --config {conf}" in out and "astropy's results" in out, out
    assert len(out.strip().splitlines()) == 1, out


# What every stand-in asv below does first: each call logged with its config (one JSON line in
# $FAKE_ASV_LOG); ``moved`` gives a result file's start times moved by the calls so far (a new
# run each time), ``described`` writes the machine's and the suite's files beside the results.
FAKE_ASV_START = """
import json, os, pathlib, sys

import json5

args = sys.argv[1:]
log = pathlib.Path(os.environ["FAKE_ASV_LOG"])
calls = log.read_text().count("\\n") if log.exists() else 0
conf = json5.loads(pathlib.Path(args[args.index("--config") + 1]).read_text())
with log.open("a") as fh:
    fh.write(json.dumps({"argv": args, "cwd": os.getcwd(), "conf": conf}) + "\\n")


def moved(data):
    at = data["result_columns"].index("started_at")
    for row in data["results"].values():
        if len(row) > at and row[at] is not None:
            row[at] += 1000 * calls
    return data


def described(out, src):
    (out / "machine.json").write_text((src / "machine.json").read_text())
    (out.parent / "benchmarks.json").write_text((src.parent / "benchmarks.json").read_text())


# run's commit (SHA^!) and --environment (None: not given), where the project's real files
# are, and the machine's results directory (made)
def run_args():
    sha = args[-1].removesuffix("^!")
    spec = args[args.index("--environment") + 1] if "--environment" in args else None
    out = pathlib.Path(conf["results_dir"]) / args[args.index("--machine") + 1]
    out.mkdir(parents=True, exist_ok=True)
    return sha, spec, pathlib.Path(os.environ["FAKE_ASV_RESULTS"]), out
"""

FAKE_ASV = (
    '''
"""asv as far as ``ragbench gate`` and ``bisect --config`` call it: ``machine`` does nothing,
``run`` writes the project's real result file of the commit it is given (``SHA^!``), its start
times moved by the calls so far (a new run each time), into the config's results directory;
``find`` names the last commit of its range. Each call logged with its config."""
'''
    + FAKE_ASV_START
    + """
if args[0] == "find":
    print(f"Greatest regression found: {args[-2].split('..')[1][:8]}")
if args[0] == "run":
    sha, _, src, out = run_args()
    data = json.loads(next(src.glob(f"{sha[:8]}-py2.7-Cython-numpy1.8.json")).read_text())
    (out / f"{sha[:8]}-py2.7-Cython-numpy1.8.json").write_text(json.dumps(moved(data)))
    described(out, src)
"""
)


def fake_asv(tmp_path: Path, monkeypatch, script: str = FAKE_ASV) -> Path:
    """``script`` (``FAKE_ASV``) as the ``asv`` the commands run (first on PYTHONPATH); -> the
    log its calls are written to, one JSON line each."""
    fake = tmp_path / "fake"
    (fake / "asv").mkdir(parents=True)
    (fake / "asv" / "__init__.py").write_text("")
    (fake / "asv" / "__main__.py").write_text(script)
    log = tmp_path / "asv.log"
    monkeypatch.setenv("PYTHONPATH", str(fake))
    monkeypatch.setenv("FAKE_ASV_LOG", str(log))
    return log


def test_a_gate_with_another_projects_config_runs_its_asv_there(tmp_path, capsys, monkeypatch):
    """``ragbench gate --config`` measures base and head of astropy with asv and astropy's
    config (asv here replaced by one that writes astropy's real result file of the commit it
    is asked for): asv runs in the config's directory, with the config's paths made absolute
    and its results in the gate's own directory, one commit a call (``SHA^!``), the cells
    selected by --bench; the results are judged (before: no --config, exit 2)."""
    log = fake_asv(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_ASV_RESULTS", str(ASTROPY / "results" / "cheetah"))
    bench = r"^time_units\.time_unit_parse$"
    code, out = ragbench(capsys, "gate", "--store", tmp_path / "g.duckdb", "--machine",
                         "cheetah", "--config", ASTROPY / "asv.conf.json", "--base", BASE,
                         "--head", HEAD, "--rounds", "1", "--bench", bench)  # fmt: skip
    verdict = re.search(r"ragbench gate: (PASS|FAIL|INCONCLUSIVE)", out)
    assert verdict and code == (0 if verdict.group(1) == "PASS" else 1), out
    assert "time_units.time_unit_parse" in out, out
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    runs = [c for c in calls if c["argv"][0] == "run"]
    assert [r["argv"][-1] for r in runs[:2]] == [f"{BASE}^!", f"{HEAD}^!"], runs
    assert [r["argv"][r["argv"].index("--bench") + 1] for r in runs[:2]] == [bench, bench]
    root = str(ASTROPY.resolve())
    assert all(c["cwd"] == root for c in calls), calls
    for r in runs:  # base and head, then the cells the gate measures once more
        argv = r["argv"]
        assert "--bench" in argv and "--record-samples" in argv, argv
        conf = r["conf"]
        assert conf["benchmark_dir"] == str(ASTROPY.resolve() / "benchmark")
        assert conf["repo"] == "https://github.com/astropy/astropy.git"
        assert not conf["results_dir"].startswith(root)


def test_an_inconclusive_gate_of_another_project_is_settled_by_its_asv(tmp_path, capsys,
                                                                      monkeypatch):  # fmt: skip
    """A gate of astropy's commits leaves its cells without evidence (its results hold no raw
    samples): the settle command its report names measures them again by astropy's asv with
    its config (asv replaced as in the gate's test) and gives a verdict; without --config,
    --settle refuses in one line naming it (before: the report named ``--settle ID`` alone,
    which exited 2 with git's "Needed a single revision")."""
    store = astropy_store(tmp_path, capsys)
    log = fake_asv(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_ASV_RESULTS", str(ASTROPY / "results" / "cheetah"))
    conf = str((ASTROPY / "asv.conf.json").resolve())
    code, out = ragbench(capsys, "gate", "--store", store, "--machine", "cheetah", "--config",
                         conf, "--base", BASE, "--head", HEAD, "--rounds", "1", "--bench",
                         r"^time_units\.time_unit_parse$")  # fmt: skip
    assert code == 1 and "ragbench gate: INCONCLUSIVE" in out, out
    named = re.search(r"### To settle\n\n`(ragbench gate --settle [^`]+)`", out)
    assert named, out
    words = shlex.split(named.group(1))
    assert words[words.index("--config") + 1] == conf, words
    at = words.index("--config")
    code, out = ragbench(capsys, *words[1:at], *words[at + 2 :])
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert f"pass --config {conf}" in out, out
    before = len(log.read_text().splitlines())
    code, out = ragbench(capsys, *words[1:])
    verdict = re.search(r"ragbench gate: (PASS|FAIL|INCONCLUSIVE)", out)
    assert verdict and code == (0 if verdict.group(1) == "PASS" else 1), out
    runs = [c for c in map(json.loads, log.read_text().splitlines()[before:])
            if c["argv"][0] == "run"]  # fmt: skip
    assert runs, out
    shas = {r["commit_hash"][:8]: r["commit_hash"] for r in Store(store).runs(machine="cheetah")}
    assert {r["argv"][-1] for r in runs} == {f"{shas[BASE]}^!", f"{shas[HEAD]}^!"}, runs
    assert all(r["cwd"] == str(ASTROPY.resolve()) for r in runs), runs
    assert all(r["conf"]["repo"] == "https://github.com/astropy/astropy.git" for r in runs)


DJANGO_ENVS = PUBLIC.parent / "asv-django-envs"  # django-asv's newest 4 commits, 2 Pythons each

FAKE_ASV_ENVS = (
    '''
"""asv as ``FAKE_ASV``, for a project measured in several environments: ``run`` writes the
project's real result files of the commit, one an environment, each of the config's
(``FAKE_ASV_RESULTS`` holds them) or the one ``--environment`` (``conda:3.12``) names."""
'''
    + FAKE_ASV_START
    + """
if args[0] == "run":
    sha, spec, src, out = run_args()
    for f in src.glob(f"{sha[:8]}-*.json"):
        if spec is not None and f.stem.split("-", 1)[1] != spec.replace(":", "-py"):
            continue
        (out / f.name).write_text(json.dumps(moved(json.loads(f.read_text()))))
    described(out, src)
"""
)


def test_an_alert_in_two_environments_re_measures_each_in_its_own(tmp_path, capsys,
                                                                  monkeypatch):  # fmt: skip
    """django-asv measures every commit under conda-py3.12 and conda-py3.13, and an alert of
    its history holds a step in both (its newest, at c9eb16a8). The gate judges one
    environment (asv measures every one of the config's, and the gate refuses to pool them),
    so the re-measure is one gate an environment, each with its cells; each, run with asv
    replaced by one that writes django-asv's real files of the commit it is asked for in the
    environments it is asked for, gives a verdict (before: one gate without --environment,
    refused with exit 2 after asv measured both sides in both)."""
    from ragbench import follow_up, project

    path = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main", DJANGO_ENVS)
    assert code == 0, out
    kept = project.load(Store(path), "ubuntu-latest")
    shas = {
        r["commit_hash"][:8]: r["commit_hash"] for r in Store(path).runs(machine="ubuntu-latest")
    }
    cell = {"benchmark": "form_benchmarks.form_clean.benchmark.FormClean",
            "metric": "time_form_clean", "param_key": "", "found_by": "change point"}  # fmt: skip
    cells = [{**cell, "environment": e} for e in ("conda-py3.12", "conda-py3.13")]
    alert = {"machine": "ubuntu-latest", "commit_hash": shas["03988c5a"],
             "prev_commit_hash": shas["4c4f8fd7"], "cells": cells}  # fmt: skip
    gates = [shlex.split(g) for g in follow_up.repro_command(alert, kept).split(" ; ")]
    assert [g[g.index("--environment") + 1] for g in gates if "--environment" in g] == [
        "conda-py3.12", "conda-py3.13"], gates  # fmt: skip
    log = fake_asv(tmp_path, monkeypatch, FAKE_ASV_ENVS)
    monkeypatch.setenv("FAKE_ASV_RESULTS", str(DJANGO_ENVS / "results" / "ubuntu-latest"))
    for i, words in enumerate(gates):
        code, out = ragbench(capsys, *words[1:], "--store", tmp_path / f"g{i}.duckdb",
                             "--rounds", "1")  # fmt: skip
        verdict = re.search(r"ragbench gate: (PASS|FAIL|INCONCLUSIVE)", out)
        assert verdict and code == (0 if verdict.group(1) == "PASS" else 1), out
        assert "time_form_clean" in out, out
    runs = [c for c in map(json.loads, log.read_text().splitlines()) if c["argv"][0] == "run"]
    assert runs and all("--environment" in r["argv"] for r in runs), runs


def test_a_bisection_with_another_projects_config_is_asvs_own(tmp_path, capsys, monkeypatch):
    """``ragbench bisect --config``: asv's own search (``asv find``) in astropy's directory,
    with its config, over GOOD..BAD, the benchmark by its asv name (asv here replaced as in
    the gate's test); the commit it names is the answer (before: no --config, exit 2)."""
    log = fake_asv(tmp_path, monkeypatch)
    code, out = ragbench(capsys, "bisect", "--config", ASTROPY / "asv.conf.json", "--cell",
                         "time_units.time_unit_parse ", "--good", BASE, "--bad", HEAD,
                         "--machine", "cheetah")  # fmt: skip
    assert code == 0, out
    assert f"First commit of the step up (asv find, time_units.time_unit_parse ): {HEAD}" in out
    (call,) = [c for c in map(json.loads, log.read_text().splitlines()) if c["argv"][0] == "find"]
    conf = str((ASTROPY / "asv.conf.json").resolve())
    assert call["argv"] == ["find", "--config", conf, "--machine", "cheetah",
                            f"{BASE}..{HEAD}", r"^time_units\.time_unit_parse$"]  # fmt: skip
    assert call["cwd"] == str(ASTROPY.resolve())
    # a drop (a throughput): asv find --invert, which searches for a decrease (before: no way
    # to ask, and asv named the greatest increase as "the first commit of the step")
    code, out = ragbench(capsys, "bisect", "--config", ASTROPY / "asv.conf.json", "--cell",
                         "time_units.time_unit_parse ", "--good", BASE, "--bad", HEAD,
                         "--invert")  # fmt: skip
    assert code == 0 and "First commit of the step down (asv find" in out, out
    *_, call = [c for c in map(json.loads, log.read_text().splitlines()) if c["argv"][0] == "find"]
    assert call["argv"][-3] == "--invert", call
    code, out = ragbench(capsys, "bisect", "--cell", "kernel.KernelLatency.gpu_us backend=triton",
                         "--good", BASE, "--bad", HEAD, "--invert")  # fmt: skip
    assert code == 2 and "--invert is asv find's, with --config" in out, out


def test_a_cell_the_projects_suite_no_longer_has_is_not_re_measured(tmp_path, capsys):
    """django-asv dropped benchmarks its old results hold (``query.QueryAll``...): a command
    selecting one would measure nothing. A cell whose benchmark the project's
    ``benchmarks.json`` does not list is named as gone, left out of the re-measure and the
    bisection, and with no cell left there is no command (before: a --bench for it)."""
    from ragbench import follow_up, project
    from ragbench.commands import alerts as alerts_command

    store = astropy_store(tmp_path, capsys, root=astropy_as_then(tmp_path))
    alert, kept = an_alert(store), project.load(Store(store), "cheetah")
    dropped = {**alert["cells"][0], "benchmark": "time_units", "metric": "time_dropped"}
    both = {**alert, "cells": [dropped, *alert["cells"]]}
    assert follow_up.gone_cells(both, kept) == [("time_units", "time_dropped", "")]
    assert "time_dropped" not in follow_up.repro_command(both, kept)
    assert "time_unit_parse" in follow_up.bisect_command(both, kept)
    alone = {**alert, "cells": [dropped]}
    assert follow_up.repro_command(alone, kept) is None
    assert follow_up.bisect_command(alone, kept) is None
    text = alerts_command.text(alone, None, [], kept)
    assert "No longer in astropy's suite" in text and "Re-measure" not in text, text


def test_a_cell_no_longer_in_the_suite_is_named_without_a_trailing_space(tmp_path, capsys):
    """A cell without parameters that the project's suite dropped is named as every other
    cell is (before: ```time_units.time_dropped ```, the empty parameters' space inside the
    backticks, as ``ragbench alerts`` printed django-asv's ``query.QueryAll.time_query_all``
    and seven more of ubuntu-22.04)."""
    from ragbench import project
    from ragbench.commands import alerts as alerts_command

    store = astropy_store(tmp_path, capsys)
    alert, kept = an_alert(store), project.load(Store(store), "cheetah")
    dropped = {**alert["cells"][0], "benchmark": "time_units", "metric": "time_dropped"}
    text = alerts_command.text({**alert, "cells": [dropped, *alert["cells"]]}, None, [], kept)
    assert "so not measured again: `time_units.time_dropped`" in text, text
    assert not re.search(r"`[^`\n]* `", text), text


def test_a_pytest_benchmark_alert_re_measures_with_pytest(tmp_path):
    """A pytest-benchmark cell's re-measurement names the test as pytest does (the saved
    run's ``fullname``), run by pytest-benchmark at both commits, ingested into a store of
    their own (before: the alert's, whose main runs of the commits the gate pooled in) and gated
    as stored (before: ``ragbench gate --bench '...::test_xfast_parametrized\\.track_time...'``,
    a benchmark no asv suite has); no asv bisection is offered for it."""
    import shlex

    from ragbench import follow_up

    with Store(tmp_path / "perf.duckdb") as s:
        ingest(s, [LAST], dirty=True)
        (m,) = s.measurements([r["run_id"] for r in s.runs(any_branch=True)])
    fullname = json.loads(LAST.read_text())["benchmarks"][0]["fullname"]
    cell = {"benchmark": m["benchmark"], "metric": m["metric"], "param_key": m["param_key"],
            "environment": ""}  # fmt: skip
    alert = {"machine": "minibox", "commit_hash": OTHER, "prev_commit_hash": "5b78858e" * 5,
             "cells": [cell]}  # fmt: skip
    command = follow_up.repro_command(alert)
    assert "track_" not in command and "--bench" not in command.split(), command
    steps = [shlex.split(step) for step in command.split(" && ")]
    assert steps[0] == ["git", "checkout", "5b78858e5b78"]
    assert steps[1] == ["pytest", "--benchmark-only", "--benchmark-json=base.json", fullname]
    assert steps[3][-1] == fullname and steps[2] == ["git", "checkout", OTHER[:12]]
    assert steps[5][:3] == ["ragbench", "gate", "--stored"], steps
    # a store of their own: main's runs of the two commits would be pooled into the gate
    store = ["--store", f"ragbench-remeasure-{OTHER[:12]}.duckdb"]
    assert steps[4][2:4] == store and steps[5][3:5] == store, steps
    assert follow_up.bisect_command(alert) is None


def test_this_suites_own_results_in_a_clone_follow_this_checkout(tmp_path):
    """Results below this suite's own config in another directory (a clone: the demo's, the
    docs test's) are no other project's: nothing is kept for their machine, and the alerts'
    follow-ups stay this checkout's."""
    import shutil

    from ragbench import project, synth

    root = tmp_path / "clone"
    history = synth.write_history(tmp_path / "h", 2)
    shutil.copytree(history, root / "results" / "asv")
    shutil.copy(Path(cli.__file__).resolve().parent.parent / "asv.conf.json", root)
    with Store(tmp_path / "perf.duckdb") as s:
        assert len(ingest(s, [root / "results" / "asv"]).stored) == 2
        assert project.load(s, synth.MACHINE) is None


LEGACY = "py2.7-Cython-numpy1.8"  # astropy's environment as asv before 0.5 named it

FAKE_ASV_NAMED = (
    '''
"""asv as ``FAKE_ASV``, naming its environments as asv 0.5 and later do: ``run`` writes the
project's real result file of the commit once for each environment ``FAKE_ASV_NAMES`` lists
(the environments of the config's matrix, named by asv's own rule) that ``--environment``
(``TYPE:X.Y``) selects (those of that type and Python), the file's env_name that name."""
'''
    + FAKE_ASV_START
    + """
if args[0] == "run":
    sha, spec, src, out = run_args()
    data = moved(json.loads(sorted(src.glob(f"{sha[:8]}-*.json"))[0].read_text()))
    prefix = spec.replace(":", "-py") if spec else ""
    for name in json.loads(os.environ["FAKE_ASV_NAMES"]):
        if name == prefix or name.startswith(prefix + "-") or not spec:
            (out / f"{sha[:8]}-{name}.json").write_text(json.dumps({**data, "env_name": name}))
    described(out, src)
"""
)


def asv_name(kind: str, python: str, requirements: dict) -> str:
    """An environment's name by asv's own rule (``asv.environment.get_env_name``: the type,
    the Python, the requirements in order; a requirement without a version by its name)."""
    from asv.environment import get_env_name

    return get_env_name(kind, python, {k: v or "" for k, v in requirements.items()}, {})


def named_asv(tmp_path: Path, monkeypatch, results: Path, names: list[str]) -> Path:
    """``FAKE_ASV_NAMED`` as the ``asv`` the commands run, writing ``results``' files under
    ``names``; -> its log."""
    log = fake_asv(tmp_path, monkeypatch, FAKE_ASV_NAMED)
    monkeypatch.setenv("FAKE_ASV_RESULTS", str(results))
    monkeypatch.setenv("FAKE_ASV_NAMES", json.dumps(names))
    return log


def asv_runs(log: Path) -> list[list[str]]:
    """The arguments of each ``asv run`` the stand-in was called with."""
    return [c["argv"] for c in map(json.loads, log.read_text().splitlines())
            if c["argv"][0] == "run"]  # fmt: skip


def test_a_legacy_environments_alert_is_re_measured_in_the_configs_type(tmp_path, capsys,
                                                                        monkeypatch):  # fmt: skip
    """astropy's environment ``py2.7-Cython-numpy1.8`` was named by asv before 0.5, without
    its type; asv since then names it with the type it builds it with. The alert's re-measure
    gate (its config typed, its matrix building that one and one with jinja2: ``astropy_both``),
    run (asv replaced by one that names environments as asv 0.6 does), measures with the
    config's type (``-E virtualenv:2.7``) and judges asv's environment of that name under
    that type, ``virtualenv-py2.7-Cython-numpy1.8`` (the files' own requirements named by
    asv's rule), not the other the matrix gives (before: refused at once, exit 2, "not an asv
    environment's name")."""
    from ragbench import follow_up, project

    root = astropy_both(tmp_path)
    store = astropy_store(tmp_path, capsys, root=root)
    alert, kept = an_alert(store), project.load(Store(store), "cheetah")
    words = shlex.split(follow_up.repro_command(alert, kept))
    assert words[words.index("--environment") + 1] == LEGACY, words
    data = json.loads((root / "results" / "cheetah" / f"{BASE}-{LEGACY}.json").read_text())
    own = asv_name("virtualenv", data["python"], data["requirements"])
    other = asv_name("virtualenv", "2.7", {"Cython": "", "jinja2": "", "numpy": "1.8"})
    assert (own, other) == (f"virtualenv-{LEGACY}", "virtualenv-py2.7-Cython-jinja2-numpy1.8")
    assert asv_builds(root / "asv.conf.json", "virtualenv:2.7") == [other, own]
    log = named_asv(tmp_path, monkeypatch, root / "results" / "cheetah", [other, own])
    code, out = ragbench(capsys, *words[1:], "--store", tmp_path / "g.duckdb", "--rounds", "1")
    verdict = re.search(r"ragbench gate: (PASS|FAIL|INCONCLUSIVE)", out)
    assert verdict and code == (0 if verdict.group(1) == "PASS" else 1), out
    assert f"environment {own}." in out and "jinja2" not in out, out
    runs = asv_runs(log)
    assert runs and all(r[r.index("--environment") + 1] == "virtualenv:2.7" for r in runs), runs


def test_a_legacy_environment_asv_no_longer_builds_is_refused_naming_what_it_built(
        tmp_path, capsys, monkeypatch):  # fmt: skip
    """astropy's config's matrix now adds jinja2: asv builds ``py2.7-Cython-numpy1.8`` no more,
    only ``virtualenv-py2.7-Cython-jinja2-numpy1.8``. The gate of that environment refuses in
    one line naming what asv measured, exit 2 (before: refused before measuring, "not an asv
    environment's name", naming nothing that could be passed)."""
    root = typed_astropy(tmp_path)
    built = asv_name("virtualenv", "2.7", {"Cython": "", "jinja2": "", "numpy": "1.8"})
    named_asv(tmp_path, monkeypatch, root / "results" / "cheetah", [built])
    code, out = ragbench(capsys, "gate", "--store", tmp_path / "g.duckdb", "--machine",
                         "cheetah", "--config", root / "asv.conf.json", "--environment",
                         LEGACY, "--base", BASE, "--head", HEAD, "--rounds", "1")  # fmt: skip
    last = out.strip().splitlines()[-1]  # after asv's progress, the one line of the refusal
    assert code == 2 and last.startswith("ragbench gate: error: "), out
    assert f"--environment '{LEGACY}': asv (-E virtualenv:2.7" in last, out
    assert f"measured base in {built}, none of that name" in last, out


def test_a_legacy_environment_without_the_configs_type_prints_why_not_a_command(
        tmp_path, capsys, monkeypatch):  # fmt: skip
    """astropy's own config names no environment_type, without which asv 0.6 builds no
    environment ("Environment type must be specified"), ``py2.7-Cython-numpy1.8`` (a name
    without the type) and ``virtualenv-py2.7-Cython-numpy1.8`` alike: the alert prints no
    re-measure command but one line saying why and what can (a config that names the type),
    and the gate given either name refuses so in one line, exit 2, before asv measures
    anything. Before: the advice was to pass --environment with the type
    (``virtualenv-py2.7-Cython-numpy1.8``), and for that name the alert printed a gate, which
    ran asv on a config it refuses."""
    from ragbench import follow_up, project
    from ragbench.commands import alerts as alerts_command

    store = astropy_store(tmp_path, capsys)
    alert, kept = an_alert(store), project.load(Store(store), "cheetah")
    assert follow_up.repro_command(alert, kept) is None
    text = alerts_command.text(alert, None, [], kept)
    assert "Re-measure:" not in text, text
    untyped = ("has no environment_type, without which asv 0.6 builds no environment: name "
               "the type the results were measured with in it, or in a copy beside it given "
               "as --config (\"environment_type\": ")  # fmt: skip
    why = f"Not re-measured in {LEGACY}: its config {kept.config} {untyped}"
    assert why + '"conda" or "virtualenv")' in text, text
    assert "pass --environment" not in text, text
    typed = f"virtualenv-{LEGACY}"
    one = {**alert, "cells": [{**alert["cells"][0], "environment": typed}]}
    assert follow_up.repro_command(one, kept) is None
    text = alerts_command.text(one, None, [], kept)
    assert "Re-measure:" not in text, text
    why = f"Not re-measured in {typed}: its config {kept.config} {untyped}"
    assert why + '"virtualenv")' in text, text
    log = named_asv(tmp_path, monkeypatch, ASTROPY / "results" / "cheetah", [LEGACY])
    for env, kind in ((LEGACY, '"conda" or "virtualenv")'), (typed, '"virtualenv")')):
        code, out = ragbench(capsys, "gate", "--store", tmp_path / "g.duckdb", "--machine",
                             "cheetah", "--config", ASTROPY / "asv.conf.json", "--environment",
                             env, "--base", BASE, "--head", HEAD)  # fmt: skip
        assert code == 2 and len(out.strip().splitlines()) == 1, out
        assert f"--environment '{env}': its config {ASTROPY / 'asv.conf.json'} {untyped}" in out
        assert out.strip().endswith(kind) and "pass --environment" not in out, out
        assert not log.exists() or not asv_runs(log), out


DJANGO = PUBLIC / "asv-django"  # django-asv's ubuntu-latest, conda-py3.12
NIGHT = ("2cace96be6d6", "c9eb16a87e60")


def test_a_matrix_environment_is_measured_and_judged_alone(tmp_path, capsys, monkeypatch):
    """No public sample has a matrix: django-asv's real files of one night are written by
    asv (replaced) under two matrix entries of conda-py3.12, named by asv's rule
    (``conda-py3.12-numpy1.26``, ``conda-py3.12-numpy2.0``), as asv builds them of its config
    given that matrix (``matrix_django``). An alert in one re-measures with ``--environment``
    that name; the gate measures ``-E conda:3.12`` (both entries) and judges that one alone;
    given ``conda-py3.12``, which asv measured none of, it refuses in one line naming the two
    (before: the name refused at once, "not an asv environment's name")."""
    from ragbench import follow_up, project

    names = [asv_name("conda", "3.12", {"numpy": v}) for v in ("1.26", "2.0")]
    assert names == ["conda-py3.12-numpy1.26", "conda-py3.12-numpy2.0"]
    conf = matrix_django(tmp_path)
    assert asv_builds(conf, "conda:3.12") == names
    kept = project.read(conf)
    cell = {"benchmark": "form_benchmarks.form_clean.benchmark.FormClean",
            "metric": "time_form_clean", "param_key": "", "found_by": "change point",
            "environment": names[0]}  # fmt: skip
    alert = {"machine": "ubuntu-latest", "commit_hash": NIGHT[1], "prev_commit_hash": NIGHT[0],
             "cells": [cell]}  # fmt: skip
    words = shlex.split(follow_up.repro_command(alert, kept))
    assert words[words.index("--environment") + 1] == names[0], words
    log = named_asv(tmp_path, monkeypatch, DJANGO / "results" / "ubuntu-latest", names)
    code, out = ragbench(capsys, *words[1:], "--store", tmp_path / "g.duckdb", "--rounds", "1")
    verdict = re.search(r"ragbench gate: (PASS|FAIL|INCONCLUSIVE)", out)
    assert verdict and code == (0 if verdict.group(1) == "PASS" else 1), out
    assert f"environment {names[0]}." in out and names[1] not in out, out
    assert all(r[r.index("--environment") + 1] == "conda:3.12" for r in asv_runs(log))
    code, out = ragbench(capsys, *words[1 : words.index("--environment")], "--environment",
                         "conda-py3.12", *words[words.index("--environment") + 2 :], "--store",
                         tmp_path / "h.duckdb", "--rounds", "1")  # fmt: skip
    last = out.strip().splitlines()[-1]  # after asv's progress, the one line of the refusal
    assert code == 2 and last.startswith("ragbench gate: error: "), out
    assert f"measured base in {names[0]}, {names[1]}, none of that name" in last, out


def matrix_django(tmp_path: Path) -> Path:
    """django-asv's config copied, its matrix given numpy 1.26 and 2.0 (``conda-py3.12`` then
    builds ``conda-py3.12-numpy1.26`` and ``conda-py3.12-numpy2.0``); nothing else changed."""
    conf = tmp_path / "django" / "asv.conf.json"
    conf.parent.mkdir(parents=True)
    text = (DJANGO / "asv.conf.json").read_text()
    conf.write_text(text.replace('"pythons"', '"matrix": {"numpy": ["1.26", "2.0"]},\n    '
                                 '"pythons"', 1))  # fmt: skip
    return conf


def django_alert(environment: str) -> dict:
    """An alert of django-asv's ubuntu-latest over one real night, its cell (a real benchmark,
    its values made up: 20% slower) in ``environment``."""
    cell = {"benchmark": "form_benchmarks.form_clean.benchmark.FormClean",
            "metric": "time_form_clean", "param_key": "", "environment": environment,
            "unit": "seconds", "kind": "latency", "before": 0.001, "after": 0.0012,
            "ratio_lo": None, "ratio_hi": None}  # fmt: skip
    return {"machine": "ubuntu-latest", "commit_hash": NIGHT[1], "prev_commit_hash": NIGHT[0],
            "commit_time": None, "state": "new", "reason": None, "fixed_by": None,
            "cells": [{**cell, "found_by": "change point"}]}  # fmt: skip


def asv_selects(conf: Path, find: list[str]) -> list[str]:
    """The environments asv 0.6 itself (``get_environments``, as ``asv find`` calls it, which
    searches the first) selects with the ``-E`` of the ``asv find`` command ``find``."""
    from asv.commands import make_argparser
    from asv.config import Config
    from asv.environment import get_environments

    args = make_argparser()[0].parse_args(find[1:])
    return [e.name for e in get_environments(Config.load(conf), args.env_spec, verbose=False)]


def test_matrix_bisection_selects_the_alerts_environment(tmp_path, capsys, monkeypatch):
    """The alert's ``asv find`` selects its environment alone, as asv 0.6 itself reads ``-E``:
    django-asv's ``conda-py3.12`` by ``conda:3.12``; with a matrix (``matrix_django``) its
    ``conda-py3.12-numpy1.26`` by that name (``conda:3.12`` would select both entries and asv
    search the first); astropy's pre-0.5 ``py2.7-Cython-numpy1.8``, its config typed and its
    matrix as then (no jinja2), by ``virtualenv:2.7``. ``ragbench bisect --environment`` of
    the matrix name runs ``asv find -E conda-py3.12-numpy1.26`` (asv replaced). Before: the
    printed commands had no ``-E`` (asv searched the first of all its environments) and
    ``ragbench bisect`` refused the matrix name, "not an asv environment's name"."""
    from ragbench import follow_up, project

    conf = matrix_django(tmp_path)
    for config, env, flag in (
        (DJANGO / "asv.conf.json", "conda-py3.12", "conda:3.12"),
        (conf, "conda-py3.12-numpy1.26", "conda-py3.12-numpy1.26"),
    ):
        kept = project.read(config)
        find = shlex.split(follow_up.bisect_command(django_alert(env), kept).split(" && ")[1])
        assert find[find.index("-E") + 1] == flag, find
        assert asv_selects(config, find) == [env], find
    root = astropy_as_then(tmp_path)
    store = astropy_store(tmp_path, capsys, root=root)
    alert, kept = an_alert(store), project.load(Store(store), "cheetah")
    find = shlex.split(follow_up.bisect_command(alert, kept).split(" && ")[1])
    assert find[find.index("-E") + 1] == "virtualenv:2.7", find
    assert asv_selects(root / "asv.conf.json", find) == [f"virtualenv-{LEGACY}"], find
    log = fake_asv(tmp_path, monkeypatch)
    code, out = ragbench(capsys, "bisect", "--config", conf, "--environment",
                         "conda-py3.12-numpy1.26", "--cell",
                         "form_benchmarks.form_clean.benchmark.FormClean.time_form_clean",
                         "--good", NIGHT[0], "--bad", NIGHT[1])  # fmt: skip
    assert code == 0, out
    (call,) = [c for c in map(json.loads, log.read_text().splitlines()) if c["argv"][0] == "find"]
    assert call["argv"][call["argv"].index("-E") + 1] == "conda-py3.12-numpy1.26", call


def test_a_bisection_asv_cannot_select_alone_prints_why(tmp_path, capsys, monkeypatch):
    """Where asv's ``-E`` cannot select the alert's environment alone, the alert prints no
    ``asv find`` but one line saying why, and ``ragbench bisect --environment`` refuses in one
    line, exit 2, before asv runs: django-asv's config builds no ``conda-py3.12-numpy1.26``;
    with a matrix it builds no ``conda-py3.12`` (``conda:3.12`` selects both entries); astropy's
    own config names no environment_type, without which asv 0.6 builds none. Before: each
    printed an ``asv find`` without ``-E``, searching another environment (or refused by
    asv), and ``ragbench bisect`` refused the matrix name as no environment's name at all."""
    from ragbench import follow_up, project
    from ragbench.commands import alerts as alerts_command

    conf = matrix_django(tmp_path)
    plain = str((DJANGO / "asv.conf.json").resolve())
    log = fake_asv(tmp_path, monkeypatch)
    for config, env, why in (
        (plain, "conda-py3.12-numpy1.26", f"asv (-E conda:3.12) builds conda-py3.12 from "
         f"{plain}, and no environment conda-py3.12-numpy1.26"),
        (str(conf), "conda-py3.12", f"asv (-E conda:3.12) builds conda-py3.12-numpy1.26, "
         f"conda-py3.12-numpy2.0 from {conf}, and no environment conda-py3.12"),
    ):  # fmt: skip
        kept = project.read(Path(config))
        assert follow_up.bisect_command(django_alert(env), kept) is None
        text = alerts_command.text(django_alert(env), None, [], kept)
        assert f"Not bisected in {env}: {why}" in text and "Bisect" not in text, text
        code, out = ragbench(capsys, "bisect", "--config", config, "--environment", env,
                             "--cell", "form_benchmarks.form_clean.benchmark.FormClean."
                             "time_form_clean", "--good", NIGHT[0], "--bad", NIGHT[1])  # fmt: skip
        assert code == 2 and len(out.strip().splitlines()) == 1, out
        assert f"--environment '{env}': {why}" in out, out
        assert not log.exists(), out
    store = astropy_store(tmp_path, capsys)
    alert, kept = an_alert(store), project.load(Store(store), "cheetah")
    assert follow_up.bisect_command(alert, kept) is None
    why = follow_up.not_bisected(alert, kept)[LEGACY]
    assert why.startswith(
        f"its config {kept.config} has no environment_type, without which asv 0.6 builds no "
        "environment: "
    ), why
    text = alerts_command.text(alert, None, [], kept)
    assert f"Not re-measured in {LEGACY}: {why}" in text, text  # the same reason, said once
    assert f"Not bisected in {LEGACY}: as above" in text, text


def test_a_re_measure_asv_cannot_build_prints_why(tmp_path, capsys, monkeypatch):
    """The gate measures ``--environment ENV`` with asv's spec ``TYPE:X.Y`` and judges the runs
    of ENV alone, so it can measure only an environment that spec builds from the config as
    asv 0.6 itself reads it (``get_environments``). Where it builds none of that name, the
    alert prints no gate but ``Not re-measured in ENV: why``: django-asv's config builds
    ``conda-py3.12`` alone, no ``conda-py3.12-numpy1.26``; with a matrix (``matrix_django``)
    it builds the two numpy entries, no ``conda-py3.12``. The gate the alert printed before,
    run with asv replaced by one building what asv 0.6 builds of that config, measures those
    and refuses, exit 2, naming them."""
    from ragbench import follow_up, project
    from ragbench.commands import alerts as alerts_command

    matrix = str(matrix_django(tmp_path).resolve())
    plain = str((DJANGO / "asv.conf.json").resolve())
    named_asv(tmp_path, monkeypatch, DJANGO / "results" / "ubuntu-latest", [])
    for config, env in ((plain, "conda-py3.12-numpy1.26"), (matrix, "conda-py3.12")):
        built = asv_builds(Path(config), "conda:3.12")
        assert env not in built and built, built
        kept = project.read(Path(config))
        alert = django_alert(env)
        assert follow_up.repro_command(alert, kept) is None
        why = (f"asv (-E conda:3.12) builds {', '.join(built)} from {config}, and no "
               f"environment {env}: the gate would measure another, or none")  # fmt: skip
        assert follow_up.not_re_measured(alert, kept) == {env: why}
        text = alerts_command.text(alert, None, [], kept)
        assert f"Not re-measured in {env}: {why}" in text and "Re-measure" not in text, text
        monkeypatch.setenv("FAKE_ASV_NAMES", json.dumps(built))
        code, out = ragbench(capsys, "gate", "--config", config, "--environment", env,
                             "--base", NIGHT[0], "--head", NIGHT[1], "--machine",
                             "ubuntu-latest", "--store", tmp_path / f"{env}.duckdb",
                             "--rounds", "1")  # fmt: skip
        last = out.strip().splitlines()[-1]
        assert code == 2 and f"measured base in {', '.join(built)}, none of that name" in last


def test_a_cell_that_failed_in_one_environment_is_alerted_in_that_one(tmp_path, capsys):
    """django-asv's newest commit (03988c5a), its time_query_raw made to fail under
    conda-py3.13 alone: the alert names that environment, its value before from that
    environment, no value now, and bisects there with ``-E conda:3.13`` for a slowdown
    (before: no environment, "now" conda-py3.12's value, "before" the two pooled, and ``asv
    find`` with no ``-E`` and ``--invert``, searching conda-py3.12, where nothing failed)."""
    data = tmp_path / "django"
    shutil.copytree(DJANGO_ENVS, data)
    raw = "query_benchmarks.query_raw.benchmark.QueryRaw.time_query_raw"
    f = data / "results" / "ubuntu-latest" / "03988c5a-conda-py3.13.json"
    doc = json.loads(f.read_text())
    row = dict(zip(doc["result_columns"], doc["results"][raw], strict=False))
    row.update(result=[None], samples=None)
    doc["results"][raw] = [row.get(k) for k in doc["result_columns"]]
    f.write_text(json.dumps(doc))
    path = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main", data)
    assert code == 0, out
    code, out = ragbench(capsys, "alerts", "--store", path, "--machine", "ubuntu-latest")
    assert code == 1, out
    (line,) = [x for x in out.splitlines() if x.startswith(f"- `{raw}`")]
    before = Store(path).series(benchmark=raw.rsplit(".", 1)[0], metric="time_query_raw",
                                machine="ubuntu-latest")  # fmt: skip
    py313 = [r["median"] for r in before if r["commit_hash"].startswith("4c4f8fd7")
             and r["environment"] == "conda-py3.13"]  # fmt: skip
    assert f"`{raw}` [conda-py3.13]: failed: raised in 1 head run(s)" in line, line
    assert f"(before: {py313[0]:.4g}, now: none)" in line, (line, py313)
    find = shlex.split(re.search(r"Bisect the range: `(.+)`", out).group(1))
    assert find[find.index("-E") + 1] == "conda:3.13" and "--invert" not in find, find


def test_another_projects_results_without_their_config_get_none_of_this_checkouts_links(
    tmp_path, capsys
):
    """django-asv's results ingested without the asv.conf.json above them: no project is known,
    and their commits are not this checkout's, so its alert has no link of this checkout's
    repository, no ``ragbench gate`` or ``ragbench bisect`` of this suite (which would measure
    commits it does not have), and a line that says why (before: this repository's compare
    page over django's commits, and both commands)."""
    from ragbench import follow_up
    from ragbench.commands import alerts as alerts_command

    data = tmp_path / "django"
    shutil.copytree(DJANGO / "results", data / "results")
    path = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main", data)
    assert code == 0, out
    found = Store(path).alerts("ubuntu-latest")
    assert found
    for a in found:
        text = alerts_command.text(a, "https://github.com/example/ragbench")
        assert "github.com/example" not in text and "ragbench gate" not in text, text
        assert "ragbench bisect" not in text and "Re-measure" not in text, text
        assert (f"Not linked, re-measured or bisected here: {a['commit_hash'][:12]} is no "
                "commit of this checkout") in text, text  # fmt: skip
    # pytest-benchmark's, of lagom's commits (commit_info.project "lagom"): no link either
    cells = [{**c, "benchmark": "tests/test_x.py::test_y", "environment": "python 3.10, Xeon"}
             for c in found[0]["cells"]]  # fmt: skip
    lagom = {**found[0], "commit_hash": "9f84ad6b89dc" + "0" * 28, "cells": cells}
    assert follow_up.diff_url("https://github.com/example/ragbench", lagom) is None
    # this suite's results (no environment of another harness) keep this checkout's link
    ours = {**found[0], "cells": [{**c, "environment": ""} for c in found[0]["cells"]]}
    assert "https://github.com/example/ragbench/compare/" in alerts_command.text(
        ours, "https://github.com/example/ragbench"
    )


def test_a_second_project_on_a_machine_of_the_same_name_is_refused(tmp_path, capsys):
    """astropy's results from a runner also called ``ubuntu-latest`` (as every GitHub runner
    is), ingested after django-asv's: refused, each file in one line saying how to keep them
    apart, and django's alerts keep django's links (before: astropy's config took the machine
    over, and django's alert linked astropy's compare page and called its benchmarks gone
    from astropy's suite)."""
    from ragbench import project

    astropy = tmp_path / "astropy"
    shutil.copytree(ASTROPY, astropy)
    (astropy / "results" / "cheetah").rename(astropy / "results" / "ubuntu-latest")
    for f in (astropy / "results" / "ubuntu-latest").glob("*.json"):
        doc = json.loads(f.read_text())
        if f.name == "machine.json":
            doc["machine"] = "ubuntu-latest"
        else:
            doc.setdefault("params", {})["machine"] = "ubuntu-latest"
        f.write_text(json.dumps(doc))
    path = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main", DJANGO)
    assert code == 0, out
    code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main", astropy)
    refused = [x for x in out.splitlines() if x.startswith("ragbench ingest: refused")]
    assert code == 1 and len(refused) == 16, out
    assert all("machine 'ubuntu-latest' holds results of Django" in x and "astropy" in x
               and "[machines] in the policies" in x for x in refused), refused  # fmt: skip
    assert project.load(Store(path), "ubuntu-latest").name == "Django"
    assert not [r for r in Store(path).runs(machine="ubuntu-latest") if r["commit_hash"][:8]
                in (BASE, HEAD)]  # fmt: skip


def test_one_project_from_two_clones_is_one_project(tmp_path, capsys):
    """Found by an attack on the refusal above: django-asv's config with asv's common ``"repo":
    "."`` in two clones (the repository is wherever each clone is) was refused as another
    project, every file; the same name and no web address that differs is the same project."""
    path = tmp_path / "perf.duckdb"
    for clone in ("a", "b"):
        shutil.copytree(DJANGO, tmp_path / clone)
        conf = tmp_path / clone / "asv.conf.json"
        conf.write_text(re.sub(r'"repo": *"[^"]*"', '"repo": "."', conf.read_text()))
        code, out = ragbench(capsys, "ingest", "--store", path, "--branch", "main",
                             tmp_path / clone / "results")  # fmt: skip
        assert code == 0 and "ragbench ingest: refused" not in out, out[-2000:]


def test_a_commit_fetched_after_it_was_missing_is_this_checkouts(tmp_path, monkeypatch):
    """A long-running dashboard asked about a commit before the checkout fetched it: asked
    again after the fetch, the commit is this checkout's (before: the first answer was kept
    for the process's life, and its links and commands stayed off)."""
    from ragbench import follow_up

    here = new_repo(tmp_path / "here")
    commit(here, "a", "1", "a")
    there = tmp_path / "there"
    git("clone", "--quiet", str(here), str(there))
    for name in ("user.name", "user.email"):
        git("config", name, "T", cwd=there)
    later = commit(there, "a", "2", "b")
    monkeypatch.setattr("ragbench.git.REPO", here)
    alert = {"commit_hash": later, "cells": [{"environment": "py3.12"}]}
    assert not follow_up.in_this_checkout(alert)
    git("fetch", "--quiet", str(there), "main", cwd=here)
    assert follow_up.in_this_checkout(alert)


def test_a_parameter_value_with_a_comma_keeps_it(tmp_path, capsys):
    """pytest's id ``a,b`` and asv's tuple parameter ``(10, 10)``: a value keeps its commas,
    so the alert of a step in such a cell is listed with its re-measurement (before: ``ragbench
    alerts`` refused every alert of the store, exit 2, over one cell's params)."""
    import numpy as np

    from ragbench.discovery import parse_params
    from ragbench.history import alerting
    from ragbench.history import edivisive as changepoints
    from ragbench.policies import load_policies
    from ragbench.store import Measurement, Run

    assert parse_params("n=3,shape=(10, 10)") == {"n": "3", "shape": "(10, 10)"}
    assert parse_params("param=a,b") == {"param": "a,b"}
    policies, rng, ids = load_policies(), np.random.default_rng(2), []
    store = Store(tmp_path / "perf.duckdb")
    with store.writing():
        for i in range(30):
            run = Run("pytest-benchmark", f"{i:040x}", "node1", started_at=1.8e9 + i * 3600,
                      commit_time=1.8e9 + i * 3600, branch="main",
                      environment="python 3.11, CPU", python="3.11")  # fmt: skip
            v = rng.normal(1e-3 * (1.3 if i >= 20 else 1), 1e-6, 20)
            store.add_run(run, [Measurement("tests/test_x.py::test_p", "time", {"param": "a,b"},
                                            "s", float(np.median(v)), samples=list(v),
                                            stats_number=1, stats_repeat=20)])  # fmt: skip
            ids.append(run.run_id)
    changepoints.update(store, ids, policies)
    alerting.update(store, "node1", policies)
    code, out = ragbench(capsys, "alerts", "--store", store.path)
    assert code == 1 and "1 alert(s), 1 new" in out, out
    assert "pytest --benchmark-only --benchmark-json=base.json 'tests/test_x.py::test_p[a,b]'" \
        in out, out  # fmt: skip


def test_a_file_asv_ignores_or_a_machine_read_as_an_option_is_refused(tmp_path, capsys):
    """astropy's results: a file whose machine is not its results directory's (asv's own
    fixture ``cccccccc``: asv ignores it) is refused, each in one line (before: stored as a
    machine of its own); so is a machine named ``-gpu1``, which every printed command line
    (``--machine -gpu1``) would take for an option."""
    results = tmp_path / "results"
    shutil.copytree(ASTROPY / "results", results)
    first = sorted((results / "cheetah").glob("0*.json"))[0]
    doc = json.loads(first.read_text())
    doc["params"]["machine"] = "not-cheetah"
    (first.parent / f"cccccccc-{doc['env_name']}.json").write_text(json.dumps(doc))
    code, out = ragbench(capsys, "ingest", "--store", tmp_path / "a.duckdb", "--branch", "main",
                         results)  # fmt: skip
    assert "its machine 'not-cheetah' is not its results directory's 'cheetah', so asv ignores " \
        "it" in out, out  # fmt: skip
    assert Store(tmp_path / "a.duckdb").machines() == ["cheetah"]
    dash = tmp_path / "dash" / "results"
    (dash / "-gpu1").mkdir(parents=True)
    doc["params"]["machine"] = "-gpu1"
    (dash / "-gpu1" / first.name).write_text(json.dumps(doc))
    code, out = ragbench(capsys, "ingest", "--store", tmp_path / "b.duckdb", "--branch", "main",
                         dash)  # fmt: skip
    assert "machine '-gpu1' starts with '-'" in out and code != 0, (code, out)


SPYGLASS = PUBLIC / "asv-spyglass"  # asv 0.6 results of asv_samples: 2 commits, 5 environments


def test_a_gate_of_runs_that_share_no_cell_says_so(tmp_path, capsys):
    """asv-spyglass's real results: base d6b286b8 and head a0f29428 share no cell in
    virtualenv-py3.12-numpy, every one a latency the policies gate. The gate is no pass, and
    says why (before: "Every cell's policy is `info`", and to write a policies file); a gate
    of two commits that differ in their last digit, head pooled from three environments, names
    both commits apart and every environment (before: the same 12 characters twice, and head's
    first run's environment alone)."""
    store = tmp_path / "perf.duckdb"
    code, out = ragbench(capsys, "ingest", "--store", store, "--branch", "main",
                         SPYGLASS / "results")  # fmt: skip
    assert code == 0, out
    head = "a0f29428eeb7563d7d5ab8385c722e8d5560bd06"
    code, out = ragbench(capsys, "gate", "--stored", "--store", store, "--machine", "rgx1gen11",
                         "--base", "d6b286b8", "--head", head,
                         "--environment", "virtualenv-py3.12-numpy")  # fmt: skip
    assert code == 1, out
    assert ("### Nothing was judged: none of the 17 cell(s) the policies gate has values to "
            "judge on both sides, so no pass") in out, out  # fmt: skip
    assert "(16 on base alone, 1 on head alone)" in out and "--policies FILE" not in out, out
    code, out = ragbench(capsys, "gate", "--stored", "--store", store, "--machine", "rgx1gen11",
                         "--base", head[:-1] + "7", "--head", head,
                         "--across-environments")  # fmt: skip
    assert f"## ragbench gate: {head} against {head[:-1]}7 - " in out, out
    assert ("environment conda-py3.11 / virtualenv-py3.12 / virtualenv-py3.12-numpy (3 runs "
            "pooled)") in out, out  # fmt: skip
