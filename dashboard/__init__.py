"""The Streamlit dashboard over the results store: app (the pages and their registry), read
(its queries of the store), draw and svg (charts, pickers, tables), overview, alerts and
environments (pages of their own), paper (the paper's figures, an optional overlay)."""

from ragbench.verdicts.status import Status

# The pages, in the sidebar's order; Series is where the overview's links lead; Alerts is the
# landing page while an alert is new.
PAGES = ["Overview", "Alerts", "Dispatch floors", "Speedups", "Numeric drift", "Compare",
         "Versions", "Machines", "Series"]  # fmt: skip


def url_path(page: str) -> str:
    """A page's path under the app's root (streamlit's navigation): ``Dispatch floors`` ->
    ``dispatch-floors``."""
    return page.lower().replace(" ", "-")


# page name -> the function that draws it (app.py checks that every page has one)
RENDER: dict[str, object] = {}


def draws(name: str):
    """Register the decorated function as the one that draws page ``name``."""

    def register(fn):
        RENDER[name] = fn
        return fn

    return register


# The Compare table's order: what fails a gate first, then what it could not judge.
SEVERITY = (Status.FAILED, Status.MISSING, Status.VIOLATION, Status.REGRESSION,
            Status.INCONCLUSIVE, Status.HASH_CHANGED, Status.IMPROVEMENT, Status.NEW,
            Status.PRE_EXISTING, Status.UNCHANGED)  # fmt: skip
