"""A profile at the knee (``--profile-at USERS``, ``--profile-when-running N``): the master POSTs vLLM's
``/start_profile`` when the step ramp's level of USERS begins its hold, or when a scrape of the server's /metrics
shows N requests running (vllm:num_requests_running), and ``/stop_profile`` ``--profile-seconds`` later (or at the
test's stop, if sooner), once per test. vllm serve has the two routes only with a profiler configured (vLLM 0.32's
``--profiler-config``, ``VLLM_TORCH_PROFILER_DIR`` before): without one it answers 404, and the run says in one line
that the server does not profile and goes on. run.json's ``profile`` records what was asked, when each POST was sent
and what the server answered."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import gevent

from vllm_stress.core import fleet
from vllm_stress.master import hooks
from vllm_stress.master.serverpost import post_route

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.master.runfiles import RunFiles, ServerUnderTest

log = logging.getLogger(__name__)

PROFILE_TIMEOUT_S = 60.0  # vLLM writes its traces when it stops profiling: that can take long


def asked(options: Any) -> dict[str, Any] | None:
    """What the options ask: {"at_users", "when_running", "seconds"}, None for no profile."""
    at, running = getattr(options, "profile_at", None), getattr(options, "profile_when_running", None)
    if at is None and running is None:
        return None
    return {"at_users": at, "when_running": running, "seconds": options.profile_seconds}


class KneeProfile:
    """The master's (or local runner's) profile of the server: started once per test when its moment comes."""

    def __init__(self, environment: Environment, run: RunFiles, server: ServerUnderTest) -> None:
        self.environment = environment
        self.run = run
        self.server = server
        self.users = 0  # the step ramp's open level
        self.record: dict[str, Any] | None = None  # run.json's profile once started
        self.timer: gevent.Greenlet[[], None] | None = None
        environment.events.test_start.add_listener(self.on_test_start)
        environment.events.test_stop.add_listener(self.on_test_stop)
        hooks.level_started.add_listener(self.on_level_started)
        hooks.level_held.add_listener(self.on_level_held)
        hooks.server_scraped.add_listener(self.on_scraped)

    @property
    def asked(self) -> dict[str, Any] | None:
        return asked(self.environment.parsed_options)

    def on_test_start(self, **_kw: object) -> None:
        self.record, self.users = None, 0

    def on_level_started(self, environment: Environment, users: int, **_kw: object) -> None:
        if environment is self.environment:
            self.users = users

    def on_level_held(self, environment: Environment, **_kw: object) -> None:
        if environment is self.environment and (what := self.asked) and what["at_users"] == self.users:
            self.start(what)

    def on_scraped(self, environment: Environment, row: dict[str, Any], **_kw: object) -> None:
        what = self.asked
        if environment is not self.environment or not what or what["when_running"] is None:
            return
        if isinstance(row.get("running"), (int, float)) and row["running"] >= what["when_running"]:
            self.start(what)

    def start(self, what: dict[str, Any]) -> None:
        """POST /start_profile (once per test) and, when the server profiles, /stop_profile ``seconds`` later."""
        if self.record is not None:
            return
        self.record = {"asked": what, "started": time.time(), **self.post("start")}
        self.run.update({"profile": self.record})
        if self.record["start_status"] == 200:
            log.info("Profiling the server for %g s (POST /start_profile answered 200)", what["seconds"])
            self.timer = gevent.spawn_later(what["seconds"], self.stop)
        elif self.record["start_status"] == 404:
            log.warning(
                "The server does not profile (POST /start_profile: 404): vllm serve has the route only with a "
                "profiler configured (--profiler-config); the run goes on"
            )
        else:
            log.warning("POST /start_profile: %s; the run goes on", self.record["start_answer"])

    def stop(self) -> None:
        """POST /stop_profile, if a profile is under way."""
        if self.record is None or "stopped" in self.record or self.record["start_status"] != 200:
            return
        self.record["stopped"] = time.time()  # before the POST: a stop under way is not sent again
        self.record.update(self.post("stop"))
        self.run.update({"profile": self.record})
        log.info("Profile stopped (POST /stop_profile: %s)", self.record["stop_answer"])

    def on_test_stop(self, **_kw: object) -> None:
        if self.timer:
            if self.record and "stopped" in self.record:  # its /stop_profile is under way: its answer is awaited
                self.timer.join(timeout=PROFILE_TIMEOUT_S)
            self.timer.kill(block=True)
            self.timer = None
        self.stop()

    def post(self, verb: str) -> dict[str, Any]:
        """POST /{verb}_profile to the server (the first replica of --host): {verb_status (None: no answer),
        verb_answer (its status line and body, or the error)}."""
        url = f"{fleet.replica_urls(self.environment.host or '')[0]}/{verb}_profile"
        posted = post_route(self.environment, url, self.server.headers, PROFILE_TIMEOUT_S)
        return {f"{verb}_status": posted.status, f"{verb}_answer": posted.answer}
