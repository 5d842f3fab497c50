"""The suite's Locust plugin: its command-line options, Locust's worker-liveness constants set for long streams, and
the event listeners that make each process's ``Target`` (``environment.llm_target``) ready at test start. Imported by
every user class (``vllm_stress/users/base.py``, ``sdk.py``), so ``locust -f locustfiles/chat.py`` loads it."""

from __future__ import annotations

import logging

import gevent
import locust.runners
from locust import events

from vllm_stress.client import options as opts
from vllm_stress.client.stream import receive_clocks as receive_worker_clocks
from vllm_stress.client.stream import report_clocks
from vllm_stress.users.target import Target, prepare_target
from vllm_stress.webui import llmtab

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
def _add_options(parser, **_kw) -> None:
    opts.add_arguments(parser)


events.report_to_master.add_listener(report_clocks)
events.worker_report.add_listener(receive_worker_clocks)


@events.init.add_listener
def _on_init(environment, **_kw) -> None:
    # gevent's loop caches "now" between iterations and the locustfile's imports (the openai SDK's take seconds) ran
    # while it did not iterate: without a refresh, a timer set next, e.g. Locust's --run-time, fires that much early
    gevent.get_hub().loop.update_now()
    environment.llm_target = Target(environment)
    if environment.web_ui and environment.llm_target.live:  # the master's or the local runner's
        llmtab.register(environment.web_ui, environment.llm_target.live)
    if getattr(environment, "llm_prepare_pending", False):  # test_start came first
        prepare_target(environment)


@events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    if not hasattr(environment, "llm_target"):
        # a worker that joins a running test can get its spawn message (and fire test_start) while it connects,
        # before Locust has even set environment.runner and fired init: prepare at init (its users wait for it)
        environment.llm_prepare_pending = True
        return
    prepare_target(environment)


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    arrivals = getattr(getattr(environment, "llm_target", None), "arrivals", None)
    if arrivals:
        log.info("%s", arrivals.summary())
