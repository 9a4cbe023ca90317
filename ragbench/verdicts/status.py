"""What a verdict can say, and the gate's JSON document, in one place.

``Status`` is every word a cell's verdict (``compare``, ``paired``) or a series' latest point
(``history.history``) can carry; ``Headline`` the gate's pass / fail / inconclusive. Both are
``StrEnum``: a member equals its word, so the store, the JSON and the reports keep the words,
and a misspelt status is an AttributeError instead of a comparison that never matches.

The gate's JSON (``ragbench gate --json``, read by ``ragbench verdict`` in the trusted job
that never runs the pull request's code) is written by ``gate_document`` and read back by
``read_gate_document``, which checks every field: schema ``JSON_SCHEMA``. Its ``digest`` (of
the ``canonical`` text) is how a store names the document a gate recorded (``ragbench gate
--settle`` continues only a recorded one).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from enum import StrEnum
from pathlib import Path

from .. import jsonfile


class Status(StrEnum):
    REGRESSION = "regression"  # worse beyond the metric's threshold, and significant
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"
    VIOLATION = "violation"
    DRIFT = "drift"  # an output moved from base's beyond run-to-run noise (ragbench.gate.drift)
    PRE_EXISTING = "pre-existing"
    FAILED = "failed"
    MISSING = "missing"
    NEW = "new"
    HASH_CHANGED = "hash-changed"
    ACCEPTED = "accepted"
    SHORT = "short"
    ENV_CHANGE = "env-change"
    STALE = "stale"  # main's history: the series' last point is older than the machine's run
    SETTINGS = "settings-changed"  # main's history: the newest run was timed otherwise
    INFO = "info"


# What each word means, where a page or a report shows it.
MEANING = {
    Status.REGRESSION: "worse beyond the metric's threshold, and significant",
    Status.IMPROVEMENT: "better beyond the threshold, and significant",
    Status.UNCHANGED: "not worse: shown with the power to see the threshold, or the interval "
    "of head/base under the threshold at its worse end",
    Status.INCONCLUSIVE: "no evidence either way (too few or too noisy samples): no pass",
    Status.VIOLATION: "a deterministic bound (drift, kernel error) broken on head",
    Status.DRIFT: "an output differs from base's on the same inputs beyond what base gives run "
    "to run (on a deterministic path: any difference)",
    Status.PRE_EXISTING: "the bound was broken on base too",
    Status.FAILED: "the benchmark raised on head",
    Status.MISSING: "base has a value, head none (NaN, skipped or gone)",
    Status.NEW: "head has a value, base none: not counted",
    Status.HASH_CHANGED: "the output hash changed: reported, never a failure",
    Status.ACCEPTED: "a maintainer accepted this change: the new baseline",
    Status.SHORT: "too few earlier runs in this environment to judge",
    Status.ENV_CHANGE: "the environment changed (what its runs record: the Python, packages, "
    "GPU or driver): judged from the new one",
    Status.SETTINGS: "the harness timed the newest run otherwise (asv's number or repeat, "
    "pytest-benchmark's iterations or rounds, by 2x or more): a measurement setting changed, "
    "not the code; listed apart",
    Status.STALE: "the series' last point is older than its machine's newest run (a dropped "
    "environment or cell): not judged",
    Status.INFO: "recorded and shown, never judged (not calibrated)",
}

# Verdicts that fail a gate: slower or worse beyond the threshold, a bound broken, an output
# that drifted from base's, a cell that failed on head, or one that base has and head does not
# (NaN, skipped, or gone).
FAILING = (Status.REGRESSION, Status.VIOLATION, Status.DRIFT, Status.FAILED, Status.MISSING)


class Headline(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"  # a cell without evidence, or nothing judged: no pass


# Units of time: a change of one reads "slower" or "faster".
TIME_UNITS = ("ns", "us", "ms", "s", "seconds")


def worded(change: float | None, unit: str | None, lower_better: bool = True) -> str:
    """A verdict's ``change`` (in the bad direction: +0.05 is 5% slower, or 5% less throughput
    per unit of it) in words by its direction: ``3.7% slower``, ``2.0% faster``, ``5.0% fewer
    img/s``, ``1.2% more img/s``, ``4.0% more bytes (worse)``, ``4.0% higher (worse)`` (no
    unit); ``-`` where there is none."""
    if change is None or math.isnan(change):
        return "-"
    if math.isinf(change):  # a rate down to 0, or anything up from a base of 0
        return "-" if change < 0 else "from a base of 0" if lower_better else "all of it lost"
    ratio = 1 + change if lower_better else 1 / (1 + change)  # head / base
    pct = f"{abs(ratio - 1) * 100:.1f}%"
    up = ratio > 1
    if pct == "0.0%":
        return "no change"
    if lower_better and unit in TIME_UNITS:
        return f"{pct} {'slower' if up else 'faster'}"
    if not lower_better:  # a rate: more of it is better
        return f"{pct} {'more' if up else 'fewer'} {unit or 'per second'}"
    better = "(worse)" if up else "(better)"
    return (
        f"{pct} {'more' if up else 'less'} {unit} {better}"
        if unit
        else f"{pct} {'higher' if up else 'lower'} {better}"
    )


def verdict_words(v) -> str:
    """A verdict's change in words (``worded``): its policy's kind says which way is better."""
    return worded(v.change, v.unit, v.policy.kind != "throughput")


# --- the gate's JSON -------------------------------------------------------------------------

JSON_SCHEMA = 2  # of gate_document's document; read_gate_document refuses any other
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
# a machine's name as a host name or RAGBENCH_MACHINE gives one: what the trusted comment's
# settle command may name (never a space, a backtick, markup or a line break)
MACHINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")


MODES = ("quick", "full")  # the suite's modes (``ragbench.asv_run``), a gate's ``mode``
GATE_FIELDS = {"rounds": (1, 1000), "processes": (0, 1000)}  # a gate's counts, when given


def canonical(doc: dict) -> str:
    """``doc`` as one canonical JSON text (keys sorted, no spaces): what its digest is of, so
    that the file a gate wrote (indented) and the same document parsed again hash alike."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def digest(doc: dict) -> str:
    """The sha256 (hex) of ``canonical(doc)``: a gate's document as its store recorded it."""
    return hashlib.sha256(canonical(doc).encode()).hexdigest()


