"""main's history: its series and their lookback (series), the stored change points (edivisive),
the alerts made of them (alerting), and their update after new runs are stored (detection)."""
