"""The Streamlit dashboard over the results store (app.py)."""

# The pages, in the sidebar's order; Series is where the overview's links lead.
PAGES = ["Overview", "Dispatch floors", "Speedups", "Numeric drift", "Compare", "Versions",
         "Series"]  # fmt: skip
