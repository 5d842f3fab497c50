"""The commands that answer a question about a deployment from runs or reports: the client and replica plan, the
what-if matrix against a calibrated twin and the calibration, the router's overhead, the parallel-query benchmark
(docs/concepts/scenarios.md)."""