class VerdictError(ValueError):
    """The gate's output cannot be judged: missing, malformed, or of another commit."""


# What keeps a run from passing, cell by cell: a failure, or a cell without evidence (a
# maintainer may accept it like a regression, or measure it again).
BLOCKING = (*FAILING, Status.INCONCLUSIVE)


# The cell a run that judged nothing names, so that its verdict keeps a cell to show (and
# to accept) wherever failures are read.
NOTHING_JUDGED = ("ragbench.gate", "judged_cells", "")


def nothing_judged(comparison) -> str:
    """Why a comparison judged no cell, in words: its policies gate none of its cells (every
    one ``info``), or no gated cell has a value on both sides (base and head share none)."""
    gated = sum(v.policy.kind != "info" for v in comparison.verdicts)
    if not gated:
        return f"the policies gate none of the {len(comparison.verdicts)} cell(s)"
    return f"none of the {gated} cell(s) the policies gate has values to judge on both sides"


def gate_document(base: str, head: str, machine: str, comparison, **gate) -> dict:
    """The gate's verdict on ``comparison`` (a ``compare.Comparison``): pass, fail or
    inconclusive, and every cell that keeps it from passing (``NOTHING_JUDGED`` when none was
    judged at all); ``gate``: how it measured (``mode``, ``rounds``, ``processes``)."""
    blocking = [
        {"benchmark": v.key[0], "metric": v.key[1], "param_key": v.key[2],
         "status": str(v.status), "change": v.change,
         "words": verdict_words(v), "note": v.note}
        for v in comparison.by_status(*BLOCKING)
    ]  # fmt: skip
    if not blocking and comparison.headline != Headline.PASS:  # nothing was judged
        bench, metric, key = NOTHING_JUDGED
        blocking.append({"benchmark": bench, "metric": metric, "param_key": key,
                         "status": str(Status.INCONCLUSIVE), "change": None,
                         "note": f"no cell was judged: {nothing_judged(comparison)}"})  # fmt: skip
    return {
        "schema": JSON_SCHEMA,
        "base": base,
        "head": head,
        "machine": machine,
        "verdict": str(comparison.headline),
        "failures": blocking,
        **gate,
    }


def read_gate_document(path: Path, head: str) -> dict:
    """The gate's JSON for ``head``, every field checked; VerdictError saying what is off."""
    try:
        doc = jsonfile.read(path, limit=8 * 2**20)
    except ValueError as exc:
        raise VerdictError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != JSON_SCHEMA:
        raise VerdictError(f"{path}: not the gate's JSON (schema {JSON_SCHEMA})")
    if doc.get("head") != head:
        raise VerdictError(f"{path} is for head {str(doc.get('head'))[:40]!r}, not {head}")
    if not isinstance(doc.get("base"), str) or not _SHA.fullmatch(doc["base"]):
        raise VerdictError(f"{path}: base {str(doc.get('base'))[:40]!r} is not a commit hash")
    if not isinstance(doc.get("machine"), str) or not MACHINE.fullmatch(doc["machine"]):
        raise VerdictError(f"{path}: machine {str(doc.get('machine'))[:40]!r} is not a machine's "
                           "name (letters, digits and ._@+-)")  # fmt: skip
    failures = doc.get("failures")
    if doc.get("verdict") not in tuple(Headline) or not isinstance(failures, list):
        raise VerdictError(f"{path}: no verdict and list of failures")
    for f in failures:
        if not (isinstance(f, dict) and f.get("status") in BLOCKING
                and all(isinstance(f.get(k), str) and f[k] for k in ("benchmark", "metric"))
                and isinstance(f.get("param_key"), str)):  # fmt: skip
            raise VerdictError(f"{path}: malformed failure {str(f)[:120]}")
    if (doc["verdict"] != Headline.PASS) != bool(failures):
        raise VerdictError(f"{path}: verdict {doc['verdict']!r} with {len(failures)} failure(s)")
    for name, (lo, hi) in GATE_FIELDS.items():
        n = doc.get(name, lo)
        if isinstance(n, bool) or not isinstance(n, int) or not lo <= n <= hi:
            raise VerdictError(f"{path}: {name} {str(n)[:20]!r} is not a count of {lo}-{hi}")
    if doc.get("mode", MODES[0]) not in MODES:
        raise VerdictError(f"{path}: mode {str(doc.get('mode'))[:20]!r} is not one of {MODES}")
    return doc
