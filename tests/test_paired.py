"""The paired A/B comparison: its statistics, its verdicts, two revisions in one process, and
the runner end to end on the CPU with a head that is really slower."""

from __future__ import annotations

import json
import random
import shutil
import sys

import pytest
from conftest import REPO

from ragbench import git, pr, stats
from ragbench.gate import gating as gate
from ragbench.gate import paired
from ragbench.gate.gate_json import to_json
from ragbench.history import series as history
from ragbench.policies import Policies, Policy, load_policies
from ragbench.verdicts import comparison as compare
from ragbench.verdicts import status as verdicts
from ragbench.verdicts.comparison import Cell

POLICIES = Policies(
    (Policy("*.host_us", "latency", threshold=0.03, paired=True), Policy("*", "info")),
    {"alpha": 0.01},
    {},
)


def test_sign_test_and_median_interval():
    assert stats.sign_test([1.1] * 10) == pytest.approx(2 / 2**10)
    assert stats.sign_test([1.0] * 5) == 1.0  # no signs: no evidence
    assert stats.median_interval([1.0, 2.0, 3.0], 0.95) == (-float("inf"), float("inf"))
    rng = random.Random(0)
    covered = 0
    for _ in range(200):  # the interval holds the true median (1.0) at least 95% of the time
        lo, hi = stats.median_interval([rng.gauss(1.0, 0.02) for _ in range(60)], 0.95)
        covered += lo <= 1.0 <= hi
    assert covered >= 0.93 * 200


def _doc(base, head, aa=None, errors=None):
    values = {"base": base, "head": head, "aa": aa if aa is not None else list(base)}
    cell = {"benchmark": "kernel.KernelLatency", "metric": "host_us", "unit": "us",
            "params": {"backend": "triton"}, "values": values, "errors": {}}  # fmt: skip
    return {"errors": errors or {}, "cells": [cell]}


def _judge(docs) -> compare.Verdict:
    (v,) = paired.judge(paired.collect(docs), POLICIES, paired.TOGETHER, len(docs))
    return v


def _noisy(n, scale, seed):
    rng = random.Random(seed)
    return [scale * 20 * (1 + rng.gauss(0, 0.01)) for _ in range(n)]


def test_verdicts_of_the_paired_cells():
    same = [_doc(_noisy(40, 1, i), _noisy(40, 1, 10 + i), _noisy(40, 1, 20 + i)) for i in range(3)]
    assert _judge(same).status == "unchanged"
    slow = [_doc(_noisy(40, 1, i), _noisy(40, 1.08, 10 + i)) for i in range(3)]
    v = _judge(slow)
    assert v.status == "regression" and v.change == pytest.approx(0.08, abs=0.01)
    # three rounds: no interval at the family-wise level, so no verdict of "unchanged"
    few = [_doc(_noisy(3, 1, 0), _noisy(3, 1, 1))]
    assert _judge(few).status == "inconclusive"
    # the A/A arm moved by 8%: the process was too noisy to call anything unchanged (head is
    # judged against the midpoint of base and its copy, 4% from each, widened by the 8%) ...
    moved = [_doc(_noisy(40, 1, i), _noisy(40, 1, 10 + i), _noisy(40, 1.08, 20 + i))
             for i in range(3)]  # fmt: skip
    assert _judge(moved).status == "inconclusive"
    # ... where a head equal to base beside an A/A arm 4% away lies 2% under the midpoint:
    # at worst +2%, under the 3% threshold
    near = [_doc(_noisy(40, 1, i), _noisy(40, 1, 10 + i), _noisy(40, 1.04, 20 + i))
            for i in range(3)]  # fmt: skip
    assert _judge(near).status == "unchanged"
    # ... but a regression stays one (fail closed)
    both = [_doc(_noisy(40, 1, i), _noisy(40, 1.1, 10 + i), _noisy(40, 1.08, 20 + i))
            for i in range(3)]  # fmt: skip
    assert _judge(both).status == "regression"
    broken = [_doc(_noisy(40, 1, 0), [], errors={"head": "ImportError: boom"})]
    assert _judge(broken).status == "failed"
    nan = float("nan")  # non-finite samples are no measurement: never a pass
    assert _judge([_doc(_noisy(40, 1, 0), [nan] * 40)]).status == "missing"
    assert _judge([_doc(_noisy(40, 1, 0), _noisy(20, 1, 1) + [nan] * 20)]).status == "missing"
    assert _judge([_doc([nan] * 40, _noisy(40, 1, 1))]).status == "inconclusive"


