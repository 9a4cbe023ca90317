"""ragbench: runs the asv suite per commit, keeps what it measured, and gates regressions."""
