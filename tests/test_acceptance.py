"""Acceptances from facts, not text (issue 34): a main commit gets the acceptances of the pull
request that GitHub's commit -> pull request association says merged it, never of one its
subject names; an acceptance covers only cells the trusted verdict recorded failing, and at
most ``[gate] max_accepted`` of them.

``ragbench record`` runs here in this process with the suite stood in for (a synthetic asv
result file for each commit, through the real ingest): what is under test is which
acceptances reach main, not the measurement.
"""

from __future__ import annotations

import json

import pytest
from conftest import REPO, commit, new_repo
from test_faults import assert_clean_exit, ragbench

from ragbench import asv_run, cli, pr, synth
from ragbench.github import Client
from ragbench.store import Store
from ragbench.verdicts.status import JSON_SCHEMA
from scripts.fake_github import FakeGitHub, pull
from scripts.workflow_runner import load_workflow

TOKEN = "t0ken"
H7, H9 = "7" * 40, "9" * 40  # the heads of pull requests 7 and 9 when they were accepted


def cell(i: int) -> dict:
    return {"benchmark": "kernel.KernelLatency", "metric": "gpu_us",
            "param_key": f"backend=triton,batch={i}", "status": "regression", "change": 0.1,
            "note": ""}  # fmt: skip


def key(f: dict) -> tuple[str, str, str]:
    return f["benchmark"], f["metric"], f["param_key"]


def accepted(store: Store, pr_number: int, head: str, failures: list[dict]) -> None:
    """What the trusted jobs leave for ``pr_number`` at ``head``: its verdict, then a
    maintainer's acceptance of its failures."""
    store.record_gate(pr_number, head, "b" * 40, "m", failures)
    store.accept_cells(head, [key(f) for f in failures], f"label on PR #{pr_number}",
                       "maintainer", pr=pr_number)  # fmt: skip


@pytest.fixture
def main_line(tmp_path, monkeypatch):
    """A main branch with c0, then a squash commit titled "Fix typo (#7)"; ``asv_run.run``
    writes a synthetic result file for the commit it is given. -> (c0, squash commit)."""
    repo = new_repo(tmp_path / "repo")
    c0 = commit(repo, "a.txt", "0\n", "c0")
    squash = commit(repo, "a.txt", "1\n", "Fix typo (#7)")
    monkeypatch.setattr("ragbench.git.REPO", repo)
    synthetic = synth.write_history(tmp_path / "synth", 1)
    (made,) = (synthetic / synth.MACHINE).glob("*.json")

    def run(revs, *, results_dir, **_):
        (sha,) = revs
        out = results_dir / synth.MACHINE / f"{sha[:8]}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(made.read_text().replace(synth.commit(0), sha))
        fp = made.with_suffix(".fingerprint").read_text().replace(synth.commit(0), sha)
        out.with_suffix(".fingerprint").write_text(fp)
        return [{"commit": sha, "result": str(out), "asv_exit": 0}]

    monkeypatch.setattr(asv_run, "run", run)
    for var in ("GITHUB_TOKEN", "GITHUB_API_URL", "GITHUB_REPOSITORY", "RAGBENCH_BRANCH"):
        monkeypatch.delenv(var, raising=False)
    return c0, squash


def record(tmp_path, c0: str, after: str) -> int:
    return cli.main(["record", "--store", str(tmp_path / "s.duckdb"), "--before", c0,
                     "--after", after, "--machine", synth.MACHINE, "--results",
                     str(tmp_path / "asv")])  # fmt: skip


def github_env(monkeypatch, gh: FakeGitHub) -> None:
    for var, value in (("GITHUB_TOKEN", TOKEN), ("GITHUB_API_URL", gh.url),
                       ("GITHUB_REPOSITORY", "o/r")):  # fmt: skip
        monkeypatch.setenv(var, value)


def test_a_squash_title_naming_another_pr_carries_nothing_of_it(tmp_path, monkeypatch, capsys,
                                                                main_line):  # fmt: skip
    """A squash merge of PR 9 titled "Fix typo (#7)": PR 9's acceptance reaches main, PR 7's
    does not."""
    c0, squash = main_line
    store = Store(tmp_path / "s.duckdb")
    accepted(store, 7, H7, [cell(1)])
    accepted(store, 9, H9, [cell(2)])
    with FakeGitHub(TOKEN) as gh:
        gh.pulls[squash] = [pull(9, head=H9, merge_commit_sha=squash)]
        github_env(monkeypatch, gh)
        assert record(tmp_path, c0, squash) == 0
        asked = f"GET /repos/o/r/commits/{squash}/pulls?per_page=100&page=1"
    assert [key(a) for a in store.acceptances(squash)] == [key(cell(2))]
    assert store.acceptances(squash)[0]["pr"] == 9 and asked in gh.requests
    err = capsys.readouterr().err
    assert "merged pull request(s) per GitHub: #9; 1 accepted cell(s) carried" in err


