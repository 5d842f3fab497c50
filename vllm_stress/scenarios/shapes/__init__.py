"""The load over time, the Locust side of a scenario: the step ramp's options and its shape class, and the timed shapes
(spike, diurnal, trace) run as constant stretches (docs/concepts/scenarios.md)."""
