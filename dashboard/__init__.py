"""The Streamlit dashboard over the results store (app.py)."""

# The pages, in the sidebar's order; Series is where the overview's links lead.
PAGES = ["Overview", "Dispatch floors", "Speedups", "Numeric drift", "Compare", "Versions",
         "Machines", "Series"]  # fmt: skip

# The Compare table's order: what fails a gate first, then what it could not judge.
SEVERITY = ("failed", "missing", "violation", "regression", "inconclusive", "hash-changed",
            "improvement", "new", "pre-existing", "unchanged")  # fmt: skip