def test_a_commit_no_pull_request_merged_carries_nothing(tmp_path, monkeypatch, capsys,
                                                         main_line):  # fmt: skip
    """GitHub associates no pull request with the commit, or there is no GitHub at all: its
    "(#7)" carries nothing either way, and the log says why."""
    c0, squash = main_line
    store = Store(tmp_path / "s.duckdb")
    accepted(store, 7, H7, [cell(1)])
    assert record(tmp_path, c0, squash) == 0  # no token: a local run, `make demo`
    assert not store.acceptances(squash)
    err = capsys.readouterr().err
    assert "no GitHub access ($GITHUB_TOKEN unset): no pull request's acceptance" in err
    assert "acceptances of merged pull requests: no GitHub access" in err
    with FakeGitHub(TOKEN) as gh:  # the commit is stored now: a re-run asks GitHub again
        github_env(monkeypatch, gh)
        assert record(tmp_path, c0, squash) == 0
        assert any(f"/commits/{squash}/pulls" in r for r in gh.requests)
    assert not store.acceptances(squash)
    assert "merged pull request(s) per GitHub: none; 0 accepted" in capsys.readouterr().err


def test_github_unreachable_carries_nothing_and_exits_2(tmp_path, monkeypatch, capsys,
                                                        main_line):  # fmt: skip
    c0, squash = main_line
    store = Store(tmp_path / "s.duckdb")
    accepted(store, 9, H9, [cell(2)])
    with FakeGitHub(TOKEN) as gh:
        gh.server_errors = 10
        github_env(monkeypatch, gh)
        monkeypatch.setenv("RAGBENCH_GITHUB_ATTEMPTS", "1")
        assert record(tmp_path, c0, squash) == 2
    assert not store.acceptances(squash)
    assert [r["commit_hash"] for r in store.runs()] == [squash]  # the measurement is kept
    assert "its acceptances are not carried: re-run the job" in capsys.readouterr().err


@pytest.mark.parametrize("why", ["open", "another merge commit", "another base", "not merged"])
def test_only_a_pull_request_merged_into_main_as_this_commit_counts(why):
    sha, other = "5" * 40, "6" * 40
    answer = {
        "open": pull(3, head=H7, merge_commit_sha=None, merged=False),
        "another merge commit": pull(3, head=H7, merge_commit_sha=other),  # a rebase's earlier
        "another base": pull(3, head=H7, merge_commit_sha=sha, base="release"),
        "not merged": {**pull(3, head=H7, merge_commit_sha=sha), "merged_at": None},
    }[why]
    with FakeGitHub(TOKEN) as gh:
        gh.pulls[sha] = [answer, pull(4, head=H9, merge_commit_sha=sha)]
        client = Client("o/r", TOKEN, gh.url)
        assert pr.merged_pulls(client, sha, "main") == [(4, H9)]


def test_an_acceptance_covers_only_cells_the_trusted_verdict_recorded_failing(
    tmp_path, monkeypatch, main_line
):
    """PR 9 was accepted on cell 1; its gate was re-run at the same head and the verdict now
    records cell 2 failing: cell 1's acceptance neither passes the verdict nor reaches main."""
    _, before = main_line
    merge = commit(tmp_path / "repo", "a.txt", "2\n", "Speed up the kernel (#9)")
    store = Store(tmp_path / "s.duckdb")
    accepted(store, 9, H9, [cell(1)])
    store.record_gate(9, H9, "b" * 40, "m", [cell(2)])  # the re-run's verdict
    with FakeGitHub(TOKEN) as gh:
        gh.pulls[merge] = [pull(9, head=H9, merge_commit_sha=merge)]
        github_env(monkeypatch, gh)
        assert record(tmp_path, before, merge) == 0
    assert not store.acceptances(merge)
    j = pr.judge(store.gate(9, H9)["failures"], pr.accepted_on(store, 9, H9))
    assert (j.state, j.accepted, j.description) == ("failure", 0, "1 failing cell(s), not accepted")


def gate_json(path, head: str, failures: list[dict]) -> None:
    doc = {"schema": JSON_SCHEMA, "base": "b" * 40, "head": head, "machine": "m",
           "verdict": "fail", "failures": failures}  # fmt: skip
    path.write_text(json.dumps(doc))


