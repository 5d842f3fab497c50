"""The suite's own Locust events, fired on the master or the local runner: the seams between the load shape, the
recorder and the web UI (a plugin of your own can listen too)."""

from locust.event import EventHook

PHASES = ("ramping", "warming_up", "holding", "cooling_down")  # a level's phases, in order

level_started = EventHook()
"""A level's ramp begins. Arguments: ``environment``, ``users`` (the level's target user count), ``judged`` (False: a
timed shape's stretch at users judged before, not a level; its rows carry ``users``)."""

level_held = EventHook()
"""Every user of the open level runs and has warmed up: its measured window (the hold) begins. Arguments:
``environment``, ``hold_start`` (unix seconds: where the hold starts in ``levels.csv``; None: now)."""

level_ended = EventHook()
"""The open level's hold is over. Arguments: ``environment``, ``users``, ``verdict`` (a
``vllm_stress.core.steady.Verdict`` on the hold, None when it was not judged), ``output_tokens_per_s`` (streamed
during the hold, NaN if unknown), ``schedule_lag_p99_s`` (open loop: of the hold's requests, NaN otherwise; an
input of the level's bound) and ``hold_end`` (unix seconds: where the hold ends in ``levels.csv``; an auto hold ends
where the window its verdict judged ends, so the report judges the same window; None: now)."""

ramp_stopped = EventHook()
"""The load shape ends the run early, after the level it has just judged, as a ``--stop-on`` rule tripped (its levels
that ran are kept). Arguments: ``environment``, ``users`` (the level), ``reason`` ("errors 7.2% > 5%")."""

server_scraped = EventHook()
"""The master (or local runner) scraped the server's /metrics. Arguments: ``environment``, ``row`` (the scrape by
``server_metrics.csv`` column, the replicas' numbers summed; ``time``: unix seconds; "" where unknown)."""

phase_changed = EventHook()
"""The load shape entered a phase. Arguments: ``environment``, ``text`` (e.g. "Level 2/6 (50 users): warming up ..."),
``limit_s`` (the longest the phase lasts, None when unbounded), ``phase`` ("ramping", "warming_up", "holding" or
"cooling_down": ``PHASES``)."""

rows_received = EventHook()
"""Finished requests reached the master or local runner (they are being written to ``requests.csv``). Arguments:
``environment``, ``rows`` (lists in ``vllm_stress.core.schema.REQUEST_COLUMNS`` order)."""

in_flight_reported = EventHook()
"""What one process's requests still in flight have streamed so far. Arguments: ``environment``, ``source`` (a worker
id, or "local"), ``report_time`` (unix seconds), ``entries`` ([start, first token or start, chunks] per request)."""

working_set_changed = EventHook()
"""A working-set sweep's level begins (``--shape working-set:...``): the prompts from now on draw from its contexts.
Arguments: ``environment``, ``contexts`` (distinct shared prefixes; None: the sweep is over), ``tokens`` (its working set: contexts ×
--prefix-tokens)."""

working_set_held = EventHook()
"""A working-set sweep's level was held: its window goes to run.json's ``working_set``. Arguments: ``environment``,
``contexts``, ``tokens``, ``start`` and ``end`` (unix seconds of its hold)."""
