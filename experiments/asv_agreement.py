"""The gate's verdicts against ``asv compare``'s, cell by cell, on pairs of commits of a public
asv project's results (django/django-asv, MIT).

For each pair (machine, environment, base, head): the two result files are ingested into a
store (only that environment's, so that no run of another Python is pooled in), judged by
``ragbench gate --stored`` (``gate.run_gate`` with the default policies, or ``--policies``),
and compared by asv itself (``asv compare --factor 1.1``, asv's default, run on a copy of the
project's asv.conf.json whose ``results_dir`` is the data's). asv needs the project's git
repository only to name the commits: an empty one stands in (nothing here reaches GitHub).
Prints one table per pair, side by side, and how often the two agree.

    git clone https://github.com/django/django-asv   # its results/ and asv.conf.json
    .venv/bin/python -m experiments.asv_agreement --data django-asv --store django.duckdb \\
        --work asv-work
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from ragbench.gate.gating import run_gate
from ragbench.policies import load_policies
from ragbench.result_files import ingest
from ragbench.store import Store
from ragbench.verdicts import comparison as compare
from ragbench.verdicts.status import FAILING, Status

# (machine, environment, base, head): commits by their 8-digit prefix, as asv names the files.
PAIRS = (
    # consecutive commits, quiet: asv sees no change beyond 10% (10 raw samples a cell)
    ("ubuntu-latest", "conda-py3.12", "5f30fd23", "98767ba2"),
    # around a real change: 35 cells slower, lasting (the next 8 commits stay there)
    ("ubuntu-latest", "conda-py3.12", "2cace96b", "c9eb16a8"),
    # consecutive commits without raw samples: asv's 99% intervals only
    ("macos-12", "virtualenv-py3.10", "c2f6c05c", "e703b152"),
)
# asv compare's marks (asv/commands/compare.py)
ASV = {"+": "worse", "-": "better", " ": "no change", "~": "not significant", "x": "version",
       "!": "failed", "*": "fixed"}  # fmt: skip


def asv_config(data: Path, work: Path) -> Path:
    """A copy of the project's asv.conf.json reading the data's results, with an empty git
    repository in place of the project's."""
    repo = work / "repo"
    if not (repo / ".git").exists():
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=asv", "-c", "user.email=asv@x",
                        "commit", "-q", "--allow-empty", "-m", "empty"], check=True)  # fmt: skip
    conf = json.loads((data / "asv.conf.json").read_text())
    conf.update(results_dir=str(data / "results"), repo=str(repo), env_dir=str(work / "env"),
                html_dir=str(work / "html"))  # fmt: skip
    path = work / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def result_file(data: Path, machine: str, env: str, prefix: str) -> Path:
    path = data / "results" / machine / f"{prefix}-{env}.json"
    if not path.is_file():
        sys.exit(f"asv_agreement: no result file {path}")
    return path


def asv_compare(asv: Path, conf: Path, machine: str, env: str, base: str,
                head: str) -> dict[str, tuple[str, str]]:  # fmt: skip
    """asv compare's verdict per benchmark: (mark, ratio as asv prints it)."""
    out = subprocess.run([str(asv), "compare", "--config", str(conf), "--machine", machine,
                          "-E", env, "--factor", "1.1", base, head],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    marks = {}
    for line in out.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 5 and cols[4] and not cols[4].startswith(("Benchmark", "-")):
            mark = cols[0] or ("~" if cols[3].startswith("~") else " ")
            marks[cols[4]] = (mark, cols[3])
    return marks


def agree(mark: str, v: compare.Verdict) -> str:
    """yes: the same call; stricter: the gate has no evidence where asv saw no change (or no
    significant one); no: one fails or improves where the other does not."""
    gate_fails = v.status in FAILING
    if mark == "+":
        return "yes" if gate_fails else "no"
    if mark == "-":
        return "yes" if v.status == Status.IMPROVEMENT else "no"
    if gate_fails or v.status == Status.IMPROVEMENT:
        return "no"
    return "stricter" if v.status == Status.INCONCLUSIVE else "yes"


def compare_pair(store: Store, data: Path, asv: Path, conf: Path, policies, pair) -> Counter:
    machine, env, base, head = pair
    files = [result_file(data, machine, env, c) for c in (base, head)]
    report = ingest(store, files)
    if report.failed:
        sys.exit(f"asv_agreement: {report.failed[0][0]}: {report.failed[0][1]}")
    full = [json.loads(f.read_text())["commit_hash"] for f in files]
    res = run_gate(store, full[0], full[1], policies=policies, machine=machine, measure=False,
                   paired_processes=0, drift_check=False, log=lambda m: None)  # fmt: skip
    marks = asv_compare(asv, conf, machine, env, *full)
    c = res.comparison
    print(f"\n### {machine} {env}: {base} -> {head}: gate {c.headline.upper()}, "
          f"{len(c.verdicts)} cells\n")  # fmt: skip
    print("| cell | base | head | ratio | asv compare | gate | by | agree |")
    print("|---|---|---|---|---|---|---|---|")
    tally = Counter()
    for v in sorted(c.verdicts, key=lambda v: v.key):
        name = f"{v.key[0]}.{v.key[1]}" + (f"({v.key[2]})" if v.key[2] else "")
        mark, ratio = marks.get(name, ("?", "-"))
        verdict = agree(mark, v) if mark != "?" else "not in asv's table"
        tally[(ASV.get(mark, mark), str(v.status))] += 1
        tally[verdict] += 1
        by = "samples" if v.p is not None else v.method
        print(f"| {name.rsplit('.', 1)[-1]} | {v.base:.4g} | {v.head:.4g} | {ratio} | "
              f"{ASV.get(mark, mark)} | {v.status} | {by} | {verdict} |")  # fmt: skip
    print("\n| asv compare | gate | cells |\n|---|---|---|")
    for (a, g), n in sorted((k, n) for k, n in tally.items() if isinstance(k, tuple)):
        print(f"| {a} | {g} | {n} |")
    print(f"\nAgree: {tally['yes']}, gate stricter (inconclusive where asv saw no change): "
          f"{tally['stricter']}, disagree: {tally['no']} of {len(c.verdicts)}.")  # fmt: skip
    return tally


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="the asv project (asv.conf.json, "
                   "results/)")  # fmt: skip
    p.add_argument("--store", type=Path, required=True, help="store to ingest the pairs into")
    p.add_argument("--work", type=Path, required=True, help="for the asv config copy")
    p.add_argument("--asv", type=Path, default=Path(sys.executable).with_name("asv"))
    p.add_argument("--policies", type=Path, default=None)
    p.add_argument(
        "--pair",
        nargs=4,
        action="append",
        metavar=("MACHINE", "ENV", "BASE", "HEAD"),
        help="a pair of commits (8-digit prefixes); default: the three above",
    )
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    conf = asv_config(args.data, args.work)
    policies = load_policies(args.policies)
    total = Counter()
    with Store(args.store) as store:
        for pair in args.pair or PAIRS:
            total += compare_pair(store, args.data, args.asv, conf, policies, pair)
    print(f"\nAll pairs: agree {total['yes']}, gate stricter {total['stricter']}, disagree "
          f"{total['no']}.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
