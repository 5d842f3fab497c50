"""The run as the master (or a local runner) records it: the run folder, the levels' times, the server's metrics and
the load generators' health, the suite's own Locust events."""
