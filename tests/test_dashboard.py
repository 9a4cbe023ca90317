"""The dashboard: every page through streamlit's AppTest on a store filled through the real
ingest path (a synthetic history and this machine's real quick-suite results), the empty and
missing store, the overview's links, and a real browser (Debian chromium via playwright)."""

from __future__ import annotations

import functools
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ingest

from dashboard import PAGES, SEVERITY, svg
from dashboard.draw import escaped
from ragbench import synth
from ragbench.store import Store
from ragbench.suite_views import SUITE_VIEWS

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "dashboard" / "app.py")
AppTest = pytest.importorskip("streamlit.testing.v1").AppTest


@pytest.fixture(scope="module")
def store(quick_run, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("dash")
    history = synth.write_history(tmp / "history", 40)
    other = synth.write_history(tmp / "other", 40, machine="synthetic-b", gpu_scale=2.0)
    # two commits of ours: the overview's gate compares the latest commit with the previous
    results, _ = quick_run
    real = tmp / "real"
    shutil.copytree(results, real)
    src = next(p for p in real.glob("*/*.json") if p.name != "machine.json")
    data = json.loads(src.read_text())
    data["commit_hash"], data["date"] = "f" * 40, data["date"] + 3_600_000
    col = data["result_columns"].index("started_at")
    for row in data["results"].values():
        row[col] = (row[col] or 0) + 3_600_000
    copy = src.with_name(f"ffffffff{src.name[8:]}")
    copy.write_text(json.dumps(data))
    shutil.copy(src.with_suffix(".fingerprint"), copy.with_suffix(".fingerprint"))
    path = tmp / "perf.duckdb"
    with Store(path, views=SUITE_VIEWS) as s:
        report = ingest(s, [history, other, real], branch="main")
        assert len(report.stored) == 82 and not report.failed
    return path


@pytest.fixture(autouse=True, scope="module")
def one_component_scan():
    """Each new AppTest scans every installed distribution's metadata for streamlit's v2
    components (streamlit 1.67, ``scan_component_manifests``); what is installed does not
    change while these tests run, so the scan is made once."""
    scanner = pytest.importorskip("streamlit.components.v2.manifest_scanner")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scanner, "scan_component_manifests",
                   functools.cache(scanner.scan_component_manifests))  # fmt: skip
        yield


@pytest.fixture(autouse=True, scope="module")
def rollups(tmp_path_factory):
    """The dashboard's rollups (ragbench.store.rollup) of this module's stores, in its own tmp."""
    os.environ["RAGBENCH_DASHBOARD_CACHE"] = str(tmp_path_factory.mktemp("rollups"))


def app(store_path: Path, **query) -> AppTest:
    os.environ["RAGBENCH_STORE"] = str(store_path)
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


# Each run's pages and the page chosen, as streamlit's navigation got and gave them (AppTest
# shows no element for it): a spy on ``st.navigation``, which app.py calls on every run
NAVIGATED: list[tuple[list[str], str]] = []


@pytest.fixture(autouse=True)
def navigation(monkeypatch):
    import streamlit

    real = streamlit.navigation

    def spy(pages, *args, **kwargs):
        chosen = real(pages, *args, **kwargs)
        NAVIGATED.append(([p.title for p in pages], chosen.title))
        return chosen

    monkeypatch.setattr(streamlit, "navigation", spy)


def page_shown() -> str:
    """The page the app's last run drew."""
    return NAVIGATED[-1][1]


def texts(at) -> str:
    return "\n".join(str(getattr(e, "value", "")) for e in at.main)


def tables(node) -> list[pd.DataFrame]:
    """The tables drawn under ``node`` (``dashboard.draw.static_table``: markdown), as text."""
    found = []
    for md in node.markdown:
        lines = md.value.splitlines()
        if len(lines) > 1 and lines[1].startswith("|---"):
            rows = [[re.sub(r"\\(.)", r"\1", c.strip().replace("<wbr>", ""))
                     for c in re.split(r"(?<!\\)\|", x)[1:-1]] for x in lines]  # fmt: skip
            found.append(pd.DataFrame(rows[2:], columns=rows[0]))
    return found


def commands(node) -> list[str]:
    """The shell commands drawn under ``node`` (``dashboard.draw.command``: a code span)."""
    return [m[2] for md in node.markdown if (m := re.fullmatch(r"(`+) (.*) \1", md.value))]


def charts(node) -> list[str]:
    """The charts drawn under ``node`` (``dashboard.svg``: an SVG in a markdown element)."""
    return [md.value for md in node.markdown if md.value.startswith(f'<div class="{svg.CLASS}">')]


def items(chart: str, role: str) -> list[dict[str, str]]:
    """The items of ``chart`` of the mark ``role`` (``point``, ``rule mark``, ``rect mark``),
    each as the fields its hover text names (its ``<title>``: "field: value; ...")."""
    labels = re.findall(rf'aria-roledescription="{role}"[^>]*><title>([^<]*)</title>', chart)
    return [dict(part.split(": ", 1) for part in html.unescape(label).split("; "))
            for label in labels]  # fmt: skip


def test_overview(store):
    at = app(store)
    assert not at.exception
    text = texts(at)
    assert "synthetic: Synthetic GPU" in text and "ci: CPU" in text
    assert "Gate, latest commit against" in text and "Newest run against its lookback" in text
    assert "Sensitivity" in text  # the run's power beside its verdict


def test_the_overview_draws_each_flagged_series(tmp_path):
    """The newest commit's triton gpu_us 50% up: flagged against its lookback, linked, and
    drawn small on the overview."""
    history = synth.write_history(tmp_path / "h", 40)  # 10 runs in the newest environment
    files = sorted((history / synth.MACHINE).glob("*.json"), key=lambda p: json.loads(
        p.read_text())["date"])  # fmt: skip
    newest = json.loads(files[-1].read_text())
    row = newest["results"]["kernel.KernelLatency.track_gpu_us"]
    row[0] = [v * 1.5 for v in row[0]]
    row[11] = [[x * 1.5 for x in s] if s else s for s in row[11]]
    files[-1].write_text(json.dumps(newest))
    ingest(Store(tmp_path / "perf.duckdb"), [history], branch="main")
    # the ingest made it an alert: the dashboard opens on Alerts while it is new
    app(tmp_path / "perf.duckdb")
    assert page_shown() == "Alerts"
    at = app(tmp_path / "perf.duckdb", page="Overview")
    assert not at.exception
    assert "regression" in texts(at) and "(worse)" in texts(at)
    assert charts(at.main)


@pytest.mark.parametrize("page", [p for p in PAGES if p != "Overview"])
def test_every_page_renders_with_data(store, page):
    at = app(store, page=page, machine="synthetic")
    assert not at.exception, at.exception
    assert page_shown() == page
    if page == "Alerts":  # synth's history gets faster and changes torch: nothing went bad
        assert "No alerts" in texts(at)
        return
    if page == "Compare":  # the headline; the table by severity, hashes in hex
        assert any(w in texts(at) for w in ("PASS", "FAIL", "INCONCLUSIVE"))
        at.session_state["compare-unchanged"] = True  # the unchanged cells' table, opened
        at.run()
        df = pd.concat(tables(at))
        ranks = [SEVERITY.index(s) for s in df["status"]]
        assert ranks == sorted(ranks) and "change" in df
        # a change in words by its direction, or none
        words = r"-|no change|[0-9.]+% (slower|faster|more [^ ]+|fewer [^ ]+)|.*\((worse|better)\)"
        assert df["change"].str.fullmatch(words).all(), list(df["change"])
        hashes = df[df["metric"].str.endswith("output_hash")]
        assert not hashes.empty and hashes["base"].str.fullmatch(r"[0-9a-f]{12}").all()
        # a cell without a test has an empty p, not "None"; the rest 2 significant digits
        p = df["p (Holm)"]
        assert (p == "").any() and p.str.fullmatch(r"|[0-9.e+-]+").all(), list(p)
        # each note's number is explained under the table, numbered in the table's order
        numbers = list(dict.fromkeys(n for n in df["note"] if n))
        assert numbers and numbers == [f"[{i}]" for i in range(1, len(numbers) + 1)]
        assert all(f"{n} " in texts(at) for n in numbers)
    else:
        assert charts(at.main), page
    if page in ("Speedups", "Series"):  # opens on a timed metric, never a hash or drift
        assert at.selectbox(key="metric").value in ("img_per_s", "floor_us", "call_us")
    assert at.get("download_button"), page


