"""Load shapes and scenarios, in four rooms, each importing only those before it: ``shapes`` (the step ramp and the
timed shapes, run inside Locust), ``run`` (the scenario runner), ``search`` (the SLO search), ``studies`` (the plan,
what-if, calibration, router overhead and parallel-query commands); ``cli.py`` in front (docs/concepts/scenarios.md)."""
