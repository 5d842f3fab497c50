"""Run folders to reports: per-level tables, peak and saturation, comparison, the results store."""
