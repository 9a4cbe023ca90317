"""The Streamlit dashboard over the results store (app.py)."""

from ragbench.verdicts.status import Status as S

# The pages, in the sidebar's order; Series is where the overview's links lead; Alerts is the
# landing page while an alert is new.
PAGES = ["Overview", "Alerts", "Dispatch floors", "Speedups", "Numeric drift", "Compare",
         "Versions", "Machines", "Series"]  # fmt: skip
# page name -> the function that draws it (app.py checks that every page has one)
RENDER: dict[str, object] = {}


def draws(name: str):
    """Register the decorated function as the one that draws page ``name``."""

    def register(fn):
        RENDER[name] = fn
        return fn

    return register


# The Compare table's order: what fails a gate first, then what it could not judge.
SEVERITY = (S.FAILED, S.MISSING, S.VIOLATION, S.REGRESSION, S.INCONCLUSIVE, S.HASH_CHANGED,
            S.IMPROVEMENT, S.NEW, S.PRE_EXISTING, S.UNCHANGED)  # fmt: skip