THROUGHPUT = Policies(
    (Policy("pipeline.Throughput.img_per_s", "throughput", threshold=0.03, paired=True),
     Policy("*", "info")), {"alpha": 0.01}, {},
)  # fmt: skip


def _throughput(head_ratios, aa_ratio):
    """Three processes of 30 rounds of an img/s cell: base 100, the A/A arm 100 x ``aa_ratio``,
    head the ratios times the reference it is judged against (their geometric mean)."""
    reference = 100.0 * aa_ratio**0.5

    def doc(i):
        ratios = head_ratios[30 * i : 30 * (i + 1)]
        cell = {"benchmark": "pipeline.Throughput", "metric": "img_per_s", "unit": "img/s",
                "params": {"pipeline": "fa2", "batch": 1}, "errors": {},
                "values": {"base": [100.0] * 30, "head": [reference * r for r in ratios],
                           "aa": [100.0 * aa_ratio] * 30}}  # fmt: skip
        return {"errors": {}, "cells": [cell]}

    docs = [doc(i) for i in range(3)]
    (v,) = paired.judge(paired.collect(docs), THROUGHPUT, paired.TOGETHER, 3)
    return v


def test_an_aa_arm_that_moved_widens_the_interval_judged():
    """The A/A pull request: an A/A arm at 1.6% (more than half the 3% threshold) and head/base
    1.000-1.028, no loss at all: unchanged (before: inconclusive, and the gate blocked it). A
    loss of 2.5% with the same A/A arm: inconclusive (its interval, widened, reaches past 3%);
    a real 5% loss with a noisy A/A arm never passes."""
    from scipy.stats import norm

    ratios = [1.014 + 0.041 * norm.ppf((i + 0.5) / 90) for i in range(90)]
    v = _throughput(ratios, 1 / 1.016)
    assert v.aa == pytest.approx(0.016)
    assert v.interval == pytest.approx((1.0, 1.028), abs=0.002)
    assert v.status == "unchanged", v.note
    said = "unchanged: 95% interval 1.0"  # the cell's own, inside the family-wise one shown
    assert said in v.note and "widened by the A/A arm's 1.6%, at worst +0.5%" in v.note, v.note
    assert "under the 3% threshold" in v.note
    v = _throughput([r - 0.039 for r in ratios], 1 / 1.016)  # 0.961 .. 0.989
    assert v.status == "inconclusive" and "not under the 3% threshold" in v.note, v.note
    for seed in range(10):
        rng = random.Random(seed)
        noisy = [0.95 * (1 + rng.gauss(0, 0.08)) for _ in range(90)]
        v = _throughput(noisy, 1 / (1 + rng.uniform(0.0, 0.03)))
        assert v.status in ("regression", "inconclusive"), v.note


def test_too_few_samples_are_inconclusive_and_most_inconclusive_is_no_pass():
    """Three samples a side: the smallest Mann-Whitney p is 0.1 > alpha, so even a 29% drop
    cannot be flagged; that is inconclusive, and a run made of such cells is not a pass."""
    pol = Policies((Policy("*", "throughput", threshold=0.10),), {"alpha": 0.01}, {})
    base = {("b", "img_per_s", ""): Cell("b", "img_per_s", "", {}, "img/s", [100.0, 101, 99])}
    head = {("b", "img_per_s", ""): Cell("b", "img_per_s", "", {}, "img/s", [71.0, 72, 70])}
    c = compare.compare(base, head, pol)
    assert [v.status for v in c.verdicts] == ["inconclusive"]
    assert c.headline == "inconclusive" and not c.failed
    res = gate.GateResult("a" * 40, "b" * 40, "m", c, measured=False, rounds=1)
    assert res.exit_code == 1
    doc = to_json(res)
    assert doc["verdict"] == "inconclusive" and doc["failures"][0]["status"] == "inconclusive"
    j = pr.judge(doc["failures"], [])
    assert j.state == "failure" and j.description.startswith("inconclusive")


def test_paired_metrics_are_not_judged_across_processes():
    base = {("kernel.K", "host_us", ""): Cell("kernel.K", "host_us", "", {}, "us", [20.0] * 30)}
    head = {("kernel.K", "host_us", ""): Cell("kernel.K", "host_us", "", {}, "us", [40.0] * 30)}
    (v,) = compare.compare(base, head, POLICIES).verdicts
    assert v.status == "inconclusive" and "one process" in v.note