def test_cpu_machine_pages(store):
    """This machine's own results: the CPU subset's drift and pipeline speedups."""
    at = app(store, page="Numeric drift", machine="ci")
    assert not at.exception and len(charts(at.main)) == 3
    at = app(store, page="Speedups", machine="ci")
    assert not at.exception and len(charts(at.main)) == 1


def test_series_link_and_change_points(store):
    at = app(store, page="Series", machine="synthetic", benchmark="kernel.KernelLatency",
             metric="gpu_us", cell="backend=triton,batch=64,geometry=deit_b,lengths=uniform,"
             "prune=0.8")  # fmt: skip
    assert not at.exception
    cell = "backend=triton,batch=64,geometry=deit_b,lengths=uniform,prune=0.8"
    picked = {s.key: s.value for s in at.selectbox}
    assert [picked[k] for k in ("benchmark", "metric", "cell")] == [
        "kernel.KernelLatency", "gpu_us", cell,
    ]  # fmt: skip
    # synth makes triton 10% faster at commit 20 of 40: one change point there
    assert "change points (red, over the newest 400 commits): 1" in texts(at)
    # and moves torch 2.10 -> 2.11 at commit 30: marked as a stack change, where it happened
    (chart,) = charts(at.main)
    (row,) = [r for r in items(chart, "rule mark") if "stack change" in r]
    assert row["commit #"] == "31" and "torch 2.10" in row["stack change"]
    assert "-> torch 2.11" in row["stack change"]


def test_the_filters_sit_in_a_popover_and_a_line_says_what_they_apply(store):
    """The rarely changed filters are in a popover (drawn only when opened: a first load
    fetches none of their scripts); a line under it names what they apply, and a store of one
    branch names it in a line instead of a select box."""
    at = app(store, page="Dispatch floors", machine="synthetic")
    inside = {type(w).__name__ for w in popovers(at.sidebar)["Filters"].children.values()}
    assert {"DateInput", "Multiselect", "Checkbox"} <= inside
    captions = [c.value for c in at.sidebar.caption]
    assert "branch (the history): main" in captions
    # the machine is picked in the sidebar, above its GPU and stack, not on the page
    assert [s.key for s in at.sidebar.selectbox] == ["machine"]
    assert "machine" not in [s.key for s in at.main.selectbox]
    assert not [c for c in captions if c.startswith("filtered:")]
    torch = at.sidebar.multiselect[0]
    assert torch.label == "torch"
    torch.select(torch.options[0]).run()
    assert not at.exception
    (line,) = [c.value for c in at.sidebar.caption if c.value.startswith("filtered:")]
    assert line == f"filtered: torch {torch.options[0]}"


def popovers(node) -> dict[str, object]:
    """The popovers under ``node`` (a block of the app's tree), by label."""
    return {b.proto.popover.label: b for b in node if getattr(b, "type", "") == "popover"}


def outside_popovers(node) -> list:
    """The select boxes, multiselects and radios under ``node`` that no popover holds."""
    inside = {id(w) for p in popovers(node).values() for w in p}
    kinds = ("Selectbox", "Multiselect", "Radio")
    return [w for w in node if type(w).__name__ in kinds and id(w) not in inside]


def test_every_page_keeps_its_pickers_in_a_popover_and_a_line_says_what_they_chose(store):
    """No page's first view draws a select box, a multiselect or a radio outside a popover
    (their scripts load only when one is opened; the pages are streamlit's navigation); the
    line under a page's pickers names each choice and follows a change, and the sidebar's
    names the machine."""
    for page in PAGES:
        at = app(store, page=page, machine="synthetic")
        assert not at.exception, page
        assert not outside_popovers(at.main) + outside_popovers(at.sidebar), page
        assert NAVIGATED[-1] == (PAGES, page)
    at = app(store, page="Series", machine="synthetic")
    assert [s.key for s in popovers(at.sidebar)["Machine"].selectbox] == ["machine"]
    assert "machine: synthetic" in [c.value for c in at.sidebar.caption]
    picked = popovers(at.main)["Pick the series"]
    assert [s.key for s in picked.selectbox] == ["benchmark", "metric", "cell"]

    def line() -> str:
        (found,) = [c.value for c in at.main.caption if c.value.startswith("benchmark: ")]
        return found

    def chosen() -> str:
        return " · ".join(f"{s.label}: {escaped(s.value)}" for s in picked.selectbox)

    assert line() == chosen()
    bench = picked.selectbox[0]
    other = next(o for o in bench.options if o != bench.value)
    bench.select(other).run()
    assert not at.exception
    picked = popovers(at.main)["Pick the series"]
    assert picked.selectbox[0].value == other and line() == chosen()


def test_paper_overlay(store):
    at = app(store, page="Speedups", machine="synthetic", benchmark="pipeline.Throughput",
             cell="batch=64,model=deit_base_224")  # fmt: skip

    def rules():
        return sum("stack change" not in r for c in charts(at.main) for r in items(c, "rule mark"))

    assert rules() == 0
    at.sidebar.checkbox[0].check().run()
    assert not at.exception
    assert rules() == 2  # the paper's speedups over padded_full and fa2 at BS 64


def test_missing_and_empty_store(tmp_path):
    at = app(tmp_path / "none.duckdb")
    assert not at.exception and "No results store at" in texts(at) and "make demo" in texts(at)
    Store(tmp_path / "empty.duckdb").close()
    at = app(tmp_path / "empty.duckdb")
    assert not at.exception and "holds no runs of branch `main` yet" in texts(at)
    (tmp_path / "bad.duckdb").write_text("not a database")
    at = app(tmp_path / "bad.duckdb")
    assert not at.exception and "cannot be read" in at.error[0].value


