"""main's history: series and lookback (series), stored change points (edivisive), alerts and
their steps (alerting, steps), their update after an ingest (detection), its report (report)."""
