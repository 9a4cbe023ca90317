"""The stored runs a gate compares: of one environment (like with like), the cells whose
measurement settings moved between base and head, and what else differs besides the code."""

from __future__ import annotations

import shlex

from ..store import Store, timing
from ..verdicts.comparison import Comparison, Key
from ..verdicts.status import Status, verdict_words
from .errors import GateError


def own_runs(runs: list[dict]) -> bool:
    """Whether stored runs are this suite's (their environment is their fingerprint's), whose
    outputs ``ragbench.gate.drift`` can compare; another project's results (asv's env_name) are
    not."""
    return not any(r.get("environment") for r in runs)


def settings_moved(store: Store, comparison: Comparison, base_ids: list[str],
                   head_ids: list[str]) -> dict[Key, str]:  # fmt: skip
    """The cells whose measurement settings moved between base's and head's runs (asv's
    ``number`` 86787 on base, 1 on head: ``ragbench.store.timing``): each judged inconclusive, its
    note saying which, never a regression or a pass of the code. -> key -> the settings."""

    def settings(ids: list[str]) -> dict[Key, dict]:
        out: dict[Key, list[dict]] = {}
        for r in store.measurements(ids):
            key = (r["benchmark"], r["metric"], r["param_key"])
            out.setdefault(key, []).append(
                timing.of(r["source"], r["stats_number"], r["stats_repeat"], r["version"])
            )
        return {k: timing.typical(v) for k, v in out.items()}

    judged = (Status.REGRESSION, Status.IMPROVEMENT, Status.UNCHANGED, Status.INCONCLUSIVE)
    base, head = settings(base_ids), settings(head_ids)
    moved = {}
    for v in comparison.verdicts:
        if v.status not in judged or v.base is None or v.head is None:
            continue
        words = timing.changed(base.get(v.key), head.get(v.key), v.base, v.head)
        if words:
            moved[v.key] = words
            v.status = Status.INCONCLUSIVE
            v.note = (f"{timing.words(words)}: {verdict_words(v)} is not the code's change; "
                      "measure both with the same settings")  # fmt: skip
    return moved


def environment_of(run: dict) -> str:
    """A stored run's environment as ``--environment`` names it: another harness's
    (``environment``: asv's env_name ...), else this suite's ``env_key``."""
    return run.get("environment") or run["env_key"]


def _described(runs: list[dict]) -> str:
    """The environments of ``runs`` in words: this suite's with what its key hashes."""
    words = set()
    for r in runs:
        fields = ", ".join(f"{k} {r[k]}" for k in ("gpu", "torch", "triton", "python") if r.get(k))
        own = r.get("environment") is None and fields
        words.add(f"{environment_of(r)} ({fields})" if own else environment_of(r))
    return ", ".join(sorted(words))


def like_with_like(base_runs: list[dict], head_runs: list[dict], *, environment: str | None,
                    across: bool, command: str) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """Base's and head's stored runs of one environment: those of ``environment`` where it
    is given (an environment's name or an ``env_key``), else all of them where they share one.
    GateError, one line with the command that compares like with like, where they span
    several and ``across`` (``--across-environments``) is not given: a Python 3.8 run against a
    3.10 one, or two Pythons' samples pooled, reads as a change of the code."""
    if environment is not None:

        def chosen(runs):
            return [r for r in runs
                    if environment in (r.get("environment"), r["env_key"])]  # fmt: skip

        picked = chosen(base_runs), chosen(head_runs)
        for side, runs, kept in (("base", base_runs, picked[0]), ("head", head_runs, picked[1])):
            if not kept:
                raise GateError(f"{side} has no run in environment {environment!r} (its "
                                f"environments: {_described(runs)})")  # fmt: skip
        return picked
    envs = [sorted({environment_of(r) for r in runs}) for runs in (base_runs, head_runs)]
    keys = {r["env_key"] for r in base_runs + head_runs}
    if len(keys) <= 1 or across:
        return base_runs, head_runs
    common = [e for e in envs[1] if e in envs[0]]
    if common:
        fix = (f"compare one: {command} --environment {shlex.quote(common[-1])} (in common: "
               f"{', '.join(common)}), or pool them: --across-environments")  # fmt: skip
    else:
        fix = f"no environment in common; to compare them anyway: {command} --across-environments"
    raise GateError(f"base ran in {_described(base_runs)} and head in {_described(head_runs)}: "
                    f"different environments are not compared; {fix}")  # fmt: skip


def differences(base_runs: list[dict], head_runs: list[dict]) -> list[str]:
    """What differs between base's and head's runs besides the code, in words: the runners a
    ``[machines]`` mapping made one machine, the Pythons (``--across-environments``)."""
    lines = []
    for what, col in (("runner", "runner"), ("Python", "python"), ("environment", "environment")):
        b = sorted({str(r.get(col)) for r in base_runs if r.get(col)})
        h = sorted({str(r.get(col)) for r in head_runs if r.get(col)})
        if b and h and b != h:
            lines.append(f"Base ran on {what} {', '.join(b)}, head on {', '.join(h)}.")
    return lines
