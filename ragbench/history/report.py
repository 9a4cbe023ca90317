"""Main's history as markdown (``ragbench detect``): the flagged series, the change points and
whether a measurement setting moved there."""

from __future__ import annotations

from ..markdown import number, percent
from ..verdicts.status import Status
from .series import SeriesReport


def _series(r: SeriesReport) -> str:
    """A series' name: its cell, and its environment where another harness defines one."""
    name = f"`{r.key[0]}.{r.key[1]}` {r.key[2]}".rstrip()
    return f"{name} ({r.environment})" if r.environment else name


def judged(reports: list[SeriesReport]) -> list[SeriesReport]:
    """The series whose newest point was judged or could be (not ``info``: a bound, a
    host-time metric, a metric no policy judges)."""
    return [r for r in reports if r.status != Status.INFO]


def _settings_steps(reports: list[SeriesReport]) -> str:
    """How many change points are the measurement's (a setting changed there) and how many
    are not."""
    steps = [(r, c.index) for r in reports for c in r.changes]
    timed = sum(r.settings_changed(i) is not None for r, i in steps)
    return f"{len(steps)} change points, {timed} where a measurement setting changed"


def history_markdown(reports: list[SeriesReport], machine: str, failed: list[dict] = ()) -> str:
    """Main's history; ``failed``: the newest commit's cells that failed (store rows)."""
    flagged = [
        r for r in reports if r.status in (Status.REGRESSION, Status.ACCEPTED, Status.IMPROVEMENT)
    ]
    moved = [r for r in reports if r.change_points]
    lines = [
        f"## ragbench detect: machine `{machine}`",
        "",
        f"{len(reports)} series; newest run against its lookback (same environment): "
        f"{sum(r.status == 'regression' for r in reports)} regression(s), "
        f"{sum(r.status == 'accepted' for r in reports)} accepted, "
        f"{sum(r.status == 'improvement' for r in reports)} improvement(s)"
        + (
            f", {n} timed with other measurement settings"
            if (n := sum(r.status == Status.SETTINGS for r in reports))
            else ""
        )
        + f"; {len(moved)} series with change points ({_settings_steps(moved)}); "
        f"{len(failed)} cell(s) failed on the newest commit.",
    ]
    if not judged(reports):
        lines += ["", "### Nothing was judged, so no verdict", "", "The policies judge none of "
                  "this machine's metrics (each `info`, or a bound that only the gate checks): "
                  "give them a kind and threshold in a policies file and pass it: `ragbench "
                  "detect --policies FILE` (docs/store.md, Detection)."]  # fmt: skip
    if failed:
        lines += ["", f"### Failed on the newest commit {failed[0]['commit_hash'][:12]}", ""]
        lines += [f"- `{r['benchmark']}.{r['metric']}` {r['param_key']}" for r in failed[:50]]
        if len(failed) > 50:
            lines.append(f"- ... and {len(failed) - 50} more")
    if flagged:
        lines += ["", "| series | newest | change | robust z | status |", "|---|---|---|---|---|"]
        for r in flagged:
            lines.append(
                f"| {_series(r)} | {number(r.points[-1].value)} | "
                f"{percent(r.latest_change)} | {number(r.latest_z, 3)} | {r.status} |"
            )
    settings = [r for r in reports if r.status == Status.SETTINGS]
    if settings:
        lines += [
            "",
            f"### Measurement setting changed on the newest run ({len(settings)} "
            "series: not judged as the code's)",
            "",
            "| series | newest | change | robust z | settings |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {_series(r)} | {number(r.points[-1].value)} | {percent(r.latest_change)} | "
                  f"{number(r.latest_z, 3)} | {r.note} |" for r in settings]  # fmt: skip
    if moved:
        lines += ["", "### Change points", "", "| series | at commit | before -> after | cause |",
                  "|---|---|---|---|"]  # fmt: skip
        for r in moved:
            for c in r.changes:
                i = c.index
                lines.append(
                    f"| {_series(r)} | {r.points[i].commit_hash[:12]} | "
                    f"{number(c.before)} -> {number(c.after)} | {r.describe_change(i)} |"
                )
    return "\n".join(lines) + "\n"