def test_failed_cells_accepted_changes_and_other_branches(tmp_path):
    """The newest main commit's failed cells on the Overview and its Series page; an accepted
    change marked on the Series page; a pull request's branch kept out of main's pages."""
    history = synth.write_history(tmp_path / "h", 12)
    files = sorted((history / synth.MACHINE).glob("*.json"), key=lambda p: json.loads(
        p.read_text())["date"])  # fmt: skip
    newest = json.loads(files[-1].read_text())
    newest["results"]["kernel.KernelLatency.track_gpu_us"][0][0] = None  # the benchmark raised
    files[-1].write_text(json.dumps(newest))
    path = tmp_path / "perf.duckdb"
    store = Store(path)
    ingest(store, [history], branch="main")
    accepted = json.loads(files[6].read_text())["commit_hash"]
    cell = "backend=triton,batch=1,geometry=deit_b,lengths=uniform,prune=0.8"
    store.accept(accepted, "kernel.KernelLatency", "gpu_us", cell, "label", "maintainer")
    at = app(path)  # the failed cell is an alert of main: the dashboard opens on it
    assert page_shown() == "Alerts"
    assert "failed: raised in 1 head run(s)" in list(tables(at)[0]["change"])
    at = app(path, page="Overview")
    assert not at.exception
    assert "1 cell(s) failed on the latest commit" in texts(at) and "1 failed" in texts(at)
    assert f"kernel.KernelLatency.gpu_us {cell}" in texts(at)
    at = app(path, page="Series", machine=synth.MACHINE, benchmark="kernel.KernelLatency",
             metric="gpu_us", cell=cell)  # fmt: skip
    assert not at.exception
    assert "accepted changes: 1" in texts(at) and "Failed (the benchmark raised) on" in texts(at)
    pr = tmp_path / "pr"
    shutil.copytree(history, pr)
    for p in (pr / synth.MACHINE).glob("*.json"):
        d = json.loads(p.read_text())
        d["env_name"] = "pr"
        p.write_text(json.dumps(d))
    ingest(store, [pr], branch="pr-feature")
    at = app(path, page="Compare", machine=synth.MACHINE)
    assert not at.exception
    assert [s.options for s in at.sidebar.selectbox if s.key == "branch"] == [
        ["main", "pr-feature"]
    ]
    assert len(at.selectbox(key="base").options) == 12  # main's commits only, once each


def test_the_series_page_names_the_newest_failed_commits_and_counts_the_rest(tmp_path):
    """A series whose benchmark raised on 14 of its 16 commits: the Series page names the
    newest ten, newest first, counts the other four, and its download lists all 14 (before,
    every failed commit in one error box: 1,400-odd on django-asv's ubuntu-latest)."""
    from dashboard.draw import FAILED_NAMED

    history = synth.write_history(tmp_path / "h", 16)
    files = sorted((history / synth.MACHINE).glob("*.json"), key=lambda p: json.loads(
        p.read_text())["date"])  # fmt: skip
    hashes = []
    for f in files[2:]:
        data = json.loads(f.read_text())
        data["results"]["kernel.KernelLatency.track_gpu_us"][0][0] = None  # the benchmark raised
        f.write_text(json.dumps(data))
        hashes.append(data["commit_hash"][:12])
    path = tmp_path / "perf.duckdb"
    ingest(Store(path), [history], branch="main")
    cell = "backend=triton,batch=1,geometry=deit_b,lengths=uniform,prune=0.8"
    at = app(path, page="Series", machine=synth.MACHINE, benchmark="kernel.KernelLatency",
             metric="gpu_us", cell=cell)  # fmt: skip
    assert not at.exception, at.exception
    (error,) = [e.value for e in at.error if e.value.startswith("Failed (the benchmark raised)")]
    newest = list(reversed(hashes))[:FAILED_NAMED]
    assert error.startswith(f"Failed (the benchmark raised) on 14 commit(s), newest first: "
                            f"{', '.join(newest)} and 4 more"), error  # fmt: skip
    assert not any(h in error for h in hashes[:4])
    assert at.get("download_button")


def test_real_browser(tmp_path):
    """``python -m dashboard`` serves the app; chromium renders it on a store of 200 synthetic
    commits (``make screenshots`` times the 1,000 of its figures, which took this test 35-40 s
    to ingest); a chart page's screenshot is not blank."""
    from scripts import screenshots

    if not os.path.exists(screenshots.CHROMIUM):
        pytest.skip("no /usr/bin/chromium (apt-get install chromium; .ci/run installs it)")
    from PIL import Image, ImageStat

    store = screenshots.synthetic_store(tmp_path / "store", commits=200)
    with screenshots.serve(store) as url, screenshots.browser() as page:
        screenshots.open_page(page, url, "Overview")  # a new browser's first page
        screenshots.open_page(page, url, "Dispatch floors", machine="synthetic")
        page.screenshot(path=str(tmp_path / "shot.png"))
        # a markdown table shows its cells as written: no escape, emphasis or link left
        screenshots.open_page(page, url, "Compare", machine="synthetic")
        table = page.locator("[data-testid='stMarkdown'] table").first
        cells = table.locator("td").all_inner_texts()
        assert any(re.fullmatch(r"backend=\w+,batch=\d+,.*", c) for c in cells), cells
        assert not table.locator("em, strong, a").count() and "\\" not in "".join(cells)
    image = Image.open(tmp_path / "shot.png").convert("L")
    assert max(ImageStat.Stat(image).stddev) > 10  # text and lines, not one colour


TRICKY = ["a|b", "*x* [l](u) $1$ :red[r] <b>c</b> &amp; <script>alert(1)</script>", "two\nlines",
          "backend=padded_sdpa,batch=64,geometry=deit_b"]  # fmt: skip


def test_a_table_and_a_command_show_their_text_in_a_browser(tmp_path):
    """Pipes, markdown, LaTeX, colour directives, HTML, newlines and backticks in a table's
    cells (``dashboard.draw.static_table``) or a command (``command``) are shown in chromium
    as the text they were (floats to 4 digits), a row a line; a long cell may wrap."""
    from scripts import screenshots

    if not os.path.exists(screenshots.CHROMIUM):
        pytest.skip("no /usr/bin/chromium (apt-get install chromium; .ci/run installs it)")
    script = tmp_path / "app.py"
    script.write_text(f"""import sys
sys.path.insert(0, {str(REPO)!r})
import pandas as pd
from dashboard.draw import command, static_table
static_table(pd.DataFrame({{"cell": {TRICKY!r}, "value": [1.23456, float("nan"), "`q`", 2]}}))
command("asv run 'a`b' | tee x")
""")
    server = screenshots.streamlit_server(["streamlit", "run", str(script)])
    with server as url, screenshots.browser() as page:
        page.goto(url)
        table = page.locator("[data-testid='stMarkdown'] table")
        table.wait_for(timeout=60_000)
        cells = table.locator("td").all_inner_texts()
        tags = table.evaluate("t => [...t.querySelectorAll('td *')].map(e => e.tagName)")
        code = page.locator("[data-testid='stMarkdown'] code").all_inner_texts()
    shown = [TRICKY[0], "1.235", TRICKY[1], "-", "two lines", "`q`", TRICKY[3], "2"]
    assert cells == shown and set(tags) == {"WBR"}, (cells, tags)
    assert code == ["asv run 'a`b' | tee x"]


def two_commits(backend: str) -> pd.DataFrame:
    """A chart's rows (``dashboard.draw.chart``): two commits of one line ``backend``."""
    return pd.DataFrame({"commit_hash": ["a" * 40, "b" * 40], "y": [1.0, 2.0],
                         "commit_time": pd.to_datetime(["2024-01-01 10:00", "2024-01-02 11:00"]),
                         "backend": [backend, backend]})  # fmt: skip


