"""A gate: base against head, measured or stored (gating), the re-measurement of flagged cells
(remeasure), the settle plan (plan), and the paired and drift comparisons (paired, drift)."""