def test_two_revisions_in_one_process(tmp_path):
    from benchmarks.support import revision as _revision

    other = tmp_path / "other"
    shutil.copytree(REPO / "ragged", other / "ragged")
    (other / "ragged" / "marker.py").write_text("WHICH = 'other'\n")
    before = {k: v for k, v in sys.modules.items() if k == "ragged" or k.startswith("ragged.")}
    a = _revision.load(REPO, "ragged_rev_a")
    b = _revision.load(other, "ragged_rev_b")
    assert a.attention is not b.attention and b.marker.WHICH == "other"
    assert b.attention.__name__ == "ragged_rev_b.attention"  # relative imports stay inside
    wa, wb = _revision.workloads(a), _revision.workloads(b)
    assert wa.ragged is a and wb.ragged is b
    # the modules workloads imports at first use (timm's): the arm's, after its import too
    assert wb.ragged_module("pipeline") is b.pipeline and wb.ragged_module("models") is b.models
    assert wa.ragged_module("pipeline") is a.pipeline
    after = {k: v for k, v in sys.modules.items() if k == "ragged" or k.startswith("ragged.")}
    assert after == before  # the aliases are gone again
    with pytest.raises(ImportError):
        _revision.load(tmp_path / "nowhere", "ragged_rev_c")
    assert "ragged_rev_c" not in sys.modules


def test_a_slower_head_is_caught_in_one_process(tmp_path, monkeypatch):
    """The runner on the CPU (cpu.Pipeline img/s): a head whose forward sleeps 250 ms more
    is a regression in every pipeline. Robust to a loaded machine: a round counts against
    head only when a load spike delays base's forward by more than the whole sleep, and 20
    rounds stay significant (Holm over 3 cells, the sign test at 0.01/3) with 3 such rounds
    of 20. (With 100 ms and 16 rounds, 2 of 16 made padded_full inconclusive on a busy CI
    machine.)"""
    slow = tmp_path / "slow"
    shutil.copytree(REPO / "ragged", slow / "ragged")
    path = slow / "ragged" / "pipeline.py"
    text = path.read_text()
    marker = "        self._check_images(images)\n"
    assert marker in text
    text = text.replace(marker, marker + "        __import__('time').sleep(0.25)\n", 1)
    path.write_text(text)
    pol = Policies((Policy("cpu.Pipeline.img_per_s", "throughput", threshold=0.05, paired=True),
                    Policy("*", "info")), {"alpha": 0.01}, {})  # fmt: skip
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two busy threads on two cores: noisy rounds
    work = tmp_path / "work"
    work.mkdir()
    kw = {"processes": 1, "pipeline_rounds": 20, "log": lambda m: None}
    method, docs = paired.measure(REPO, slow, work, **kw)
    assert method == paired.TOGETHER and not docs[0]["errors"]
    verdicts = paired.judge(paired.collect(docs), pol, method, 1)
    assert {v.key[2]: v.status for v in verdicts} == {
        f"method=threshold_l2,pipeline={p}": "regression"
        for p in ("dense", "padded_full", "padded_max")
    }


def test_the_anchored_host_ratio_is_tracked_on_main_only():
    pol = load_policies()
    policy = pol.for_metric("kernel.AnchoredFloor", "host_ratio")
    assert policy.history_only and not policy.paired
    assert pol.for_metric("kernel.AnchoredFloor", "floor_ratio").kind == "info"  # spreads 4%
    key = ("kernel.AnchoredFloor", "host_ratio", "geometry=deit_b")
    base = {key: Cell(*key, {"geometry": "deit_b"}, "ratio", [1.0] * 40)}
    head = {key: Cell(*key, {"geometry": "deit_b"}, "ratio", [1.5] * 40)}
    c = compare.compare(base, head, pol)
    assert [v.status for v in c.verdicts] == ["info"] and not c.failed
    assert c.headline == "inconclusive" and not c.judged()  # shown, and nothing judged


def test_the_launch_promises_are_bounds_at_the_promised_ratios():
    from benchmarks.support import promises as _promises

    pol = load_policies()
    for cell, (_, _, limit) in _promises.CELLS.items():
        policy = pol.for_metric("kernel.LaunchPromise", cell)
        if limit is None:  # no promise: not a suite cell
            continue
        assert policy.kind == "bound" and policy.max == limit and policy.min is None
        key = ("kernel.LaunchPromise", cell, "geometry=deit_b")
        ok = {key: Cell(*key, {"geometry": "deit_b"}, "ratio", [limit * 0.9] * 40)}
        broken = {key: Cell(*key, {"geometry": "deit_b"}, "ratio", [limit * 1.1] * 40)}
        assert not compare.compare(ok, ok, pol).failed
        assert compare.compare(ok, broken, pol).failed


