"""The SLO search (``python -m scenarios search``): the highest concurrency or arrival rate that meets every SLO,
found by probing (docs/concepts/scenarios.md)."""
