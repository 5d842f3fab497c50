"""The one error of the scenario commands: a problem with their input, printed as one line (exit code 2)."""


class ScenarioError(Exception):
    """A problem with the scenario's input, reported as one line."""