def test_a_clone_without_the_anchor_skips_it(monkeypatch, tmp_path):
    import contextlib

    from ragbench import asv_run

    monkeypatch.setattr(asv_run, "ANCHOR", "0" * 40)
    logged = []
    with contextlib.ExitStack() as stack:
        assert asv_run._anchor(stack, tmp_path, logged.append) is None
    assert "not in this clone" in logged[0]


def test_a_head_that_loads_only_alone_is_measured_in_alternating_processes(tmp_path):
    """A head that refuses to be imported beside another ragged (a process-wide singleton, a
    clashing registration) is measured one revision a process; the report says so, and with
    one process a side nothing can be called unchanged."""
    lonely = tmp_path / "lonely"
    shutil.copytree(REPO / "ragged", lonely / "ragged")
    init = lonely / "ragged" / "__init__.py"
    init.write_text(
        "import sys as _sys\n"
        "if any(k.startswith('ragged_') and not k.startswith(__name__) for k in _sys.modules):\n"
        "    raise ImportError('another ragged is loaded in this process')\n" + init.read_text()
    )
    pol = Policies((Policy("cpu.Pipeline.img_per_s", "throughput", threshold=0.05, paired=True),
                    Policy("*", "info")), {"alpha": 0.01}, {})  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    logged = []
    method, docs = paired.measure(REPO, lonely, work, processes=1, pipeline_rounds=3,
                                  log=logged.append)  # fmt: skip
    assert method == paired.ALONE and [list(d["arms"]) for d in docs] == [["head"], ["base"]]
    assert any("alternating processes" in m for m in logged)
    verdicts = paired.judge(paired.collect(docs), pol, method, 1)
    assert verdicts and all(v.status == "inconclusive" for v in verdicts)
    assert all(v.method == paired.ALONE for v in verdicts)


def test_main_does_not_judge_host_time_of_separate_runs():
    """floor_us on main moves 2x from run to run: no lookback verdict, no change points (the
    anchored ratio is what main tracks)."""
    points = [history.Point(f"c{i}", i, 20.0 * (1 + (i >= 6)), "e", {}) for i in range(12)]
    key = ("kernel.DispatchFloor", "floor_us", "backend=triton")
    rep = history.history(points, key, {}, "us", load_policies())
    assert rep.status == "info" and rep.change_points == []
    rep = history.history(points, ("kernel.AnchoredFloor", "host_ratio", "g"), {}, "ratio",
                          load_policies())  # fmt: skip
    assert rep.status != "info" and rep.change_points == [6]


def test_paired_report_tabulates_head_over_base(tmp_path, capsys):
    from experiments import paired_report

    doc = tmp_path / "ab.json"
    doc.write_text(json.dumps(_doc([10.0] * 12, [8.0] * 12, aa=[10.0] * 12)))
    assert paired_report.main([str(doc)]) == 0
    row = capsys.readouterr().out.splitlines()[2]
    assert "| 10.0 | 8.0 | 0.800 [0.800, 0.800] | 1.000 [1.000, 1.000] |" in row
    assert paired_report.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_gate_s_document_reads_back_and_nothing_else_does(tmp_path):
    """One contract (ragbench.verdicts.status): what gate_document writes, read_gate_document reads;
    a document of another schema, head or shape is refused."""
    pol = Policies((Policy("*", "throughput", threshold=0.10),), {"alpha": 0.01}, {})
    base = {("b", "img_per_s", ""): Cell("b", "img_per_s", "", {}, "img/s", [100.0] * 12)}
    head = {("b", "img_per_s", ""): Cell("b", "img_per_s", "", {}, "img/s", [50.0] * 12)}
    c = compare.compare(base, head, pol)
    assert c.headline == verdicts.Headline.FAIL
    path = tmp_path / "gate.json"
    doc = verdicts.gate_document("a" * 40, "b" * 40, "m", c)
    path.write_text(json.dumps(doc))
    back = verdicts.read_gate_document(path, "b" * 40)
    assert back["verdict"] == "fail" and back["failures"][0]["status"] == "regression"
    for bad in ({**doc, "schema": verdicts.JSON_SCHEMA + 1}, {**doc, "verdict": "pass"},
                {**doc, "failures": [{**doc["failures"][0], "status": "regresion"}]}):  # fmt: skip
        path.write_text(json.dumps(bad))
        with pytest.raises(verdicts.VerdictError):
            verdicts.read_gate_document(path, "b" * 40)
    path.write_text(json.dumps(doc))
    with pytest.raises(verdicts.VerdictError, match="not c"):
        verdicts.read_gate_document(path, "c" * 40)


