"""The suite's Locust plugin: its command-line options, Locust's worker-liveness constants set for long streams, and
the event listeners that make each process's ``Target`` (``target.TARGETS[environment]``) ready at test start. Imported by
every user class (``vllm_stress/users/base.py``, ``sdk.py``), so ``locust -f locustfiles/chat.py`` loads it."""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

import gevent
import locust.runners
from locust import events

from vllm_stress.client import options as opts
from vllm_stress.client.stream import receive_clocks as receive_worker_clocks
from vllm_stress.client.stream import report_clocks
from vllm_stress.users.target import TARGETS, Target, prepare_target
from vllm_stress.webui import llmtab

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser
    from locust.env import Environment

log = logging.getLogger(__name__)

# Locust has no option for these two; they are module constants that its runners read at every check, so they are
# set here, once, at import. Heartbeats a worker may miss before the master calls it missing (Locust's default, 3,
# drops a worker whose loop is starved for 3 s, e.g. while it times 1,000 streams on a shared core; the master then
# stops the whole test).
locust.runners.HEARTBEAT_LIVENESS = 10
# Seconds without a heartbeat from the master before a worker quits by itself (Locust's default: 60), so that the
# workers of a master that was killed do not keep loading the server for a minute.
locust.runners.MASTER_HEARTBEAT_TIMEOUT = 15


@events.init_command_line_parser.add_listener
def _add_options(parser: LocustArgumentParser, **_kw: object) -> None:
    opts.add_arguments(parser)


events.report_to_master.add_listener(report_clocks)
events.worker_report.add_listener(receive_worker_clocks)

# a worker that joins a running test can get its spawn message (and fire test_start) while it connects, before
# Locust has even set environment.runner and fired init: such a test start is prepared at init (its users wait)
_test_started_before_init: weakref.WeakSet[Environment] = weakref.WeakSet()


@events.init.add_listener
def _on_init(environment: Environment, **_kw: object) -> None:
    # gevent's loop caches "now" between iterations and the locustfile's imports (the openai SDK's take seconds) ran
    # while it did not iterate: without a refresh, a timer set next, e.g. Locust's --run-time, fires that much early
    gevent.get_hub().loop.update_now()
    target = Target(environment)
    if environment.web_ui and target.live:  # the master's or the local runner's
        llmtab.register(environment.web_ui, target.live)
    if environment in _test_started_before_init:
        prepare_target(environment)


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_kw: object) -> None:
    if environment in TARGETS:
        prepare_target(environment)
    else:
        _test_started_before_init.add(environment)


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_kw: object) -> None:
    target = TARGETS.get(environment)
    if target and target.arrivals:
        log.info("%s", target.arrivals.summary())
