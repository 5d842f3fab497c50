"""Comparing runs: a baseline against a candidate, level by level, with the gate that fails a regression, and its
report."""