def test_a_paired_cells_base_head_and_change_tell_one_story():
    """Rounds whose head/base is 0.97 in 55 of 100 and 1.5 in the 45 fastest: the medians of
    the rounds read head 9% slower, the per-round ratio (what is judged) 3% faster. The
    verdict's head is base times that ratio, so base, head and the change agree."""
    import statistics

    base = [float(i) for i in range(1, 101)]
    head = [b * (1.5 if b <= 45 else 0.97) for b in base]
    assert statistics.median(head) / statistics.median(base) > 1.05  # the pooled medians
    v = _judge([_doc(base, head)])
    assert v.ratio == pytest.approx(0.97)
    assert v.head == pytest.approx(v.base * v.ratio)
    assert v.change == pytest.approx(v.head / v.base - 1)


def test_a_cell_left_without_evidence_is_measured_again_alone_and_judged_at_a_stricter_level(
    tmp_path, monkeypatch
):
    """The gate's paired comparison looks twice: a cell whose interval reaches past the
    threshold after the gate's processes is measured in as many more processes, alone (the
    runner's ``--only``), and judged on all its rounds at the stricter interval of a second
    look; a cell that passed at the first look is not measured again. Before, the cell stayed
    inconclusive and the gate blocked an A/A pull request."""
    import contextlib

    from ragbench.verdicts.status import Status

    noisy, quiet = {"backend": "padded_sdpa"}, {"backend": "triton"}

    def doc(i, params_list, spread):
        cells = []
        for n, params in enumerate(params_list):
            s = spread if params is noisy else 0.01
            rng = random.Random(100 * i + n)
            values = {arm: [20 * (1 + rng.gauss(0, s)) for _ in range(40)]
                      for arm in ("base", "aa", "head")}  # fmt: skip
            cells.append({"benchmark": "kernel.KernelLatency", "metric": "host_us", "unit": "us",
                          "params": params, "values": values, "errors": {}})  # fmt: skip
        return {"errors": {}, "cells": cells}

    calls = []

    def fake_measure(base, head, work, *, processes, mode, log, only=None, first=0):
        calls.append((only, first, processes))
        if only is None:  # the first look: the noisy cell's interval is too wide
            return paired.TOGETHER, [doc(i, [noisy, quiet], 0.1) for i in range(processes)]
        return paired.TOGETHER, [doc(i, [noisy], 0.015) for i in range(first, first + processes)]

    monkeypatch.setattr(paired, "measure", fake_measure)
    monkeypatch.setattr(git, "worktree", lambda sha, work: contextlib.nullcontext(tmp_path))
    keys = [("kernel.KernelLatency", "host_us", f"backend={p['backend']}") for p in (noisy, quiet)]
    first_look = [compare.Verdict(k, {}, "us", POLICIES.for_metric(*k[:2]), Status.INFO)
                  for k in keys]  # fmt: skip
    sha = git_head = git.commit("HEAD")
    res = gate.GateResult(sha, git_head, "m1", compare.Comparison(first_look), True, 2)
    gate._paired(res, POLICIES, processes=3, mode="quick", work=tmp_path, log=lambda m: None)
    assert calls == [(None, 0, 3), (paired.only_of([keys[0]]), 3, 3)]
    assert paired.only_of([keys[0]]) == r"^kernel\.KernelLatency backend=padded_sdpa$"
    v = {v.key: v for v in res.comparison.verdicts}
    assert v[keys[0]].status == "unchanged" and "240 rounds in 6 process(es)" in v[keys[0]].note
    assert "97.5% interval" in v[keys[0]].note, v[keys[0]].note
    assert v[keys[1]].status == "unchanged" and "120 rounds in 3 process(es)" in v[keys[1]].note
    assert res.paired_again == 1


def test_the_second_look_never_passes_a_real_loss():
    """A head 5% slower whose first look was inconclusive stays a regression or inconclusive
    at the second look, whatever the noise (seeds), and the A/A arm still widens it."""

    def docs(rng, n):
        return [_doc([20 * (1 + rng.gauss(0, 0.08)) for _ in range(40)],
                     [21 * (1 + rng.gauss(0, 0.08)) for _ in range(40)],
                     [20 * (1 + rng.gauss(0, 0.08)) for _ in range(40)])
                for _ in range(n)]  # fmt: skip

    for seed in range(10):
        rng = random.Random(seed)
        first, more = docs(rng, 3), docs(rng, 3)
        (v,) = paired.second_look(first, more, [_judge(first).key], POLICIES, 3)
        assert v.status in ("regression", "inconclusive"), v.note
