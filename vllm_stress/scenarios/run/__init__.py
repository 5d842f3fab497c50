"""Running a scenario: its config and matrix, the server it measures, the Locust master and workers it starts with their
time budget, its output folders, its one input error and the signals that stop it (docs/concepts/scenarios.md)."""