@pytest.mark.parametrize("template", ["https://example.org/c/{}", "javascript:alert('{}')"])
def test_a_chart_names_each_point_on_hover_and_links_only_to_web_pages(template, monkeypatch):
    """Each point of a chart (``dashboard.svg``) carries its commit, time and value as its
    hover text, and its commit's page as a link opened in a new tab; a commit URL template
    that is not http(s) (a project's config names it) links nowhere."""
    from dashboard.draw import chart_spec

    monkeypatch.setenv("RAGBENCH_COMMIT_URL", template)
    spec = chart_spec.__wrapped__(two_commits("triton"), "y", "backend", "t", (), None, None,
                                  False)  # fmt: skip
    drawn = svg.svg.__wrapped__(svg.spec_json(spec))
    hovers = [html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", drawn)]
    assert [h.split("; ")[1:5] for h in hovers] == [
        [f"y: {y}", "backend: triton", f"commit: {c * 12}", f"commit time: {t}"]
        for y, c, t in ((1, "a", "2024-01-01 10:00"), (2, "b", "2024-01-02 11:00"))
    ], hovers  # fmt: skip
    links = sorted(set(re.findall(r"<a [^>]*>", drawn)))  # each point's, and the line's
    if template.startswith("https"):
        assert links == [f'<a target="_blank" rel="noopener" xlink:href="https://example.org/c/'
                         f'{c * 40}">' for c in "ab"]  # fmt: skip
    else:
        assert links == [] and "url:" not in " ".join(hovers)


def test_another_projects_points_link_its_commits_never_this_repositorys(monkeypatch):
    """Found by an attack on the dashboard (a helper, this session): every point linked
    ``$RAGBENCH_COMMIT_URL`` (this repository's commit page), django's commits too. A point of
    another harness's environment links its project's commit page where the store keeps its
    config (``ragbench.project``), else nothing; this suite's points keep the template."""
    from dashboard.draw import chart_spec
    from ragbench.project import Project

    monkeypatch.setenv("RAGBENCH_COMMIT_URL", "https://github.com/org/ragged/commit/{}")
    django = two_commits("triton").assign(environment="conda-py3.12")
    mixed = two_commits("triton").assign(environment=["", "conda-py3.12"])
    project = Project("/x/asv.conf.json", "Django", "https://github.com/django/django.git",
                      "http://github.com/django/django/commit/")  # fmt: skip

    def links(df, of=None) -> list[str]:
        spec = chart_spec.__wrapped__(df, "y", None, "t", (), None, None, False, of)
        return sorted(set(re.findall(r'xlink:href="([^"]*)"', svg.svg.__wrapped__(
            svg.spec_json(spec)))))  # fmt: skip

    # a line of both: no link (vega reads a point's missing one as a page of its own site)
    assert links(django) == [] and links(mixed) == []
    assert links(two_commits("triton")) == [f"https://github.com/org/ragged/commit/{c * 40}"
                                            for c in "ab"]  # fmt: skip
    assert links(django, project) == [f"http://github.com/django/django/commit/{c * 40}"
                                      for c in "ab"]  # fmt: skip


def test_a_chart_vega_cannot_draw_is_one_line_on_the_page():
    """A spec vega fails on (here an expression that does not parse) is one line in the page
    where the chart would be, not a traceback."""

    class Page:
        def __init__(self):
            self.shown = []

        def error(self, text):
            self.shown.append(("error", text))

        def markdown(self, text, **_):
            self.shown.append(("markdown", text))

    page = Page()
    svg.show({"title": "drift", "data": {"values": [{"x": 1}]}, "mark": "point",
              "transform": [{"calculate": "datum.x +", "as": "y"}],
              "encoding": {"x": {"field": "y", "type": "quantitative"}}}, page)  # fmt: skip
    ((kind, text),) = page.shown
    assert kind == "error" and text.startswith("drift: not drawn (") and "\n" not in text, text
    assert "conversion failed" not in text


def test_a_chart_shows_its_text_as_written_in_a_browser(tmp_path):
    """Markdown, LaTeX, colour directives, HTML and entities in a chart's title, legend and
    hover text are shown in chromium as the text they were: no element is made of them."""
    from scripts import screenshots

    if not os.path.exists(screenshots.CHROMIUM):
        pytest.skip("no /usr/bin/chromium (apt-get install chromium; .ci/run installs it)")
    script = tmp_path / "app.py"
    script.write_text(f"""import sys
sys.path.insert(0, {str(REPO)!r})
import pandas as pd
from dashboard.draw import chart
rows = pd.DataFrame({{"commit_hash": ["a" * 40, "b" * 40], "y": [1.0, 2.0],
                     "commit_time": pd.to_datetime(["2024-01-01", "2024-01-02"])}})
chart(rows.assign(backend={TRICKY[1]!r}), "y", "backend", {TRICKY[1]!r}, key="k")
""")
    dialogs = []
    with screenshots.streamlit_server(["streamlit", "run", str(script)]) as url, \
            screenshots.browser() as page:  # fmt: skip
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(url)
        chart = page.locator(screenshots.CHART)
        chart.wait_for(timeout=60_000)
        texts = chart.evaluate("s => [...s.querySelectorAll('text')].map(t => t.textContent)")
        hovers = chart.evaluate("s => [...s.querySelectorAll('title')].map(t => t.textContent)")
        made = chart.evaluate("s => s.querySelectorAll('b, script, foreignObject').length")
    legend = texts[texts.index("backend") + 1]  # vega cuts a label at 160 px
    assert TRICKY[1] in texts and TRICKY[1].startswith(legend.rstrip("…")), texts
    assert len(hovers) == 2 and all(f"; backend: {TRICKY[1]}; " in h for h in hovers), hovers
    assert made == 0 and dialogs == []


def test_change_points_on_every_chart(store):
    at = app(store, page="Dispatch floors", machine="synthetic")
    at.sidebar.checkbox[1].check().run()
    assert not at.exception
    marked = [any("cause" in r for r in items(c, "rule mark")) for c in charts(at.main)]
    # synth: triton's kernel 10% faster at commit 20 of 40 (gpu_us); host time +8% at 30
    assert marked == [True, True, True]


def test_the_versions_page_judges_the_stacks_of_one_commit(quick_run, tmp_path):
    """One commit's real quick-suite run under two stacks (the second's fingerprint names
    another torch): the page shows each cell under both, and the gate's verdict of the newer
    stack against the older."""
    results, _ = quick_run
    real = tmp_path / "real"
    shutil.copytree(results, real)
    src = next(p for p in real.glob("*/*.json") if p.name != "machine.json")
    data = json.loads(src.read_text())
    data["env_name"] = "existing-py_upgraded"  # a run is one commit in one environment
    upgraded = src.with_name(f"{src.name[:8]}-existing-py_upgraded.json")
    upgraded.write_text(json.dumps(data))
    fp = json.loads(src.with_suffix(".fingerprint").read_text())
    old = fp["torch"]
    upgraded.with_suffix(".fingerprint").write_text(json.dumps({**fp, "torch": "9.9.9"}))
    path = tmp_path / "perf.duckdb"
    with Store(path) as s:
        report = ingest(s, [real], branch="main")
        assert len(report.stored) == 2 and not report.failed
    at = app(path, page="Versions", machine=data["params"]["machine"])
    assert not at.exception
    text = texts(at)
    assert f"**torch 9.9.9, triton {fp['triton']}** against torch {old}" in text
    assert "safe to upgrade" in text  # the same samples: nothing changed
    # the cells unchanged under every stack (the hashes) are drawn once their expander opens
    assert not any((t["metric"] == "cpu.KernelError.output_hash").any() for t in tables(at))
    at.session_state["versions-unchanged"] = True
    at.run()
    table = pd.concat(tables(at))
    new = f"torch 9.9.9, triton {fp['triton']}"
    assert {f"torch {old}, triton {fp['triton']}", new} <= set(table.columns)
    hashes = table[table["metric"] == "cpu.KernelError.output_hash"]
    assert len(hashes) == 4 and all(" · " not in x for x in hashes[new])  # unchanged: no word
    assert any(x.endswith(" · info") for x in table[new])  # img/s: shown, never judged


def test_the_versions_page_shows_what_versions_kept_and_tells_environments_apart(
    quick_run, tmp_path
):
    """Runs `ragbench versions --store` kept (a gate of one commit under two stacks, on no
    branch) are offered beside main's commits; two environments of one torch and triton (a
    numpy-only change) are two stacks, named by asv's environment, not pooled into one."""
    results, _ = quick_run
    real = tmp_path / "real"
    shutil.copytree(results, real)
    src = next(p for p in real.glob("*/*.json") if p.name != "machine.json")
    data = json.loads(src.read_text())
    other = src.with_name(f"{src.name[:8]}-existing-py_numpy2.json")
    other.write_text(json.dumps({**data, "env_name": "existing-py_numpy2"}))
    shutil.copy(src.with_suffix(".fingerprint"), other.with_suffix(".fingerprint"))
    gate = f"gate:{data['commit_hash'][:8]}-{data['commit_hash'][:8]}-1764000000"
    path = tmp_path / "perf.duckdb"
    with Store(path) as s:
        for f, side in ((src, "base"), (other, "head")):
            alone = tmp_path / side / src.parent.name
            alone.mkdir(parents=True)
            shutil.copy(f, alone)
            shutil.copy(f.with_suffix(".fingerprint"), alone)
            shutil.copy(src.parent / "machine.json", alone)
            report = ingest(s, [alone.parent], label=f"{gate}:{side}:0")
            assert len(report.stored) == 1 and not report.failed
        ingest(s, [real], branch="main")
    at = app(path, page="Versions", machine=data["params"]["machine"])
    assert not at.exception
    offered = at.selectbox(key="versions-commit").options
    assert any("kept by ragbench versions" in o for o in offered), offered
    text = texts(at)
    assert f"({data['env_name']})" in text and "(existing-py_numpy2)" in text, text
    assert "safe to upgrade" in text


def test_the_versions_picker_offers_the_newest_commits_the_wanted_one_and_every_kept_gate():
    """Of 600 commits measured under several stacks, the Versions picker offers the newest 500,
    the one the URL names, and what ``ragbench versions`` kept (before: every commit, 2,000-odd
    options a load on django-asv's ubuntu-latest)."""
    from dashboard.environments import KEPT, VERSION_CHOICES, offered

    commits = [f"{i:012x} (2026-01-01)" for i in range(600)]
    kept = f"{'f' * 12} (2026-01-01){KEPT}2026-02-01 10:00"
    labels = offered([*commits, kept], wanted=f"{599:012x}")
    assert labels == [*commits[:VERSION_CHOICES], commits[599], kept]
    assert offered(commits[:3]) == commits[:3]


def test_a_lake_shows_every_machine_and_compares_two(postgres, tmp_path):
    """A DuckLake store that two runners wrote: the overview lists both machines, and the
    Machines page puts one against the other on the commits both measured under one stack
    (the second GPU's device times are twice the first's: ratio 2)."""
    lake = postgres.lake(tmp_path)
    for name, scale in (("gpu-a", 1.0), ("gpu-b", 2.0)):
        history = synth.write_history(tmp_path / name, 12, machine=name, gpu_scale=scale)
        assert len(ingest(Store(lake), [history], branch="main").stored) == 12
    at = app(lake)
    assert not at.exception, at.exception
    assert "gpu-a: Synthetic GPU (gpu-a)" in texts(at) and "gpu-b" in texts(at)
    at = app(lake, page="Machines", machine="gpu-a", other="gpu-b",
             benchmark="kernel.KernelLatency", metric="gpu_us")  # fmt: skip
    assert not at.exception, at.exception
    df = tables(at)[0]
    assert len(df) == 12 and df["ratio"].astype(float).between(1.9, 2.1).all(), (
        df
    )  # 3 backends x 2 x 2
    assert len(charts(at.main)) == 1


# --- another project's results (item 6) and the smaller holes of issue 35 -----------------------

PUBLIC = Path(__file__).resolve().parent / "data" / "public" / "asv-astropy"


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    """asv's astropy results (tests/data/public: three environments, 13 commits, no samples, a
    failed and a skipped benchmark, one parameterized) through the real ingest path."""
    path = tmp_path_factory.mktemp("foreign") / "perf.duckdb"
    with Store(path) as s:
        # (two files that today's ingest refuses, params_examples.*, are the data helper's)
        assert ingest(s, [PUBLIC / "results"], branch="main").stored
    return path


SUITE_WORDS = ("ragged", "torch None", "triton None", "GPU: CPU", "torch ?", ": CPU")


def sidebar_text(at) -> str:
    return "\n".join(str(getattr(e, "value", "")) for e in at.sidebar)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_another_projects_results(foreign, page):
    """No page errs on astropy's results, none speaks of this suite's stack, and the pages
    that need this suite's metrics are not offered (a link to one opens the Overview)."""
    at = app(foreign, page=page, machine="cheetah")
    assert not at.exception, at.exception
    offered = NAVIGATED[-1][0]
    assert not {"Dispatch floors", "Speedups", "Numeric drift"} & set(offered)
    assert page_shown() == (page if page in offered else "Overview")
    text = texts(at) + sidebar_text(at)
    assert not [w for w in SUITE_WORDS if w in text], text
    assert not [c for c in at.sidebar.checkbox if "paper" in c.label]
    if page_shown() == "Overview":
        assert "cheetah" in text and "py2.7-Cython-numpy1.8" in text  # asv's environment
    if page == "Versions":  # the heatmap over asv's environments
        assert len(charts(at.main)) == 1
        assert any(f"{f} on this machine" in texts(at) for f in ("python", "env_name"))


def test_the_title_is_the_stores_project(foreign, tmp_path):
    """The title names the project that ingest found in asv.conf.json (``meta``'s
    ``project``), else a neutral one; never this suite's name for another's results."""
    at = app(foreign)
    assert at.sidebar.title[0].value in ("astropy performance", "Performance")
    named = tmp_path / "named.duckdb"
    shutil.copy(foreign, named)
    import duckdb

    with duckdb.connect(str(named)) as con:  # what ingest writes from asv.conf.json
        con.execute("INSERT OR REPLACE INTO meta VALUES ('project', 'astropy')")
    at = app(named)
    assert not at.exception and at.sidebar.title[0].value == "astropy performance"


def info_policies(tmp_path: Path) -> Path:
    path = tmp_path / "info.toml"
    path.write_text('[[policy]]\nmatch = "*"\nkind = "info"\n')
    return path


def test_compare_when_every_verdict_is_info(tmp_path, monkeypatch):
    """``--policies`` reaches the pages; where it judges nothing, Compare says so (it raised
    KeyError '_rank')."""
    history = synth.write_history(tmp_path / "h", 4)
    ingest(Store(tmp_path / "perf.duckdb"), [history], branch="main")
    monkeypatch.setattr(sys, "argv", [APP, "--policies", str(info_policies(tmp_path))])
    at = app(tmp_path / "perf.duckdb", page="Compare", machine=synth.MACHINE)
    assert not at.exception, at.exception
    assert "no cell of these commits is judged" in texts(at)
    assert "--policies FILE" in texts(at) and not tables(at)


def test_a_bad_policies_file_stops_the_dashboard(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[policy]]\nmatch = 1\nkind = 'nonsense'\n")
    out = subprocess.run([sys.executable, "-m", "dashboard", "--policies", str(bad)],
                         capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "bad.toml" in out.stderr


def pipe_results(out: Path) -> Path:
    """Another project's asv results (no fingerprint): two commits of a benchmark whose
    parameter values hold ``|``, the newest failed in one of them, and of a benchmark that
    benchmarks.json does not describe (no unit)."""
    bench, bare = "regex.Match.time_match", "regex.Match.track_groups"
    values = ["'a|b'", "'plain'"]
    (out / "runner").mkdir(parents=True)
    (out / "benchmarks.json").write_text(json.dumps({bench: {
        "name": bench, "param_names": ["pattern"], "params": [values], "unit": "seconds",
        "type": "time", "version": "1"}, "version": 2}))  # fmt: skip
    for i, result in enumerate(([1e-3, 2e-3], [None, 2e-3])):
        t = 1_700_000_000_000 + i * 3_600_000
        data = {"commit_hash": f"{i + 1:040x}", "env_name": "virtualenv-py3.12", "date": t,
                "params": {"machine": "runner"}, "python": "3.12", "requirements": {},
                "env_vars": {},
                "result_columns": ["result", "params", "version", "started_at", "duration"],
                "results": {bench: [result, [values], "1", t, 1.0],
                            bare: [[3.0 + i], [], "1", t, 1.0]},
                "durations": {}, "version": 2}  # fmt: skip
        (out / "runner" / f"{i:08x}-virtualenv-py3.12.json").write_text(json.dumps(data))
    return out


@pytest.fixture(scope="module")
def pipes(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("pipes")
    report = ingest(Store(tmp / "perf.duckdb"), [pipe_results(tmp / "results")], branch="main")
    assert len(report.stored) == 2 and not report.failed
    return tmp / "perf.duckdb"


def test_the_series_axis_says_no_unit_where_none_was_recorded(pipes):
    """A benchmark that benchmarks.json does not describe has no unit: the axis says so (it
    said "nan")."""
    at = app(pipes, page="Series", machine="runner", benchmark="regex.Match",
             metric="groups")  # fmt: skip
    assert not at.exception, at.exception
    (chart,) = charts(at.main)
    titles = re.findall(r"Y-axis titled '([^']*)'", html.unescape(chart))
    assert titles == ["groups (no unit recorded)"]


def test_a_pipe_in_a_param_value_keeps_the_overview_table(pipes):
    """The newest commit's failed cell ``pattern=a|b`` in the Overview's tables, as chromium
    draws them: three cells a row, the value whole (a bare ``|`` split the row)."""
    from scripts import screenshots

    if not os.path.exists(screenshots.CHROMIUM):
        pytest.skip("no /usr/bin/chromium (apt-get install chromium; .ci/run installs it)")
    with screenshots.serve(pipes) as url, screenshots.browser() as page:
        screenshots.open_page(page, url, "Overview")
        rows = page.locator("[data-testid='stMarkdownContainer'] table tbody tr").all()
        cells_of = [r.locator("td").all_inner_texts() for r in rows]
        piped = [cells for cells in cells_of if "pattern=a|b" in cells[0]]
        # the gate's failed cell and the latest commit's failed cells (the other cells of
        # time_match are judged too, by asv's kind: their rows beside them)
        assert piped and all(c[:2] == ["regex.Match.time_match pattern=a|b", "failed"]
                             for c in piped), cells_of  # fmt: skip
        assert all(len(cells) == 3 for cells in cells_of), cells_of


def test_a_long_line_is_thinned_keeping_the_newest_commits_and_each_change_point():
    """Over years a chart draws about MAX_POINTS points a line: the newest NEWEST commits
    each their own point, older ones binned at their median, a bin starting at each change
    point (its step stays at its commit); the bins hold every commit once."""
    import pandas as pd

    from dashboard.draw import MAX_POINTS, NEWEST, thinned

    n = 10_000
    df = pd.DataFrame({"commit #": range(1, n + 1), "commit": [f"c{i}" for i in range(n)],
                       "y": [1.0] * 4321 + [2.0] * (n - 4321)})  # fmt: skip
    lines = pd.concat([df.assign(backend=b) for b in ("triton", "fa2")])
    out = thinned(lines, "y", "backend", breaks=(4322,))
    for _, line in out.groupby("backend"):
        line = line.sort_values("commit #")
        assert MAX_POINTS <= len(line) <= MAX_POINTS + 1
        assert line["commits"].sum() == n
        newest = line.tail(NEWEST)
        assert list(newest["commit #"]) == list(range(n - NEWEST + 1, n + 1))
        assert (newest["commits"] == 1).all()
        step = line.set_index("commit #")["y"]
        assert step[4322] == 2.0 and step[step.index < 4322].iloc[-1] == 1.0
    assert len(thinned(df.head(MAX_POINTS), "y", None)) == MAX_POINTS


def test_commits_of_the_same_second_are_drawn_apart():
    """Two commits made in one second (the demo's own) each get their own x, and a change
    point on the second of them is drawn at it, not at the first."""
    import pandas as pd

    from dashboard.draw import chart_spec, numbered

    same = pd.Timestamp("2026-11-25 10:00:00")
    df = pd.DataFrame({"commit_hash": ["b" * 40, "a" * 40, "c" * 40],
                       "commit_time": [same, same, same + pd.Timedelta(seconds=1)],
                       "y": [1.0, 1.0, 2.0]})  # fmt: skip
    assert sorted(numbered(df)["commit #"]) == [1, 2, 3]
    cps = pd.DataFrame({"commit_time": [same], "commit": ["b" * 12], "cause": ["code"]})
    spec = chart_spec.__wrapped__(df, "y", None, "t", (), cps, None, False)
    assert list(spec["datasets"]["changes"]["commit #"]) == [2]  # "a..." is 1, "b..." 2


def test_a_log_axis_writes_every_tick_in_one_notation():
    import pandas as pd

    from dashboard.draw import chart_spec

    df = pd.DataFrame({"commit_hash": ["a" * 40, "b" * 40],
                       "commit_time": pd.to_datetime(["2026-01-01", "2026-01-02"]),
                       "d": [3e-5, 3e-7]})  # fmt: skip
    drawn = svg.svg.__wrapped__(svg.spec_json(chart_spec.__wrapped__(
        df, "d", None, "drift", (), None, None, True)))  # fmt: skip
    ticks = re.findall(r"<text [^>]*>([^<]*)</text>", drawn.split("Y-axis titled")[1])
    assert {"1e-5", "1e-6", "1e-7"} <= set(ticks), ticks
    assert not [t for t in ticks if re.fullmatch(r"[\d.]+", t)], ticks  # no "0.0000300"


def test_the_alerts_page_opens_while_one_is_new_and_its_buttons_change_the_state(tmp_path):
    """A step of main 10% slower: the dashboard opens on Alerts, which shows the alert's cells
    in words, the diff's commits, the repro and bisect commands; Acknowledge writes the state
    to the store, and with nothing new the dashboard opens on the Overview again."""
    from test_alerts import POLICIES, STEP, history, sha

    from ragbench.history import alerting as ragbench_alerts

    path = tmp_path / "perf.duckdb"
    store = Store(path)
    history(store, range(30), slow=set(range(STEP, 30)))
    ragbench_alerts.update(store, "m1", POLICIES)
    at = app(path)
    assert not at.exception, at.exception
    assert page_shown() == "Alerts"
    text = texts(at)
    assert f"**m1 at `{sha(STEP)[:12]}`**" in text and "**new**" in text
    table = tables(at)[0]
    assert set(table["cell"]) == {"kernel.KernelLatency.gpu_us backend=triton",
                                  "kernel.KernelLatency.gpu_us backend=fa2"}  # fmt: skip
    assert table["change"].str.fullmatch(r"(9|10|11)\.\d% slower").all(), list(table["change"])
    codes = commands(at)
    assert any(c.startswith(f"ragbench gate --base {sha(STEP - 1)[:12]}") for c in codes)
    assert any(c.startswith("ragbench bisect --cell") for c in codes)
    at.button(key=f"acknowledged-m1-{sha(STEP)}").click().run()
    assert not at.exception, at.exception
    (a,) = Store(path, read_only=True).alerts("m1")
    assert (a["state"], a["changed_by"]) == ("acknowledged", "dashboard")
    app(path)
    assert page_shown() == "Overview"  # nothing new: the usual landing


def test_an_alert_judged_by_another_rule_now_says_so(tmp_path, monkeypatch):
    """A step found under the shipped latency rule, the page drawn with every metric ``info``:
    the alert says its cells are judged by another rule now, as ``ragbench alerts`` does."""
    from test_alerts import POLICIES, STEP, history

    from ragbench.history import alerting as ragbench_alerts

    path = tmp_path / "perf.duckdb"
    store = Store(path)
    history(store, range(30), slow=set(range(STEP, 30)))
    ragbench_alerts.update(store, "m1", POLICIES)
    monkeypatch.setattr(sys, "argv", [APP, "--policies", str(info_policies(tmp_path))])
    at = app(path, page="Alerts")
    assert not at.exception, at.exception
    text = " ".join(c.value.replace("<wbr>", "").replace("\\", "") for c in at.caption)
    assert "Judged by another rule now, so no later commit marks them fixed" in text, text
    assert "`kernel.KernelLatency.gpu_us backend=fa2` (found under 'latency 0.02', now 'info')" \
        in text, text  # fmt: skip


def test_the_alerts_page_reads_the_series_of_the_alerts_shown_once(tmp_path, monkeypatch):
    """Two alerts of one series (+20% at 30, again at 50), then torch 2.11 takes it back down
    at 70: the Alerts page says so under each, and reads the series once for both (one query
    an environment; one alert at a time, 6.5 s an alert on django-asv's history)."""
    from test_alerts import POLICIES, series, sha

    from ragbench.history import alerting as ragbench_alerts
    from ragbench.store import reads

    path = tmp_path / "perf.duckdb"
    store = Store(path)
    stack = lambda i: "2.10.0" if i < 70 else "2.11.0"  # noqa: E731
    series(store, [10.0] * 30 + [12.0] * 20 + [14.4] * 20, torch=stack)
    ragbench_alerts.update(store, "m1", POLICIES)
    series(store, [10.0] * 25, start=70, torch=stack)
    ragbench_alerts.update(store, "m1", POLICIES)
    calls, read = [], reads.Reads.series_points
    monkeypatch.setattr(reads.Reads, "series_points",
                        lambda *a, **k: calls.append(a) or read(*a, **k))  # fmt: skip
    at = app(path, page="Alerts")
    assert not at.exception, at.exception
    since = [c.value for c in at.caption if c.value.startswith("Since then:")]
    assert len(since) == 2 and all(f"faster at {sha(70)[:12]}" in c for c in since), since
    assert len([c for c in calls if c[1:3] == ("m1", "")]) == 1, calls


def test_another_projects_alert_links_and_measures_that_project(tmp_path):
    """django-asv's published results (tests/data/public/asv-django): the Alerts page links
    django's own compare page and prints the re-measure and bisect commands of its asv config,
    as ``ragbench alerts`` does (before, this checkout's origin and a gate of this suite), and
    lists the steps where asv's number changed apart (before, not shown at all)."""
    path = tmp_path / "perf.duckdb"
    with Store(path) as s:
        ingest(s, [REPO / "tests/data/public/asv-django"], branch="main", log=lambda m: None)
    at = app(path)
    assert not at.exception, at.exception
    assert page_shown() == "Alerts"
    assert "https://github.com/django/django/compare/" in texts(at)
    codes = commands(at)
    conf = str(REPO / "tests/data/public/asv-django/asv.conf.json")
    assert codes and all(f"--config {conf}" in c for c in codes), codes
    # asv's number 89287 -> 1 at c9eb16a8: those steps listed apart, not alerted as the code's
    # the steps' table and the line of every alert are drawn once their expanders are opened
    (settings,) = [e for e in at.expander if "Measurement setting changed" in e.label]
    (listed,) = [e for e in at.expander if e.label.startswith("All 5 alerts")]
    assert not tables(settings) and not listed.markdown
    at.session_state["settings-steps"] = at.session_state["alerts-listed"] = True
    at.run()
    (settings,) = [e for e in at.expander if "Measurement setting changed" in e.label]
    (listed,) = [e for e in at.expander if e.label.startswith("All 5 alerts")]
    assert (
        listed.markdown[0].value.count("\n") == 4 and "ubuntu-latest at" in listed.markdown[0].value
    )
    table = tables(settings)[0]
    assert len(table) and table["setting"].str.contains("asv number").all(), table
    assert (table["commit"] == "c9eb16a87e60").all(), table


def test_an_alert_no_gate_can_re_measure_says_why(foreign, tmp_path):
    """An alert of astropy's in an environment asv named before 0.5 (``py2.7-Cython-numpy1.8``:
    no type), whose config names no environment_type: the Alerts page prints no re-measure
    command but the reason, as ``ragbench alerts`` does."""
    path = tmp_path / "perf.duckdb"
    shutil.copyfile(foreign, path)
    with Store(path) as s:
        base, head = [r["commit_hash"] for r in s.runs(machine="cheetah")][-2:]
        row = {"branch": "main", "machine": "cheetah", "commit_hash": head}
        s.save_alerts([{**row, "prev_commit_hash": base, "state": "new"}],
                      [{**row, "environment": "py2.7-Cython-numpy1.8", "benchmark": "time_units",
                        "metric": "time_unit_parse", "param_key": "", "unit": "seconds",
                        "kind": "latency", "before": 1.0, "after": 2.0,
                        "found_by": "change point"}])  # fmt: skip
    at = app(path, page="Alerts")
    assert not at.exception, at.exception
    (why,) = [c.value for c in at.caption if c.value.startswith("Not re\\-measured in")]
    assert "py2\\.7\\-Cython" in why and "environment\\_type" in why, why
    (bisect,) = [c.value for c in at.caption if c.value.startswith("Not bisected in")]
    assert bisect.endswith("as above"), bisect  # asv find cannot build it either
    assert not [c for c in commands(at) if c.startswith("ragbench gate")], commands(at)


def test_a_broken_bound_on_mains_newest_commit_shows_failing_on_every_page(tmp_path):
    """The kernel's error ratio 6,418 against its bound of 2 on main's newest two commits: the
    Overview fails (no PASS with 0 bound violations) and names the open alert, the Alerts page
    shows it, and the Series page says the newest run broke the bound."""
    from test_alerts import ERROR, numerics, sha

    path = tmp_path / "perf.duckdb"
    numerics(Store(path), [1.1] * 20 + [6418.0] * 2)
    at = app(path, page="Overview")
    assert not at.exception, at.exception
    text = texts(at)
    assert ": FAIL** - 0 regression(s), 1 bound violation(s) (1 broken on the commit before" in text
    assert any("1 open alert(s) of main on this machine, 1 new" in e.value for e in at.error)
    at = app(path)  # an alert is new: the dashboard opens on it
    assert page_shown() == "Alerts"
    assert f"**m1 at `{sha(20)[:12]}`**" in texts(at)
    assert list(tables(at)[0]["change"]) == ["violation: 6418 >= bound 2"]
    at = app(path, page="Series", machine="m1", benchmark=ERROR[0], metric=ERROR[1],
             cell="backend=triton dtype=float16")  # fmt: skip
    assert not at.exception, at.exception
    errors = " ".join(e.value for e in at.error)
    assert "status of the newest run: violation (6418 >= bound 2)" in errors, errors
    assert f"new alert at {sha(20)[:12]}: violation: 6418 >= bound 2" in errors


# --- environments kept apart, on Django's published asv results -------------------------------

DJANGO = Path(__file__).resolve().parent / "data" / "asv-django-envs"
FORM_CLEAN = ("form_benchmarks.form_clean.benchmark.FormClean", "time_form_clean")


@pytest.fixture(scope="module")
def django(tmp_path_factory) -> Path:
    """18 of django-asv's result files (tests/data/asv-django-envs: ubuntu-latest's newest 4
    commits under conda-py3.12 and conda-py3.13, two 2022 commits of ubuntu-latest and
    ubuntu-22.04 under conda-py3.9 and conda-py3.10, and macos-12, retired in 2022), copied
    into a tmp dir and ingested as main's history."""
    tmp = tmp_path_factory.mktemp("django")
    shutil.copytree(DJANGO / "results", tmp / "results")
    path = tmp / "perf.duckdb"
    with Store(path) as s:
        report = ingest(s, [tmp / "results"], branch="main")
        assert len(report.stored) == 18 and not report.failed
    return path


def test_the_default_machine_is_the_one_with_the_newest_run(django, tmp_path):
    """The sidebar opens on ubuntu-latest (its newest run of 2026), not macos-12 (the
    alphabetically first, retired in 2022); ``ragbench detect`` suggests the same machine."""
    at = app(django, page="Series")
    assert not at.exception, at.exception
    assert at.selectbox(key="machine").value == "ubuntu-latest"
    out = subprocess.run([sys.executable, "-m", "ragbench", "detect", "--store", str(django),
                          "--machine", "nowhere"], capture_output=True, text=True, cwd=REPO,
                         timeout=120)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "pass --machine ubuntu-latest" in out.stderr, out.stderr


def test_compare_judges_one_environment_at_a_time(django):
    """Compare offers ubuntu-latest's environments and judges the picked one's runs alone:
    each environment's head values are what the gate makes of that environment's runs (two
    Pythons' samples were pooled)."""
    from dashboard.draw import shown
    from ragbench.policies import POLICIES, load_policies
    from ragbench.verdicts import comparison as compare

    s = Store(django, read_only=True)
    runs = s.runs(machine="ubuntu-latest", frame=True)
    head, base = runs["commit_hash"].unique()[:2]
    for env in ("conda-py3.12", "conda-py3.13"):
        at = app(django, page="Compare", machine="ubuntu-latest", environment=env)
        assert not at.exception, at.exception
        (folded,) = [e for e in at.expander if e.label.endswith("unchanged cell(s)")]
        assert not tables(folded)  # drawn once opened
        at.session_state["compare-unchanged"] = True
        at.run()
        picker = at.selectbox(key="compare-environment")
        assert picker.value == env and {"conda-py3.12", "conda-py3.13"} <= set(picker.options)
        ids = {c: list(runs[(runs["commit_hash"] == c) & (runs["environment"] == env)]["run_id"])
               for c in (base, head)}  # fmt: skip
        assert len(ids[base]) == len(ids[head]) == 1
        c = compare.compare(compare.cells(s, ids[base]), compare.cells(s, ids[head]),
                            load_policies(POLICIES))  # fmt: skip
        expected = {f"{v.key[0]}.{v.key[1]}": shown(v.head, v.unit) for v in c.verdicts}
        df = pd.concat(tables(at))  # the changed cells', then the unchanged cells' table
        assert dict(zip(df["metric"], df["head"], strict=True)) == expected


def test_the_overview_gates_each_environment_and_names_it(django):
    """ubuntu-latest's newest commit ran under two Pythons: a gate for each against its own
    commit before, and the environment in the tables of flagged cells."""
    at = app(django, page="Overview")
    assert not at.exception, at.exception
    text = texts(at)
    for env in ("conda-py3.12", "conda-py3.13"):
        assert f"**Gate, latest commit against 4c4f8fd775c6 in {env}:" in text, text
    assert "| series | environment | status |" in text, text
    # the links open the series page (its path, from the root or another page's) in its
    # environment
    assert "](series?machine=ubuntu-latest&" in text and "&environment=conda-py3.1" in text


def test_the_series_page_draws_a_line_per_environment(django):
    """A benchmark without parameters: no cell picker ("Choose an option"); its series on
    ubuntu-latest is a line per Python, labelled, each with its own status; one environment
    picked, one line."""
    at = app(django, page="Series", machine="ubuntu-latest", benchmark=FORM_CLEAN[0],
             metric=FORM_CLEAN[1])  # fmt: skip
    assert not at.exception, at.exception
    assert "cell" not in {s.key for s in at.selectbox}
    (chart,) = charts(at.main)
    assert {p["environment"] for p in items(chart, "point")} == {
        "conda-py3.9", "conda-py3.10", "conda-py3.12", "conda-py3.13"}  # fmt: skip
    assert "legend titled 'environment'" in html.unescape(chart)
    text = texts(at)
    for env in ("conda-py3.12", "conda-py3.13"):
        assert f"status of the newest run in {env}: " in text, text
    at = app(django, page="Series", machine="ubuntu-latest", benchmark=FORM_CLEAN[0],
             metric=FORM_CLEAN[1], environment="conda-py3.13")  # fmt: skip
    assert not at.exception, at.exception
    (chart,) = charts(at.main)
    assert "legend titled" not in chart
    assert all("environment" not in p for p in items(chart, "point"))
    assert texts(at).count("status of the newest run") == 1


def test_the_machines_page_draws_a_ratio_line_per_environment(django):
    """ubuntu-22.04 against ubuntu-latest at two commits both measured under conda-py3.9 and
    conda-py3.10: a ratio line per environment (one line went back and forth between them)."""
    at = app(django, page="Machines", machine="ubuntu-22.04", other="ubuntu-latest",
             benchmark=FORM_CLEAN[0], metric=FORM_CLEAN[1])  # fmt: skip
    assert not at.exception, at.exception
    (chart,) = charts(at.main)
    stacks = pd.Series([p["stack"] for p in items(chart, "point")]).value_counts()
    assert sorted(stacks.items()) == [("conda-py3.10", 2), ("conda-py3.9", 2)]


@pytest.fixture(scope="module")
def public_django(tmp_path_factory) -> Path:
    """django-asv's public sample (tests/data/public/asv-django: ubuntu-latest's newest 100
    commits of conda-py3.12), ingested as main's history, its alerts open."""
    path = tmp_path_factory.mktemp("public-django") / "perf.duckdb"
    ingest(Store(path), [REPO / "tests" / "data" / "public" / "asv-django"], branch="main")
    return path


def test_no_page_names_a_cell_with_a_trailing_space(public_django):
    """django's benchmarks have no parameters: every page names their cells without the space
    an empty parameter list left inside backticks (the Overview's open alerts did)."""
    seen = 0
    for page in PAGES:
        at = app(public_django, page=page, machine="ubuntu-latest")
        assert not at.exception, (page, at.exception)
        # the code spans' text (a span's one space inside each end is markdown's, not text)
        spans = [s[1:-1] if s[0] == s[-1] == " " else s
                 for _, s in re.findall(r"(`+)([^`\n]+?)\1(?!`)", texts(at))]  # fmt: skip
        assert not [s for s in spans if s != s.strip()], (page, spans)
        seen += len(spans)
    assert seen > 20
