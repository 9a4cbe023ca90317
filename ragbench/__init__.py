"""ragbench: runs the asv suite per commit, keeps what it measured, and gates regressions.

Rooms: ``store`` (all SQL), ``verdicts`` (two sets of cells judged), ``history`` (main's
change points and alerts), ``gate`` (a pull request's gate), ``commands`` (one module per
``ragbench`` verb, on top); beside them one module a job (docs/architecture.md maps each)."""
