"""How the load generator reaches the server: its API key, TLS, timeouts, source addresses and how long its
connections live (docs/guides/stress.md, "Connection churn")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import COMMAND_LINE, PATH
from vllm_stress.core.schema import CONNECTION_MODES, POOLED

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup

DEFAULT_REQUEST_TIMEOUT_S = 600.0


def add_arguments(group: OptionGroup) -> None:
    # not in the web UI: a form field's value is in the page
    group.add_argument(
        "--api-key",
        default="",
        form=COMMAND_LINE,
        env_var="OPENAI_API_KEY",
        help="Bearer token for the server (or OPENAI_API_KEY); never written to any output",
    )
    group.add_argument("--api-key-file", default="", form=PATH, help="Read the bearer token from this file")
    group.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="Seconds one request may take in total, and may stay silent, before it fails as Timeout",
    )
    group.add_argument(
        "--insecure",
        action="store_true",
        default=False,
        help="Do not verify the target's TLS certificate (self-signed test servers)",
    )
    group.add_argument(
        "--source-addresses",
        default="",
        help="Comma-separated local IPv4 addresses the connections to an http:// target leave from, in turn: each "
        "adds an ephemeral port range (about 28,000 connections per server) (default: the kernel picks one)",
    )
    group.add_argument(
        "--connections",
        choices=CONNECTION_MODES,
        default=POOLED,
        help="How long a user's connections live: pooled, for the user's lifetime (HTTP keep-alive); per-request, "
        "a new one for each request, closed after it; per-session, one per conversation of the session user or "
        "task of the agent user (other users: as pooled). A row's connect_s times the connection it opened",
    )
