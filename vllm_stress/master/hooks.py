"""The suite's own Locust events: ``EventHook``s, as Locust's ``EventHook`` docstring shows, fired with keyword
arguments (``environment`` first) on the master or the local runner. They are the seams between the load shape
(``scenarios/shape.py``), the recorder (``vllm_stress/master/runrecorder.py``) and the web UI (``vllm_stress/webui/progress.py``,
``webui.py``, ``dashboard.py``): none of them reaches into another. A plugin of your own can listen too, e.g.::

    from vllm_stress.master import hooks

    @hooks.level_ended.add_listener
    def on_level_ended(environment, users, verdict, output_tokens_per_s, **_kw):
        print(users, verdict and verdict.steady, output_tokens_per_s)
"""

from locust.event import EventHook

level_started = EventHook()
"""A level's ramp begins. Arguments: ``environment``, ``users`` (the level's target user count)."""

level_held = EventHook()
"""Every user of the open level runs and has warmed up: its measured window (the hold) begins. Arguments:
``environment``."""

level_ended = EventHook()
"""The open level's hold is over. Arguments: ``environment``, ``users``, ``verdict`` (a ``vllm_stress.core.steady.Verdict``
on the hold, None when it was not judged), ``output_tokens_per_s`` (streamed during the hold, NaN if unknown) and
``schedule_lag_p99_s`` (open loop: of the hold's requests, NaN otherwise; an input of the level's bound)."""

phase_changed = EventHook()
"""The load shape entered a phase. Arguments: ``environment``, ``text`` (e.g. "Level 2/6 (50 users): warming up ..."),
``limit_s`` (the longest the phase lasts, None when unbounded)."""

rows_received = EventHook()
"""Finished requests reached the master or local runner (they are being written to ``requests.csv``). Arguments:
``environment``, ``rows`` (lists in ``vllm_stress.core.schema.REQUEST_COLUMNS`` order)."""

in_flight_reported = EventHook()
"""What one process's requests still in flight have streamed so far. Arguments: ``environment``, ``source`` (a worker
id, or "local"), ``report_time`` (unix seconds), ``entries`` ([start, first token or start, chunks] per request)."""
