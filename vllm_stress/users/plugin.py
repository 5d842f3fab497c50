"""The suite's Locust plugin: its options, Locust's worker-liveness constants, and the listeners that make each
process's ``Target`` ready at test start. Every user class imports it."""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
from typing import TYPE_CHECKING

import gevent
import locust.argument_parser
import locust.runners
from locust import events

from vllm_stress.client import options as opts
from vllm_stress.client.stream import receive_clocks as receive_worker_clocks
from vllm_stress.client.stream import report_clocks
from vllm_stress.master import promexport
from vllm_stress.master.fdlimits import FdLimits
from vllm_stress.users.target import TARGETS, Target, prepare_target
from vllm_stress.webui import llmtab

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser
    from locust.env import Environment

    from vllm_stress.master.spanreceiver import SpanReceiver

log = logging.getLogger(__name__)

# Locust has no option for these two constants; why these values: docs/concepts/load-generator.md, "Worker liveness"
locust.runners.HEARTBEAT_LIVENESS = 10  # heartbeats a worker may miss before the master calls it missing (Locust: 3)
locust.runners.MASTER_HEARTBEAT_TIMEOUT = 15  # seconds before a worker without its master quits (Locust: 60)
# A worker builds Locust's whole argument parser again for each option of each spawn message (runners.py, "spawn":
# default_args_dict() inside a comprehension): with the suite's options, about 0.3 s of CPU per message, and a ramp
# sends one a second, so a busy worker fell behind and lost its heartbeats (benchmarks/scale.md). Its defaults never
# change in a process: built once.
locust.argument_parser.default_args_dict = functools.cache(locust.argument_parser.default_args_dict)


@events.init_command_line_parser.add_listener
def _add_options(parser: LocustArgumentParser, **_kw: object) -> None:
    opts.add_arguments(parser)


events.report_to_master.add_listener(report_clocks)
events.worker_report.add_listener(receive_worker_clocks)

# a worker that joins a running test can get its spawn message (and fire test_start) while it connects, before
# Locust has even set environment.runner and fired init: such a test start is prepared at init (its users wait)
_test_started_before_init: set[Environment] = set()


@events.init.add_listener
def _on_init(environment: Environment, **_kw: object) -> None:
    # gevent's loop caches "now" between iterations and the locustfile's imports (the openai SDK's take seconds) ran
    # while it did not iterate: without a refresh, a timer set next, e.g. Locust's --run-time, fires that much early
    gevent.get_hub().loop.update_now()
    _interrupt_here_on_sigint()
    FdLimits(environment)  # the soft RLIMIT_NOFILE up to the hard one; a worker tells the master
    target = Target(environment)
    if environment.web_ui and target.live:  # the master's or the local runner's
        llmtab.register(environment.web_ui, target.live)
    if target.live and target.options.metrics_port:
        _serve_metrics(target.options, target.live.metrics)
    if target.spans:
        _serve_spans(target.options, target.spans)
    if environment in _test_started_before_init:
        prepare_target(environment)


def _interrupt_here_on_sigint() -> None:
    """Ctrl-C raises KeyboardInterrupt in the greenlet that fires init, Locust's main one, where Locust shuts down on
    it: Python's own handler raises it in whichever greenlet runs when the signal comes, and a user greenlet dies of it
    with a traceback before gevent passes it on. A process started with SIGINT ignored (a shell's background job) keeps
    ignoring it."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        gevent.signal_handler(signal.SIGINT, gevent.getcurrent().throw, KeyboardInterrupt)


def _serve_metrics(options: argparse.Namespace, export: promexport.PromExport) -> None:
    """The Prometheus series on --metrics-port for the process's lifetime; a port that cannot be bound ends the
    process at once (exit code 2, one line)."""
    host = "" if options.web_host == "*" else options.web_host
    try:
        promexport.serve(export, host, options.metrics_port)
    except OSError as e:
        log.error("--metrics-port %d: %s", options.metrics_port, e.strerror or e)
        sys.exit(2)


def _serve_spans(options: argparse.Namespace, receiver: SpanReceiver) -> None:
    """The OTLP span receiver on --otlp-port for the process's lifetime; a port that cannot be bound ends the process
    at once (exit code 2, one line)."""
    host = "" if options.web_host == "*" else options.web_host
    try:
        receiver.serve(host)
    except OSError as e:
        log.error("--otlp-port %d: %s", options.otlp_port, e.strerror or e)
        sys.exit(2)


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
