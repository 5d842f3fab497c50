"""Load shapes and scenarios: the step ramp, the scenario runner, the SLO search, the client plan, the
parallel-query benchmark (docs/concepts/scenarios.md)."""
