"""A cold prefix cache at each level (``--reset-prefix-cache``): as a step-ramp level begins its ramp, the master (or
local runner) POSTs vLLM's ``/reset_prefix_cache?reset_running_requests=true&reset_external=true`` to each replica of
--host, so no level hits what the one before it cached (docs/concepts/prefix-hit-rate.md, "A cold cache per
level"). vLLM preempts the requests still running (recomputed in the ramp, which is not measured) and empties its
GPU prefix cache and its KV connector's. vllm serve has the route only with ``VLLM_SERVER_DEV_MODE=1``: without it
404, and the run says in one line that its levels start warm and goes on. run.json's ``prefix_cache_resets`` records
each level's answers; the report's warm-up hit rate says how warm each level began, reset or not."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from vllm_stress.core import fleet
from vllm_stress.master import hooks
from vllm_stress.master.serverpost import post_route

if TYPE_CHECKING:
    import requests
    from locust.env import Environment

    from vllm_stress.master.runfiles import RunFiles, ServerUnderTest

log = logging.getLogger(__name__)

RESET_PATH = "/reset_prefix_cache?reset_running_requests=true&reset_external=true"
RESET_TIMEOUT_S = 30.0
NOT_SERVED = (
    "the server does not reset its prefix cache (POST /reset_prefix_cache: {status}): vllm serve has the route only "
    "with VLLM_SERVER_DEV_MODE=1; the levels start with what the one before cached (the report's warm-up hit rate "
    "says how much)"
)


class CacheReset:
    """The master's resets of the server's prefix cache, one per level of the step ramp."""

    def __init__(self, environment: Environment, run: RunFiles, server: ServerUnderTest) -> None:
        self.environment = environment
        self.run = run
        self.server = server
        self.resets: list[dict[str, Any]] = []  # run.json's prefix_cache_resets
        environment.events.test_start.add_listener(self.on_test_start)
        hooks.level_started.add_listener(self.on_level_started)

    def on_test_start(self, **_kw: object) -> None:
        self.resets = []

    def on_level_started(self, environment: Environment, users: int, judged: bool = True, **_kw: object) -> None:
        options = environment.parsed_options
        if environment is not self.environment or not judged or not getattr(options, "reset_prefix_cache", False):
            return
        answers = {fleet.replica_name(url): self.post(url) for url in fleet.replica_urls(environment.host or "")}
        reset = all(answer["success"] for answer in answers.values())
        self.resets.append({"users": users, "time": time.time(), "reset": reset, "replicas": answers})
        self.run.update({"prefix_cache_resets": self.resets})
        statuses = {answer["status"] for answer in answers.values()}
        if reset:
            log.info("Level %d users: the server's prefix cache emptied (POST /reset_prefix_cache)", users)
        elif len(self.resets) == 1 and statuses <= {404, 405}:
            log.warning(NOT_SERVED.format(status=", ".join(map(str, sorted(statuses)))))
        else:
            said = "; ".join(f"{name}: {answer['answer']}" for name, answer in answers.items())
            log.warning("Level %d users starts warm: POST /reset_prefix_cache: %s", users, said)

    def post(self, base_url: str) -> dict[str, Any]:
        """POST the reset to one replica: {status (None: no answer), success, answer (its status line and body)}."""
        posted = post_route(self.environment, base_url + RESET_PATH, self.server.headers, RESET_TIMEOUT_S)
        return {"status": posted.status, "success": said_success(posted.response), "answer": posted.answer}


def said_success(response: requests.Response | None) -> bool:
    """Whether the server answered that it reset: 2xx and ``{"success": true}`` (an older vLLM's 2xx without a
    JSON body said nothing more)."""
    if response is None or not response.ok:
        return False
    try:
        return bool(response.json().get("success"))
    except ValueError:
        return True
