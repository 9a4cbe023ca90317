"""A gate, base against head: its run (gating, revisions, runs, foreign), flagged cells measured
again (remeasure), settling (rerun), paired and drift comparisons, its report and JSON
(report, gate_json), and its one-line refusal (errors: ``GateError``)."""
