"""One POST of the master (or local runner) to a route of the server under test — vLLM's ``/start_profile``,
``/reset_prefix_cache`` — with the run's headers and TLS choice, its answer kept as one line for run.json and the log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import requests

if TYPE_CHECKING:
    from locust.env import Environment

ANSWER_BODY_CHARS = 200  # of the answer's body kept in its line


@dataclass(frozen=True)
class Posted:
    status: int | None  # the HTTP status, None when no answer came
    answer: str  # its status line and the start of its body, or the error
    response: requests.Response | None


def post_route(environment: Environment, url: str, headers: dict[str, str], timeout_s: float) -> Posted:
    """POST ``url`` with ``headers`` (the server's: its API key), verifying TLS unless the run was --insecure."""
    options = environment.parsed_options
    assert options is not None
    try:
        response = requests.post(url, headers=headers, timeout=timeout_s, verify=not options.insecure)
    except requests.RequestException as e:
        return Posted(None, str(e), None)
    said = f"{response.status_code} {response.reason}".strip()
    body = response.text.strip()[:ANSWER_BODY_CHARS]
    return Posted(response.status_code, f"{said}: {body}" if body else said, response)