def test_one_label_accepts_at_most_max_accepted_cells(tmp_path):
    """A gate's JSON listing 5,000 failing cells: the label is refused (exit 2, one line saying
    what to do), nothing is recorded, the comment says so; 40 cells (the limit) are accepted
    and the comment says how many and by whom."""
    limit = 40  # ragbench/policies.toml's (checked at the end)
    store = tmp_path / "s.duckdb"
    many, few = "a" * 40, "c" * 40
    gate = tmp_path / "gate.json"
    with FakeGitHub(TOKEN) as gh:
        gh.permissions["maintainer"] = "write"
        env = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "o/r",
               "GITHUB_SERVER_URL": "https://github.example", "GITHUB_RUN_ID": "77"}  # fmt: skip
        gate_json(gate, many, [cell(i) for i in range(5000)])
        common = ["--store", store, "--pr", 4, "--head", many]
        assert_clean_exit(ragbench("verdict", *common, "--gate-json", gate, "--github", env=env),
                          1, "5000 failing cell(s), not accepted")  # fmt: skip
        out = ragbench("accept", *common, "--user", "maintainer", env=env)
        assert_clean_exit(
            out,
            2,
            "has 5000 failing cells, more than the 40",
            "fix the regressions, split the pull request, or raise max_accepted",
        )
        assert [ln for ln in out.stderr.splitlines() if "error" in ln] == [
            out.stderr.splitlines()[-1]]  # fmt: skip
        assert not Store(store, read_only=True).acceptances()
        comment = gh.comments[4][-1]["body"]
        assert "more than the 40 one acceptance may cover" in comment
        assert "label by maintainer was refused" in comment
        assert gh.statuses[many][-1]["state"] == "failure"

        gate_json(gate, few, [cell(i) for i in range(limit)])
        common = ["--store", store, "--pr", 5, "--head", few]
        assert_clean_exit(ragbench("verdict", *common, "--gate-json", gate, "--github", env=env),
                          1)  # fmt: skip
        out = ragbench("accept", *common, "--user", "maintainer", env=env)
        assert_clean_exit(
            out,
            0,
            "now SUCCESS: 40 failing cell(s) accepted by maintainer",
            "maintainer (write) accepted 40 failing cell(s) of PR #5",
        )
        assert len(Store(store, read_only=True).acceptances(few)) == limit
        comment = gh.comments[5][-1]["body"]
        assert "Accepted: 40 of 40 failing cell(s), by maintainer" in comment
        # the comment ends with the run's logs and artifact; a base no --base-sha checked is
        # named in no command (tests/test_pr_comment.py has the commands of a checked one)
        last = comment.rstrip().splitlines()[-1]
        assert last == ("Logs and the `ragbench-gate` artifact (gate.md, gate.json): "
                        "https://github.example/o/r/actions/runs/77"), last  # fmt: skip
        assert "ragbench gate --base" not in comment
        assert gh.statuses[few][-1]["state"] == "success"
    assert pr.max_accepted() == limit


def test_bench_main_gives_record_a_read_only_token_in_its_step_only():
    """Without it, main would get no acceptance at all (record carries none with no token)."""
    flow = load_workflow(REPO / ".github" / "workflows" / "bench-main.yml")
    assert flow["permissions"] == {"contents": "read", "pull-requests": "read"}
    (job,) = flow["jobs"].values()
    holding = [s.get("run") for s in job["steps"] if "GITHUB_TOKEN" in str(s)]
    assert holding == ["make bench-main"]
    assert "GITHUB_TOKEN" not in str(job.get("env"))


def test_acceptances_of_successive_verdicts_of_one_head_never_add_up(tmp_path):
    """The gate re-run at one head: cells 0-19 failed and were accepted, then cells 20-39 failed
    and were accepted; a verdict listing all 40 is not passed by the two labels together."""
    store = Store(tmp_path / "s.duckdb")
    gate = tmp_path / "gate.json"
    args = {"gate_json": gate, "report": None, "pr": 9, "head": H9, "machine": None,
            "log": lambda msg: None}  # fmt: skip
    with FakeGitHub(TOKEN) as gh:
        gh.permissions["maintainer"] = "write"
        client = Client("o/r", TOKEN, gh.url)
        first, second = [cell(i) for i in range(20)], [cell(i) for i in range(20, 40)]
        for failures in (first, second):
            gate_json(gate, H9, failures)
            assert pr.verdict(store, client, **args).state == "failure"
            j = pr.accept(store, client, pr=9, head=H9, user="maintainer", log=args["log"])
            assert j.state == "success"
        gate_json(gate, H9, first + second)
        j = pr.verdict(store, client, **args)
    assert j.state == "failure" and j.description == (
        "20 failing cell(s), not accepted (20 accepted by maintainer)"
    )
    assert {key(a) for a in store.acceptances(H9)} == {key(f) for f in second}
